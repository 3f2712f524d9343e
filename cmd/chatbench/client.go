package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// base is the tool's clock: message texts carry nanoseconds since base, so
// a receiver computes post→receive latency from the monotonic clock.
var base = time.Now()

func nowNS() int64 { return int64(time.Since(base)) }

// target is the server under test, always on a loopback address. Connections
// are dialed from a rotating set of loopback source addresses
// (127.0.0.1, 127.0.0.2, …) so that more streams than one source address has
// ephemeral ports can be held.
type target struct {
	addr    string // host:port to dial, a loopback IP
	host    string // Host header
	prefix  string // path prefix of the API, "" or "/spaces/newos4"
	sources []net.IP
	next    atomic.Uint32
	ws      *http.Client // WebSocket handshakes, dialed like everything else
}

// loopbackTarget parses the --server URL and refuses anything but http on a
// loopback address.
func loopbackTarget(raw string, sources int) (*target, error) {
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
	if ip.To4() != nil {
		for i := range max(sources, 1) {
			t.sources = append(t.sources, net.IPv4(127, 0, byte((i+1)>>8), byte((i+1)&0xff)))
		}
	} else {
		t.sources = []net.IP{net.IPv6loopback}
	}
	t.ws = &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return t.dial(ctx) },
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

// dial connects to the server from the next source address.
func (t *target) dial(ctx context.Context) (net.Conn, error) {
	src := t.sources[int(t.next.Add(1))%len(t.sources)]
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: src}}
	return d.DialContext(ctx, "tcp", t.addr)
}

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

