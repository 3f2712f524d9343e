package transport_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestACursorSentTwiceIsRefused: a since, a Last-Event-ID, a v or a
// ticket sent twice is refused (400 invalid_since, invalid_version, 401
// invalid_ticket), as an X-Chat-Token sent twice is, never read as one of
// its values. An outside probe polled ?since=0&since=<cursor> and got the
// newest 50 again, messages it had (Go reads the first value; the PHP
// server the .php routes stand in for read the last), and
// ?since=<cursor>&since=0 read the other way.
func TestACursorSentTwiceIsRefused(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "one")
		c := strconv.FormatInt(e.mustPost(tok, "two").Epoch, 10)
		for _, q := range []string{"since=0&since=" + c, "since=" + c + "&since=0", "since=" + c + "&since=" + c, "since=&since=" + c, "v=2&v=1", "v=1&v=1"} {
			code := "invalid_since"
			if q[0] == 'v' {
				code = "invalid_version"
			}
			for _, path := range []string{"/api/chat/poll?", "/api/chat/poll.php?", "/api/chat/stream?"} {
				status, _, b := e.do(http.MethodGet, path+q, tok, "", nil)
				assert.Equal(t, path+q+": status "+string(b), status, http.StatusBadRequest)
				assert.Equal(t, path+q+": code", decodeError(t, b).Code, code)
			}
			resp, refusal := e.refusedWS("/api/chat/ws?"+q, tok, nil)
			assert.Equal(t, "/api/chat/ws?"+q+": status", resp.StatusCode, http.StatusBadRequest)
			assert.Equal(t, "/api/chat/ws?"+q+": code", refusal.Code, code)
		}

		// Last-Event-ID twice, whichever value comes first.
		for _, ids := range [][]string{{c, "0"}, {"0", c}} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url("/api/chat/stream"), nil)
			assert.Success(t, err)
			req.Header.Set("X-Chat-Token", tok)
			req.Header["Last-Event-Id"] = ids
			resp, err := e.client.Do(req)
			assert.Success(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			assert.Equal(t, "Last-Event-ID "+ids[0]+", "+ids[1]+": status "+string(b), resp.StatusCode, http.StatusBadRequest)
			assert.Equal(t, "its code", decodeError(t, b).Code, "invalid_since")
		}

		// A ticket twice, even the same one.
		tk := e.ticket(tok)
		status, _, b := e.do(http.MethodGet, "/api/chat/stream?ticket="+tk+"&ticket="+tk, "", "", nil)
		assert.Equal(t, "a ticket twice: status "+string(b), status, http.StatusUnauthorized)
		assert.Equal(t, "its code", decodeError(t, b).Code, "invalid_ticket")

		// Once each, as ever.
		status, _, b = e.do(http.MethodGet, "/api/chat/poll?since="+c+"&v=1", tok, "", nil)
		assert.Equal(t, "since and v once each: "+string(b), status, http.StatusOK)
	})
}

// TestAMalformedSinceBesideLastEventIDIsRefused: Last-Event-ID wins over
// ?since=, but a since that is not a cursor (or is sent twice) is still
// 400 invalid_since, as the contract says of every malformed since, never
// passed over in silence. An outside probe (probe11) opened
// /api/chat/stream?since=zz with Last-Event-ID: 1 and got the stream.
func TestAMalformedSinceBesideLastEventIDIsRefused(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		c := strconv.FormatInt(e.mustPost(tok, "one").Epoch, 10)
		open := func(query, lastEventID string) (int, []byte) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url("/api/chat/stream"+query), nil)
			assert.Success(t, err)
			req.Header.Set("X-Chat-Token", tok)
			req.Header.Set("Last-Event-ID", lastEventID)
			resp, err := e.client.Do(req)
			assert.Success(t, err)
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return resp.StatusCode, nil // a stream: its body never ends
			}
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		for _, q := range []string{"?since=zz", "?since=-1", "?since=%2B5", "?since=1&since=2", "?since=%zz"} {
			status, b := open(q, c)
			assert.Equal(t, q+" beside Last-Event-ID: status "+string(b), status, http.StatusBadRequest)
			assert.Equal(t, q+": its code", decodeError(t, b).Code, "invalid_since")
		}
		// A well-formed since beside it: the header wins, as ever.
		status, b := open("?since=0", c)
		assert.Equal(t, "since=0 beside Last-Event-ID: status "+string(b), status, http.StatusOK)
	})
}
