package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"
)

// base is the tool's clock: message texts carry nanoseconds since base, so
// a receiver computes post→receive latency from the monotonic clock.
var base = time.Now()

func nowNS() int64 { return int64(time.Since(base)) }

// target is the server under test, always on a loopback address. Every
// connection is dialed to that address, from a rotating set of loopback
// source addresses (127.0.0.1, 127.0.0.2, …) so that more streams than one
// source address has ephemeral ports can be held. The clients are the
// standard ones: net/http for posts and polls, github.com/r3labs/sse/v2 for
// SSE streams and github.com/coder/websocket for WebSocket streams.
type target struct {
	addr    string // host:port to dial, a loopback IP
	host    string // Host header
	prefix  string // path prefix of the API, "" or "/spaces/newos4"
	base    string // "http://" + host + prefix: URLs are built on it, dial goes to addr
	sources []net.IP
	next    atomic.Uint32

	api    *http.Client // posts and polls: keep-alive, a pool as large as the posters and pollers
	stream *http.Client // SSE streams: one connection per stream
	ws     *http.Client // WebSocket handshakes
}

// loopbackTarget parses the --server URL and refuses anything but http on a
// loopback address. conns is how many posters and pollers may run at once:
// the keep-alive pool keeps that many idle connections.
func loopbackTarget(raw string, sources, conns int) (*target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("--server %q: want http://127.0.0.1:PORT (plain HTTP on loopback)", raw)
	}
	host := u.Hostname()
	var ip net.IP
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	} else {
		ip = net.ParseIP(host)
	}
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--server %q: only a loopback address (127.0.0.0/8, ::1, localhost) may be a target", raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	t := &target{
		addr:   net.JoinHostPort(ip.String(), port),
		host:   u.Host,
		prefix: trimSlash(u.Path),
	}
	t.base = "http://" + t.host + t.prefix
	if ip.To4() != nil {
		for i := range max(sources, 1) {
			t.sources = append(t.sources, net.IPv4(127, 0, byte((i+1)>>8), byte((i+1)&0xff)))
		}
	} else {
		t.sources = []net.IP{net.IPv6loopback}
	}
	// Proxy is nil in every Transport: the traffic never leaves loopback.
	t.api = &http.Client{Transport: &http.Transport{
		DialContext:           t.dial,
		MaxIdleConns:          0, // no limit across hosts; there is one host
		MaxIdleConnsPerHost:   max(conns, 1),
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 15 * time.Second,
		DisableCompression:    true,
	}}
	t.stream = &http.Client{Transport: &http.Transport{
		DialContext:           t.dial,
		MaxIdleConnsPerHost:   -1, // a stream's connection is not reused
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
	}}
	t.ws = &http.Client{Transport: &http.Transport{
		DialContext:       t.dial,
		DisableKeepAlives: true,
	}}
	return t, nil
}

func trimSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// dial connects to the server (t.addr, whatever the URL's host) from the
// next source address.
func (t *target) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	src := t.sources[int(t.next.Add(1))%len(t.sources)]
	d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: src}}
	return d.DialContext(ctx, "tcp", t.addr)
}

// closeIdle closes the keep-alive connections of posts and polls.
func (t *target) closeIdle() { t.api.CloseIdleConnections() }

// waitUp waits until the server accepts a connection, for at most d.
func (t *target) waitUp(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", t.addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server %s not reachable: %w", t.addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// thread is one chat thread the tool owns: a random token and the thread id
// the server derives from it.
type thread struct {
	idx   int
	token string
	id    string

	created atomic.Bool // S1/S2: a post to it was sent (its first creates it)

	mu    sync.Mutex
	acked []int64 // epochs of acknowledged posts, when the scenario records them
}

func newThreads(n int) []*thread {
	ts := make([]*thread, n)
	for i := range ts {
		var b [32]byte
		rand.Read(b[:])
		tok := hex.EncodeToString(b[:])
		ts[i] = &thread{idx: i, token: tok, id: threadOf(tok)}
	}
	return ts
}

// threadOf is the contract's thread of a token: the first 16 hex of its SHA-256.
func threadOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// apiClient sends one poster's (or poller's) requests through the target's
// keep-alive pool, one at a time, reusing its body buffers.
type apiClient struct {
	t    *target
	rd   bytes.Reader
	resp bytes.Buffer
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

// statusOf returns the HTTP status of an error from do, or 0.
func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.status
	}
	return 0
}