// httpConn is a minimal HTTP/1.1 keep-alive client for the fixed requests
// of post and poll. It reuses its buffers, so a request allocates nothing;
// net/http would cost the tool several times the CPU on a 2-core box that
// it shares with the server.
type httpConn struct {
	t    *target
	c    net.Conn
	br   *bufio.Reader
	req  []byte
	body []byte
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

func (h *httpConn) close() {
	if h.c != nil {
		h.c.Close()
		h.c = nil
	}
}

// do sends one request and returns the body of a 2xx answer (valid until
// the next call). Any other status is an *httpError. On a transport error
// the connection is closed and the next call dials again; nothing is
// retried, so a post is never sent twice.
func (h *httpConn) do(ctx context.Context, method, path, token string, body []byte) ([]byte, error) {
	if h.c == nil {
		c, err := h.t.dial(ctx)
		if err != nil {
			return nil, err
		}
		h.c = c
		if h.br == nil {
			h.br = bufio.NewReaderSize(c, 16<<10)
		} else {
			h.br.Reset(c)
		}
	}
	r := h.req[:0]
	r = append(r, method...)
	r = append(r, ' ')
	r = append(r, h.t.prefix...)
	r = append(r, path...)
	r = append(r, " HTTP/1.1\r\nHost: "...)
	r = append(r, h.t.host...)
	r = append(r, "\r\nX-Chat-Token: "...)
	r = append(r, token...)
	if body != nil {
		r = append(r, "\r\nContent-Type: application/json\r\nContent-Length: "...)
		r = strconv.AppendInt(r, int64(len(body)), 10)
	}
	r = append(r, "\r\n\r\n"...)
	r = append(r, body...)
	h.req = r
	h.c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := h.c.Write(r); err != nil {
		h.close()
		return nil, err
	}
	status, cl, chunked, keep, err := readHead(h.br)
	if err != nil {
		h.close()
		return nil, err
	}
	h.body, err = readBody(h.br, h.body[:0], cl, chunked)
	if err != nil {
		h.close()
		return nil, err
	}
	if !keep {
		h.close()
	}
	if status/100 != 2 {
		return nil, &httpError{status: status, body: string(h.body)}
	}
	return h.body, nil
}

// readHead reads a response's status line and headers.
func readHead(br *bufio.Reader) (status int, contentLength int64, chunked, keepAlive bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, 0, false, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, 0, false, false, fmt.Errorf("bad status line %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("bad status line %q", line)
	}
	contentLength, keepAlive = -1, true
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return status, contentLength, chunked, keepAlive, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			contentLength, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil {
				return 0, 0, false, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = asciiEqualFold(value, "chunked")
		case asciiEqualFold(name, "connection"):
			keepAlive = !asciiEqualFold(value, "close")
		}
	}
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// readBody appends a response body to buf.
func readBody(br *bufio.Reader, buf []byte, contentLength int64, chunked bool) ([]byte, error) {
	switch {
	case chunked:
		var b bytes.Buffer
		b.Write(buf)
		_, err := b.ReadFrom(httputil.NewChunkedReader(br))
		if err == nil {
			// The trailer: an empty line after the last chunk.
			_, err = br.ReadSlice('\n')
		}
		return b.Bytes(), err
	case contentLength >= 0:
		if contentLength > 16<<20 {
			return buf, fmt.Errorf("body of %d bytes", contentLength)
		}
		n := int(contentLength)
		if cap(buf) < n {
			buf = make([]byte, 0, n)
		}
		buf = buf[:n]
		_, err := io.ReadFull(br, buf)
		return buf, err
	default:
		return buf, errors.New("response with neither Content-Length nor chunked encoding")
	}
}

// postBody appends {"text":"<text>"} to b. text is the tool's own (ASCII,
// nothing to escape).
func postBody(b []byte, text []byte) []byte {
	b = append(b, `{"text":"`...)
	b = append(b, text...)
	return append(b, `","kind":"operator"}`...)
}

// benchText appends the text of a tool message: "cb <tag> <seq> <sent ns>".
func benchText(b []byte, tag string, seq int, sent int64) []byte {
	b = append(b, "cb "...)
	b = append(b, tag...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, ' ')
	return strconv.AppendInt(b, sent, 10)
}

// parseBenchText reads a text made by benchText; ok is false for a text of
// another tag (an older run's message in a backlog, a person's).
func parseBenchText(text []byte, tag string) (seq int, sent int64, ok bool) {
	rest, ok := bytes.CutPrefix(text, []byte("cb "))
	if !ok {
		return 0, 0, false
	}
	rest, ok = bytes.CutPrefix(rest, []byte(tag))
	if !ok || len(rest) == 0 || rest[0] != ' ' {
		return 0, 0, false
	}
	s, n, ok := bytes.Cut(rest[1:], []byte(" "))
	if !ok {
		return 0, 0, false
	}
	seq, ok = atoi(s)
	if !ok {
		return 0, 0, false
	}
	v, ok := atoi(n)
	return seq, int64(v), ok
}

func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// jsonInt returns the integer after the first `"key":` in b.
func jsonInt(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(`"`+key+`":`))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key)+3:]
	j := 0
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	n, ok := atoi(b[:j])
	return int64(n), ok
}

// jsonStr returns the raw (still escaped) string after the first
// `"key":"` in b. The tool's own texts have no escapes.
func jsonStr(b []byte, key string) ([]byte, bool) {
	i := bytes.Index(b, []byte(`"`+key+`":"`))
	if i < 0 {
		return nil, false
	}
	b = b[i+len(key)+4:]
	for j := 0; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return b[:j], true
		}
	}
	return nil, false
}

// handler receives a subscriber's frames. Its methods run on the
// subscriber's goroutine and must not block.
type handler interface {
	ready(s *subscriber, cursor int64)
	message(s *subscriber, epoch int64, text []byte)
}

