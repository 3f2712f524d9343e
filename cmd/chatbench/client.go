package main

import (
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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

	peer peer // the server is a peer (Centrifugo, ntfy), not chatrelay; nil for chatrelay

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
	return h.roundTrip(req)
}

// roundTrip sends req through the keep-alive pool and returns the body of
// a 2xx answer (valid until the next call), or an *httpError.
func (h *apiClient) roundTrip(req *http.Request) ([]byte, error) {
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