// do sends one request and returns the body of a 2xx answer (valid until
// the next call). Any other status is an *httpError. net/http does not
// retry a POST that reached the server, so a post is never sent twice.
func (h *apiClient) do(ctx context.Context, method, path, token string, body []byte) ([]byte, error) {
	var rb io.Reader
	if body != nil {
		h.rd.Reset(body)
		rb = &h.rd
	}
	req, err := http.NewRequestWithContext(ctx, method, h.t.base+path, rb)
	if err != nil {
		return nil, err
	}
	req.Header["X-Chat-Token"] = []string{token}
	if body != nil {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	resp, err := h.t.api.Do(req)
	if err != nil {
		return nil, err
	}
	h.resp.Reset()
	_, err = h.resp.ReadFrom(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, &httpError{status: resp.StatusCode, body: h.resp.String()}
	}
	return h.resp.Bytes(), nil
}

// postBody appends {"text":"<text>"} to b. text is the tool's own (ASCII,
// nothing to escape).
func postBody(b []byte, text []byte) []byte {
	b = append(b, `{"text":"`...)
	b = append(b, text...)
	return append(b, `","kind":"operator"}`...)
}

// benchText appends the text of a tool message, "cb <tag> <seq> <sent ns>",
// padded with a space and 'x's to size bytes (if it is shorter), so that
// every message has the size the scenarios call for (--text-size).
func benchText(b []byte, tag string, seq int, sent int64, size int) []byte {
	start := len(b)
	b = append(b, "cb "...)
	b = append(b, tag...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, sent, 10)
	if pad := size - (len(b) - start); pad > 0 {
		b = append(b, ' ')
		for range pad - 1 {
			b = append(b, 'x')
		}
	}
	return b
}

// parseBenchText reads a text made by benchText; ok is false for a text of
// another tag (an older run's message in a backlog, a person's).
func parseBenchText(text, tag string) (seq int, sent int64, ok bool) {
	rest, ok := strings.CutPrefix(text, "cb ")
	if !ok {
		return 0, 0, false
	}
	rest, ok = strings.CutPrefix(rest, tag)
	if !ok || len(rest) == 0 || rest[0] != ' ' {
		return 0, 0, false
	}
	s, n, ok := strings.Cut(rest[1:], " ")
	if !ok {
		return 0, 0, false
	}
	seq, err := strconv.Atoi(s)
	if err != nil || seq < 0 {
		return 0, 0, false
	}
	n, pad, padded := strings.Cut(n, " ")
	if padded && strings.Trim(pad, "x") != "" {
		return 0, 0, false
	}
	sent, err = strconv.ParseInt(n, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return seq, sent, true
}

// message is a stored message as the server sends it: the data of an SSE
// message event, inside a WebSocket message frame, the answer of a post.
type message struct {
	ID        string              `json:"id"`
	Epoch     int64               `json:"epoch"`
	Rev       int64               `json:"rev"` // v2
	Text      string              `json:"text"`
	Reactions map[string][]string `json:"reactions"` // v2
}

// frame is a WebSocket frame, or (Cursor only) an SSE ready event's data.
type frame struct {
	Type    string  `json:"type"`
	Cursor  int64   `json:"cursor"`
	Message message `json:"message"`
}

// handler receives a subscriber's frames. Its methods run on the
// subscriber's goroutine and must not block.
type handler interface {
	ready(s *subscriber, cursor int64)
	message(s *subscriber, epoch int64, text string)
}

// updater is a handler of v2 streams, which also receive updates: a
// change of a message the stream sent before (a reaction, here).
type updater interface {
	update(s *subscriber, m *message)
}

// subscriber is one live stream (SSE or WebSocket) of one thread, read by
// one goroutine. It resumes from the newest complete message it received
// (its own cursor, never the SSE client's LastEventID): Last-Event-ID on SSE,
// ?since= on the WebSocket.
type subscriber struct {
	idx    int
	thread *thread
	ws     bool
	v2     bool // the v2 view (?v=2): messages and updates, the cursor is the change's rev

	cursor  atomic.Int64 // newest epoch received; stored only by the reading goroutine
	epochs  []int64      // S5: every epoch received, in order
	readies atomic.Int32 // ready frames received
	resets  atomic.Int32 // reset frames received
	ended   atomic.Int32 // sessions that ended, for any reason
	lastErr atomic.Pointer[string]

	mu     sync.Mutex // guards closer and done
	closer io.Closer
	done   bool // close was called: do not reconnect

	partial atomic.Int32 // SSE message events dropped as incomplete (cut by a closed connection)
	buf     []byte       // a WebSocket frame being assembled
}

func (s *subscriber) setCloser(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		c.Close()
		return false
	}
	s.closer = c
	return true
}

// drop closes the current connection; the reading goroutine then resumes
// (if its run loop allows) from its cursor.
func (s *subscriber) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closer != nil {
		s.closer.Close()
		s.closer = nil
	}
}