// subscriber is one live stream (SSE or WebSocket) of one thread, read by
// one goroutine that reuses its buffers. It resumes from the newest epoch it
// received: Last-Event-ID on SSE, ?since= on the WebSocket.
type subscriber struct {
	idx    int
	thread *thread
	ws     bool

	cursor  atomic.Int64 // newest epoch received; stored only by the reading goroutine
	epochs  []int64      // S5: every epoch received, in order
	readies atomic.Int32 // ready frames received
	resets  atomic.Int32 // reset frames received
	ended   atomic.Int32 // sessions that ended, for any reason
	lastErr atomic.Pointer[string]

	mu     sync.Mutex // guards closer and done
	closer io.Closer
	done   bool // close was called: do not reconnect

	br    *bufio.Reader // the connection (SSE)
	lines *bufio.Reader // the de-chunked stream (SSE)
	buf   []byte        // a frame being assembled
	data  []byte
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

func (s *subscriber) sseSession(ctx context.Context, t *target, h handler) error {
	c, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if !s.setCloser(c) {
		return nil
	}
	req := make([]byte, 0, 256)
	req = append(req, "GET "...)
	req = append(req, t.prefix...)
	req = append(req, "/api/chat/stream HTTP/1.1\r\nHost: "...)
	req = append(req, t.host...)
	req = append(req, "\r\nAccept: text/event-stream\r\nX-Chat-Token: "...)
	req = append(req, s.thread.token...)
	if cur := s.cursor.Load(); cur > 0 {
		req = append(req, "\r\nLast-Event-ID: "...)
		req = strconv.AppendInt(req, cur, 10)
	}
	req = append(req, "\r\n\r\n"...)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req); err != nil {
		return err
	}
	if s.br == nil {
		s.br = bufio.NewReaderSize(c, 2048)
	} else {
		s.br.Reset(c)
	}
	status, cl, chunked, _, err := readHead(s.br)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		body, _ := readBody(s.br, nil, cl, chunked)
		return &httpError{status: status, body: string(body)}
	}
	c.SetDeadline(time.Time{})
	var r io.Reader = s.br
	if chunked {
		r = httputil.NewChunkedReader(s.br)
	}
	if s.lines == nil {
		s.lines = bufio.NewReaderSize(r, 2048)
	} else {
		s.lines.Reset(r)
	}
	return s.readSSE(h)
}

// readSSE parses events until the stream ends.
func (s *subscriber) readSSE(h handler) error {
	var event [16]byte
	nevent := 0
	var id int64
	hasData := false
	s.data = s.data[:0]
	for {
		line, err := s.lines.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: assemble it.
			s.buf = append(s.buf[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = s.lines.ReadSlice('\n')
				s.buf = append(s.buf, line...)
			}
			line = s.buf
		}
		if err != nil {
			return err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			ev := string(event[:nevent]) // does not allocate in a switch
			switch {
			case ev == "ready" && hasData:
				cur, _ := jsonInt(s.data, "cursor")
				s.readies.Add(1)
				h.ready(s, cur)
			case ev == "reset":
				s.resets.Add(1)
			case (ev == "message" || nevent == 0) && hasData:
				if id == 0 {
					id, _ = jsonInt(s.data, "epoch")
				}
				if id > s.cursor.Load() {
					s.cursor.Store(id)
				}
				text, _ := jsonStr(s.data, "text")
				h.message(s, id, text)
			}
			nevent, id, hasData = 0, 0, false
			s.data = s.data[:0]
			continue
		}
		if line[0] == ':' {
			continue // a comment: the heartbeat
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "event":
			nevent = copy(event[:], value)
		case "data":
			if hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			hasData = true
		case "id":
			if n, ok := atoi(value); ok {
				id = int64(n)
			}
		}
	}
}

func (s *subscriber) wsSession(ctx context.Context, t *target, h handler) error {
	u := "ws://" + t.addr + t.prefix + "/api/chat/ws"
	if cur := s.cursor.Load(); cur > 0 {
		u += "?since=" + strconv.FormatInt(cur, 10)
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
		f := s.buf
		switch {
		case bytes.HasPrefix(f, []byte(`{"type":"message"`)):
			epoch, _ := jsonInt(f, "epoch")
			if epoch > s.cursor.Load() {
				s.cursor.Store(epoch)
			}
			text, _ := jsonStr(f, "text")
			h.message(s, epoch, text)
		case bytes.HasPrefix(f, []byte(`{"type":"ready"`)):
			cur, _ := jsonInt(f, "cursor")
			s.readies.Add(1)
			h.ready(s, cur)
		case bytes.HasPrefix(f, []byte(`{"type":"reset"`)):
			s.resets.Add(1)
		}
	}
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
