package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
)

// SubscribeOptions says which thread's stream Subscribe follows, on which
// server.
type SubscribeOptions struct {
	Server string // the server's URL with its prefix: http://127.0.0.1:8080
	Token  string // the thread's token, or
	Ticket string // a read-only ticket (it expires: a resume after that is refused)
	Since  int64  // resume after this epoch; 0: the newest 50, then live
	// Dropped, if set, is told each time the stream ended and is about to
	// be resumed from cursor.
	Dropped func(err error, cursor int64)
	Client  *http.Client // defaults to http.DefaultClient
}

// StreamItem is one thing a subscriber is handed: a message (its v1 JSON)
// or a reset (messages after the cursor were dropped by retention: redraw
// from the store).
type StreamItem struct {
	Thread  string
	Message json.RawMessage // nil for a reset
	Reset   bool
}

// RefusedError is a stream the server refused for good (a bad token or
// ticket, a foreign origin…): resuming would be refused again.
type RefusedError struct {
	Status int
	Code   string
	Words  string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the server refused the stream: %d %s: %s", e.Status, e.Code, e.Words)
}

// Subscribe follows one thread's live stream from a remote server over its
// WebSocket and calls fn with each new message, in order, exactly once,
// resuming from the last epoch after every drop, with a jittered backoff
// (so that a restart does not bring every client back at once). It returns
// nil when ctx is done, fn's error, or a *RefusedError.
func Subscribe(ctx context.Context, opt SubscribeOptions, fn func(StreamItem) error) error {
	u, err := url.Parse(strings.TrimSuffix(opt.Server, "/") + chatrelay.PathWS)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("server %q: want http:// or https://", opt.Server)
	}
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	hdr := http.Header{}
	if opt.Token != "" {
		hdr.Set("X-Chat-Token", opt.Token)
	}
	cursor := opt.Since
	backoff := 500 * time.Millisecond
	for {
		q := u.Query()
		q.Set("since", strconv.FormatInt(cursor, 10))
		if opt.Ticket != "" {
			q.Set("ticket", opt.Ticket)
		}
		u.RawQuery = q.Encode()
		got, err := subscribeOnce(ctx, u.String(), hdr, opt.Client, &cursor, fn)
		if err != nil && opt.Ticket != "" {
			err = hiddenTicket{err, opt.Ticket}
		}
		if ctx.Err() != nil {
			return nil
		}
		var refused *RefusedError
		var fnErr fnError
		switch {
		case errors.As(err, &refused):
			return err
		case errors.As(err, &fnErr):
			return fnErr.err
		case websocket.CloseStatus(err) == websocket.StatusPolicyViolation:
			return &RefusedError{Status: 101, Code: "policy_violation", Words: err.Error()}
		}
		if got {
			backoff = 500 * time.Millisecond
		}
		if opt.Dropped != nil {
			opt.Dropped(err, cursor)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, 15*time.Second)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// hiddenTicket is err with the ticket taken out of its words: a dial's
// error names the stream's URL, whose query holds the ticket, and a
// Dropped that logs it would write a credential into the log.
type hiddenTicket struct {
	err    error
	ticket string
}

func (e hiddenTicket) Error() string {
	s := strings.ReplaceAll(e.err.Error(), url.QueryEscape(e.ticket), "[ticket]")
	return strings.ReplaceAll(s, e.ticket, "[ticket]")
}

func (e hiddenTicket) Unwrap() error { return e.err }

// fnError is the caller's fn failing: Subscribe returns it as it is.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// subscribeOnce follows one WebSocket until it ends, handing on messages
// after *cursor and advancing it. It reports whether it got the ready frame.
func subscribeOnce(ctx context.Context, u string, hdr http.Header, client *http.Client, cursor *int64, fn func(StreamItem) error) (bool, error) {
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: client})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			var body struct{ Error, Code string }
			if resp.Body != nil {
				b, _ := io.ReadAll(resp.Body)
				json.Unmarshal(b, &body)
			}
			return false, &RefusedError{Status: resp.StatusCode, Code: body.Code, Words: body.Error}
		}
		return false, err
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	var thread string
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return thread != "", err
		}
		var f struct {
			Type    string          `json:"type"`
			Thread  string          `json:"thread"`
			Message json.RawMessage `json:"message"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return thread != "", fmt.Errorf("bad frame: %w", err)
		}
		switch f.Type {
		case "ready":
			thread = f.Thread
		case "reset":
			if err := fn(StreamItem{Thread: thread, Reset: true}); err != nil {
				return true, fnError{err}
			}
		case "message":
			var m struct {
				Epoch int64 `json:"epoch"`
			}
			if json.Unmarshal(f.Message, &m) != nil || m.Epoch <= *cursor {
				continue
			}
			*cursor = m.Epoch
			if err := fn(StreamItem{Thread: thread, Message: f.Message}); err != nil {
				return true, fnError{err}
			}
		}
	}
}
