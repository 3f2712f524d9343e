package transport_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/transport"
)

// TestLinkOfARequestWithNoHost: an HTTP/1.0 request may carry no Host
// header; a device link or share link made for it starts with the
// address the request reached (its listener's), under the prefix, so
// that the link opens the page. Before, the base was "http://" and the
// link "http://d#chd_…" (a host named d) or, under a prefix,
// "http:///spaces/x/p#chp_…" (an outside probe's finding).
func TestLinkOfARequestWithNoHost(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "/spaces/x"} {
		e := startPush(t, pushOptions{config: func(c *transport.Config) { c.Prefix = prefix }})
		owner := tokenN(1)
		st, _, b := e.do(http.MethodPost, prefix+chatrelay.PathPost, owner, `{"text":"hello"}`, nil)
		assert.Equal(t, "post "+string(b), st, http.StatusCreated)
		addr := strings.TrimPrefix(e.ts.URL, "http://")
		for path, page := range map[string]string{chatrelay.PathDevices: "/d#chd_", chatrelay.PathParticipants: "/p#chp_"} {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			assert.Success(t, err)
			assert.Success(t, c.SetDeadline(time.Now().Add(10*time.Second)))
			body := `{"name":"Phone"}`
			_, err = fmt.Fprintf(c, "POST %s%s HTTP/1.0\r\nX-Chat-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", prefix, path, owner, len(body), body)
			assert.Success(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			assert.Success(t, err)
			var ans struct {
				Link string `json:"link"`
			}
			err = json.NewDecoder(resp.Body).Decode(&ans)
			c.Close()
			assert.Success(t, err)
			assert.Equal(t, prefix+path+": status", resp.StatusCode, http.StatusCreated)
			want := "http://" + addr + prefix + page
			assert.True(t, strings.HasPrefix(ans.Link, want), "%s%s with no Host: link %q starts %q", prefix, path, ans.Link, want)
		}
	}
}
