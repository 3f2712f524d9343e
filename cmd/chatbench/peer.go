package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"
)

// peer is a server that is not chatrelay, measured beside it with the same
// scenarios, threads, subscribers and texts (--target): Centrifugo through
// its server API and its unidirectional SSE and WebSocket transports, ntfy
// through its publish, SSE and WebSocket endpoints. A thread of the tool is
// a channel (Centrifugo) or a topic (ntfy) named after its id; every text
// carries its send time, as chatrelay's do, and latency is receipt − send
// time (it includes the publish request).
type peer interface {
	// name is the --target name.
	name() string
	// skip says why scenario id has no equivalent on the peer, or "".
	skip(id string) string
	// post publishes text to th and returns the peer's position of the
	// message (an offset), 0 if the peer gives none.
	post(ctx context.Context, h *apiClient, th *thread, text []byte) (int64, error)
	// session reads one stream of s (s.ws: a WebSocket, else SSE) until it
	// ends, calling s's handler: ready once the stream receives, message
	// for every message. Like chatrelay's, it registers a closer on s.
	session(ctx context.Context, t *target, s *subscriber, h handler) error
	// poll asks for th's newest messages (at most 50) and returns how many
	// of them the answer holds.
	poll(ctx context.Context, h *apiClient, th *thread) (int, error)
}

// peerOptions are the --target flags.
type peerOptions struct {
	target string // chatrelay, centrifugo or ntfy
	apiKey string // Centrifugo: http_api.key
	hmac   string // Centrifugo: client.token.hmac_secret_key
	versus string // the chatrelay --label this peer's figures are compared with in the report
}

// peerFlags adds the --target flags to fs.
func (c *config) peerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.peer.target, "target", "chatrelay", "the server under test: chatrelay, or a peer measured beside it: centrifugo (v6: server API, uni_sse, uni_websocket) or ntfy")
	fs.StringVar(&c.peer.apiKey, "peer-api-key", "", "--target centrifugo: its http_api.key")
	fs.StringVar(&c.peer.hmac, "peer-hmac-secret", "", "--target centrifugo: its client.token.hmac_secret_key, to sign the streams' HS256 connection tokens")
	fs.StringVar(&c.peer.versus, "versus", "", "a peer's run: the chatrelay --label its figures are set beside in `chatbench report`")
}

// newPeer returns the peer --target names, nil for chatrelay.
func newPeer(o peerOptions) (peer, error) {
	switch o.target {
	case "", "chatrelay":
		return nil, nil
	case "centrifugo":
		if o.apiKey == "" || o.hmac == "" {
			return nil, errors.New("--target centrifugo needs --peer-api-key (its http_api.key) and --peer-hmac-secret (its client.token.hmac_secret_key)")
		}
		return &centrifugo{apiKey: o.apiKey, secret: []byte(o.hmac)}, nil
	case "ntfy":
		return &ntfy{}, nil
	}
	return nil, fmt.Errorf("--target %q: want chatrelay, centrifugo or ntfy", o.target)
}

// noPeerEquivalent is why S5, S6 and S7 are not run against a peer.
var noPeerEquivalent = map[string]string{
	"S5": "no peer equivalent: resuming from chatrelay's cursor (Last-Event-ID / ?since=) has no counterpart on the peers' unidirectional streams as measured here",
	"S6": "no peer equivalent: `chatrelay reply` is chatrelay's own host command",
	"S7": "no peer equivalent: v2 reactions (message updates) are chatrelay's own",
}

// skipped is the result of a scenario that does not run against a peer.
func skipped(id, why string) *result {
	r := &result{id: id, name: "skipped"}
	r.add("skipped", why, "")
	r.note("%s", why)
	return r
}

// sseStream reads one SSE connection of a peer with the r3labs client, set
// as chatrelay's streams are (1 MiB events, no reconnect of its own: the
// run loop reconnects), bounded by a context that drop and close cancel.
// prepare, if not nil, sets what else the client sends (headers, the last
// event id). onEvent handles each event.
func sseStream(ctx context.Context, t *target, s *subscriber, url string, prepare func(c *sse.Client), onEvent func(ev *sse.Event)) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !s.setCloser(closerFunc(func() error { cancel(); return nil })) {
		return nil
	}
	c := sse.NewClient(url, sse.ClientMaxBufferSize(1<<20))
	c.Connection = t.stream
	c.ReconnectStrategy = &backoff.StopBackOff{}
	if prepare != nil {
		prepare(c)
	}
	c.ResponseValidator = func(_ *sse.Client, resp *http.Response) error {
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		// The client returns a validator's error without closing the body.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return &httpError{status: resp.StatusCode, body: string(body)}
	}
	err := c.SubscribeWithContext(sctx, "", onEvent)
	if err == nil && sctx.Err() == nil {
		err = errStreamEnded
	}
	return err
}

// wsStream reads one WebSocket connection of a peer with coder's client:
// first (if not nil) is sent as the first message, then onFrame handles
// each message until the connection ends or onFrame fails.
func wsStream(ctx context.Context, t *target, s *subscriber, url string, first []byte, onFrame func(b []byte) error) error {
	c, err := wsDial(ctx, t, s, url, nil)
	if c == nil {
		return err
	}
	defer c.CloseNow()
	bg := context.Background() // no per-read timer: the connection is closed to stop
	if first != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Write(wctx, websocket.MessageText, first)
		cancel()
		if err != nil {
			return err
		}
	}
	for {
		_, b, err := c.Read(bg)
		if err != nil {
			return err
		}
		if err := onFrame(b); err != nil {
			return err
		}
	}
}

// wsDial opens s's WebSocket connection to url with header (30 s to
// connect; a refusal is its status as an httpError) and makes it the one
// s closes to stop, with a frame's read limit. The connection is nil, and
// the error too, when s was stopped meanwhile.
func wsDial(ctx context.Context, t *target, s *subscriber, url string, header http.Header) (*websocket.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: t.ws, HTTPHeader: header})
	cancel()
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &httpError{status: resp.StatusCode, body: err.Error()}
		}
		return nil, err
	}
	if !s.setCloser(closerFunc(c.CloseNow)) {
		return nil, nil // setCloser closed it
	}
	c.SetReadLimit(1 << 20)
	return c, nil
}

// becomeReady counts a stream's ready (the peer's connect or open frame)
// and hands it to h.
func becomeReady(s *subscriber, h handler) {
	s.readies.Add(1)
	h.ready(s, 0)
}

// deliverPeer records a peer's message (its offset, when it has one, as
// the stream's cursor) and hands its text to h.
func deliverPeer(s *subscriber, h handler, offset int64, text string) {
	if offset > s.cursor.Load() {
		s.cursor.Store(offset)
	}
	h.message(s, offset, text)
}