// close ends the subscriber for good.
func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if s.closer != nil {
		s.closer.Close()
		s.closer = nil
	}
}

func (s *subscriber) closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

func (s *subscriber) fail(err error) {
	msg := err.Error()
	s.lastErr.Store(&msg)
}

// run reads sessions until close, ctx's end or, unless resume, the first
// session's end. A failed connect is retried (with a growing pause) at most
// maxTries times in a row.
func (s *subscriber) run(ctx context.Context, t *target, h handler, resume bool) {
	const maxTries = 40
	tries := 0
	for ctx.Err() == nil && !s.closed() {
		got := s.readies.Load()
		err := s.session(ctx, t, h)
		if err != nil && !s.closed() {
			s.fail(err)
		}
		s.ended.Add(1)
		if !resume {
			return
		}
		if s.readies.Load() > got {
			tries = 0
			continue
		}
		tries++
		if tries >= maxTries {
			return
		}
		pause := time.Duration(tries) * 25 * time.Millisecond
		if statusOf(err) == http.StatusTooManyRequests {
			pause = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (s *subscriber) session(ctx context.Context, t *target, h handler) error {
	if s.ws {
		return s.wsSession(ctx, t, h)
	}
	return s.sseSession(ctx, t, h)
}

// errStreamEnded is a session that the server ended cleanly (the r3labs
// client returns nil on a clean EOF and does not reconnect by itself).
var errStreamEnded = errors.New("stream ended by the server")

// sseSession reads one SSE connection with the r3labs/sse client, set as
// libraries.md §1.6 says: 1 MiB events, no reconnect of its own (the run
// loop reconnects, from the tool's cursor), an empty stream name, the
// token as a header, bounded by a context that drop and close cancel.
func (s *subscriber) sseSession(ctx context.Context, t *target, h handler) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !s.setCloser(closerFunc(func() error { cancel(); return nil })) {
		return nil
	}
	u := t.base + "/api/chat/stream"
	if s.v2 {
		u += "?v=2"
	}
	c := sse.NewClient(u, sse.ClientMaxBufferSize(1<<20))
	c.Connection = t.stream
	c.ReconnectStrategy = &backoff.StopBackOff{}
	c.Headers["X-Chat-Token"] = s.thread.token
	// Resume from the newest complete message this tool recorded. The
	// client's own LastEventID may come from an event cut off by a dropped
	// connection, so it is overwritten on every session.
	var last []byte
	if cur := s.cursor.Load(); cur > 0 {
		last = strconv.AppendInt(nil, cur, 10)
	}
	c.LastEventID.Store(last)
	c.ResponseValidator = func(_ *sse.Client, resp *http.Response) error {
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		// The client returns a validator's error without closing the body.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return &httpError{status: resp.StatusCode, body: string(body)}
	}
	err := c.SubscribeWithContext(sctx, "", func(ev *sse.Event) { s.sseEvent(h, ev) })
	if err == nil && sctx.Err() == nil {
		err = errStreamEnded
	}
	return err
}

// sseEvent handles one event from the client. A connection closed in the
// middle of an event hands the client the event's first part as if it were
// whole (its id possibly cut short too): a message counts only when its data
// is complete JSON and its id is the epoch inside.
func (s *subscriber) sseEvent(h handler, ev *sse.Event) {
	switch string(ev.Event) {
	case "ready":
		var f frame
		if json.Unmarshal(ev.Data, &f) != nil {
			return
		}
		s.readies.Add(1)
		h.ready(s, f.Cursor)
	case "reset":
		s.resets.Add(1)
	case "message", "", "update":
		if len(ev.Data) == 0 {
			return // retry:, or an event cut before its data
		}
		var m message
		if json.Unmarshal(ev.Data, &m) != nil || m.Epoch <= 0 || string(ev.ID) != strconv.FormatInt(s.cursorOf(&m), 10) {
			s.partial.Add(1)
			return
		}
		if string(ev.Event) == "update" {
			s.deliverUpdate(h, &m)
			return
		}
		s.deliverMessage(h, &m)
	}
}

// cursorOf is the stream's cursor once it has m: its epoch (v1), its rev (v2).
func (s *subscriber) cursorOf(m *message) int64 {
	if s.v2 {
		return m.Rev
	}
	return m.Epoch
}

// deliverMessage records a complete message and hands it to h.
func (s *subscriber) deliverMessage(h handler, m *message) {
	if c := s.cursorOf(m); c > s.cursor.Load() {
		s.cursor.Store(c)
	}
	h.message(s, m.Epoch, m.Text)
}

// deliverUpdate records a complete update and hands it to h, if h takes
// updates.
func (s *subscriber) deliverUpdate(h handler, m *message) {
	if m.Rev > s.cursor.Load() {
		s.cursor.Store(m.Rev)
	}
	if u, ok := h.(updater); ok {
		u.update(s, m)
	}
}

func (s *subscriber) wsSession(ctx context.Context, t *target, h handler) error {
	u := "ws://" + t.host + t.prefix + "/api/chat/ws"
	q := []string{}
	if s.v2 {
		q = append(q, "v=2")
	}
	if cur := s.cursor.Load(); cur > 0 {
		q = append(q, "since="+strconv.FormatInt(cur, 10))
	}
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{
		HTTPClient: t.ws,
		HTTPHeader: http.Header{"X-Chat-Token": {s.thread.token}},
	})
	cancel()
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return &httpError{status: resp.StatusCode, body: err.Error()}
		}
		return err
	}
	defer c.CloseNow()
	if !s.setCloser(closerFunc(c.CloseNow)) {
		return nil
	}
	c.SetReadLimit(1 << 20)
	bg := context.Background() // no per-read timer: the connection is closed to stop
	for {
		_, r, err := c.Reader(bg)
		if err != nil {
			return err
		}
		s.buf = s.buf[:0]
		for {
			if len(s.buf) == cap(s.buf) {
				s.buf = append(s.buf, 0)[:len(s.buf)]
			}
			n, err := r.Read(s.buf[len(s.buf):cap(s.buf)])
			s.buf = s.buf[:len(s.buf)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		var f frame
		if err := json.Unmarshal(s.buf, &f); err != nil {
			return fmt.Errorf("WebSocket frame: %w", err)
		}
		switch f.Type {
		case "message":
			s.deliverMessage(h, &f.Message)
		case "update":
			s.deliverUpdate(h, &f.Message)
		case "ready":
			s.readies.Add(1)
			h.ready(s, f.Cursor)
		case "reset":
			s.resets.Add(1)
		}
	}
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
