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
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestLinkOfARequestWithNoHost: an HTTP/1.0 request may carry no Host
// header; a device link or share link made for it, and the url of the
// pushes to a subscription it made, start with the address the request
// reached (its listener's), under the prefix, so that they open the page.
// Before, the base was "http://" and the link "http://d#chd_…" (a host
// named d) or, under a prefix, "http:///spaces/x/p#chp_…" (an outside
// probe's finding).
func TestLinkOfARequestWithNoHost(t *testing.T) {
	t.Parallel()
	for i, prefix := range []string{"", "/spaces/x"} {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{config: func(c *transport.Config) {
			withPush(svc, nil)(c)
			c.Prefix = prefix
		}})
		owner, thread := tokenN(1), threadN(1)
		st, _, b := e.do(http.MethodPost, prefix+chatrelay.PathPost, owner, `{"text":"hello"}`, nil)
		assert.Equal(t, "post "+string(b), st, http.StatusCreated)
		addr := strings.TrimPrefix(e.ts.URL, "http://")
		base := "http://" + addr + prefix
		noHost := func(path, body string) (int, []byte) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			assert.Success(t, err)
			defer c.Close()
			assert.Success(t, c.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = fmt.Fprintf(c, "POST %s%s HTTP/1.0\r\nX-Chat-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", prefix, path, owner, len(body), body)
			assert.Success(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			assert.Success(t, err)
			var out strings.Builder
			_, err = bufio.NewReader(resp.Body).WriteTo(&out)
			assert.Success(t, err)
			return resp.StatusCode, []byte(out.String())
		}
		for path, page := range map[string]string{chatrelay.PathDevices: "/d#chd_", chatrelay.PathParticipants: "/p#chp_"} {
			status, b := noHost(path, `{"name":"Phone"}`)
			assert.Equal(t, prefix+path+": status "+string(b), status, http.StatusCreated)
			var ans struct {
				Link string `json:"link"`
			}
			assert.Success(t, json.Unmarshal(b, &ans))
			assert.True(t, strings.HasPrefix(ans.Link, base+page), "%s%s with no Host: link %q starts %q", prefix, path, ans.Link, base+page)
		}
		name := fmt.Sprintf("nohost%d", i)
		sub, err := json.Marshal(map[string]any{"subscription": svc.Subscribe(t, name).JSON()})
		assert.Success(t, err)
		status, b := noHost(chatrelay.PathPush, string(sub))
		assert.Equal(t, prefix+" push: status "+string(b), status, http.StatusCreated)
		_, err = e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "the build is green"})
		assert.Success(t, err)
		_, pls := awaitPushes(t, svc, "/push/"+name, 1)
		assert.Equal(t, prefix+" the push's url", pls[0].URL, base+"/")
	}
}
