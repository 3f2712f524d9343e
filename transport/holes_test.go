package transport_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// Regression tests for the holes an outside probe found (issue #8).

// TestHugeCursor: a cursor past every possible epoch (even past int64) is
// "nothing newer": poll, SSE and WebSocket answer the thread as it is and
// send no message, never 400.
func TestHugeCursor(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		last := e.mustPost(tok, "hello")
		for _, since := range []string{"9223372036854775807", "9223372036854775808", "99999999999999999999999999"} {
			status, _, body := e.do(http.MethodGet, "/api/chat/poll?since="+since, tok, "", nil)
			assert.Equal(t, "poll status "+since, status, http.StatusOK)
			assert.Equal(t, "poll "+since, string(body),
				`{"success":true,"thread":"`+threadN(1)+`","messages":[],"awaiting":true,"cursor":`+strconv.FormatInt(last.Epoch, 10)+`}`)

			s := e.mustSSE("/api/chat/stream?since="+since, tok, nil)
			ready := s.nextEvent(t)
			assert.Equal(t, "SSE first event", ready.Event, "ready")
			c := e.mustWS("/api/chat/ws?since="+since, tok)
			assert.Equal(t, "WS first frame", nextWS(t, c).Type, "ready")
			// Nothing newer than the cursor: the next post is not sent either.
			last = e.mustPost(tok, "after "+since)
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			f, err := readWS(ctx, c)
			cancel()
			assert.True(t, err != nil, "WS sent %s past a cursor of %s", f.raw, since)
			c.CloseNow()
			s.Close()
		}
	})
}

// TestStreamsAreGETOnly: HEAD (or any other method) on a stream route is
// 405 with Allow: GET, and takes no stream slot: before the fix, HEAD
// opened a stream whose writes were discarded, which never noticed its
// client leave, and twenty of them blocked the thread's streams with 429.
func TestStreamsAreGETOnly(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{streamsThread: 2, streamsIP: 2})
	tok := tokenN(1)
	for _, path := range []string{"/api/chat/stream", "/api/chat/ws", "/api/chat/stream?ticket=" + e.ticket(tok)} {
		for _, method := range []string{http.MethodHead, http.MethodPost, http.MethodOptions, http.MethodDelete} {
			for range 3 {
				status, hdr, body := e.do(method, path, tok, "", nil)
				assert.Equal(t, method+" "+path+" status", status, http.StatusMethodNotAllowed)
				assert.Equal(t, method+" "+path+" Allow", hdr.Get("Allow"), http.MethodGet)
				if method != http.MethodHead {
					assert.Equal(t, method+" "+path+" code", decodeError(t, body).Code, "method_not_allowed")
				}
			}
		}
	}
	// Every slot is still free: two streams open at the limit of two.
	s := e.mustSSE("/api/chat/stream", tok, nil)
	assert.Equal(t, "SSE at the limit", s.nextEvent(t).Event, "ready")
	c := e.mustWS("/api/chat/ws", tok)
	assert.Equal(t, "WS at the limit", nextWS(t, c).Type, "ready")
}

// TestLogValuesAreBounded: a client-chosen value (a 100 KB path, a long
// method) is cut in the log line, which stays short.
func TestLogValuesAreBounded(t *testing.T) {
	t.Parallel()
	var logs opsLog
	e := startPush(t, pushOptions{config: func(c *transport.Config) {
		c.Log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	long := "/api/" + strings.Repeat("é", 50_000) // 100 KB of two-byte characters
	status, _, _ := e.do(http.MethodGet, long, tokenN(1), "", nil)
	assert.Equal(t, "status", status, http.StatusNotFound)
	status, _, _ = e.do(strings.Repeat("X", 4000), "/api/chat/poll", tokenN(1), "", nil)
	assert.Equal(t, "status", status, http.StatusMethodNotAllowed)
	lines := logs.lines(t)
	assert.Equal(t, "log lines", len(lines), 2)
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		assert.True(t, len(line) < 1024, "a log line of %d bytes: %.200s…", len(line), line)
		assert.True(t, utf8.ValidString(line), "a cut value broke UTF-8: %q", line)
	}
	assert.True(t, strings.HasSuffix(lines[0]["path"].(string), "…"), "the cut path is not marked: %v", lines[0]["path"])
}

// TestPerAddressLimitsKeyOnIPv6Slash64: the per-address rate window and
// stream limit count an IPv6 client by its /64, so rotating addresses
// within one's own /64 gives no more room; another /64 has its own.
func TestPerAddressLimitsKeyOnIPv6Slash64(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{windows: chatrelay.Windows{PerThread: 100, PerIP: 2}, streamsIP: 1, config: func(c *transport.Config) {
		c.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}})
	from := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	post := func(tok, ip string) int {
		status, _, _ := e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"hi"}`, from(ip))
		return status
	}
	assert.Equal(t, "first of the /64", post(tokenN(1), "2001:db8:1:2::1"), http.StatusCreated)
	assert.Equal(t, "second of the /64", post(tokenN(2), "2001:db8:1:2:ffff:ffff:ffff:ffff"), http.StatusCreated)
	assert.Equal(t, "third of the /64", post(tokenN(3), "2001:db8:1:2:abcd::9"), http.StatusTooManyRequests)
	assert.Equal(t, "another /64", post(tokenN(4), "2001:db8:1:3::1"), http.StatusCreated)
	assert.Equal(t, "IPv4 addresses are their own", post(tokenN(5), "192.0.2.1"), http.StatusCreated)
	assert.Equal(t, "IPv4 addresses are their own", post(tokenN(6), "192.0.2.2"), http.StatusCreated)

	s := e.mustSSE("/api/chat/stream", tokenN(1), from("2001:db8:9:9::1"))
	assert.Equal(t, "the /64's stream", s.nextEvent(t).Event, "ready")
	_, resp, _, err := e.openSSE(t.Context(), "/api/chat/stream", tokenN(2), from("2001:db8:9:9::2"))
	assert.Success(t, err)
	assert.Equal(t, "a second stream of the /64", resp.StatusCode, http.StatusTooManyRequests)
}

// TestReadyzOnAFullDisk: /readyz says the store is full, and why, while
// the data folder's filesystem is full (before an earlier fix it created
// an empty probe file, which a full filesystem still allows, and said
// nothing); it stays ready (200), since polls and streams go on and no
// other node would do better: a load balancer that took the server out
// stopped those reads too (before, 503). Once space is freed, posts work.
func TestReadyzOnAFullDisk(t *testing.T) {
	t.Parallel()
	dir := storetest.SmallDisk(t, 1<<20)
	e := opsStartIn(t, dir, true, nil)
	tok := opsToken("full disk")
	e.post(tok, "operator", "before the disk fills", http.StatusCreated)
	_, r := e.readyz()
	assert.True(t, r.Ready, "not ready on a free disk: %+v", r)

	free := storetest.FillDisk(t, dir, 0)

	status, r := e.readyz()
	assert.Equal(t, "readyz on a full disk", r, opsReady{Ready: true, Store: "full", StoreError: "disk full", Feed: "ok"})
	assert.Equal(t, "readyz status", status, http.StatusOK)
	status, body := e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"while full"}`)
	assert.Equal(t, "a post on a full disk", status, http.StatusServiceUnavailable)
	assert.Equal(t, "its code", decodeError(t, body).Code, "store_unavailable")
	status, _ = e.do(http.MethodGet, "/api/chat/poll", tok, "")
	assert.Equal(t, "a poll on a full disk", status, http.StatusOK)
	_, r = e.readyz()
	assert.True(t, r.Ready && r.Store == "full" && r.StoreError == "disk full", "after a failed append on a full disk: %+v", r)

	free()
	_, r = e.readyz()
	assert.Equal(t, "readyz with space again", r, opsReady{Ready: true, Store: "ok", Feed: "ok"})
	e.post(tok, "operator", "after space was freed", http.StatusCreated)
}
