package main

// Tests of serve's operational flags: --tls-cert/--tls-key (HTTPS and
// HTTP/2), --metrics-addr, --log-format, --drain-delay. Helpers are
// prefixed "ops" so they stay clear of the other test files here.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// opsBuffer is a concurrency-safe buffer for a server's log.
type opsBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *opsBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *opsBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// opsServer is a running `chatrelay serve`.
type opsServer struct {
	base    string // scheme://host:port of the main listener
	metrics string // http://host:port of --metrics-addr, if given
	data    string
	log     *opsBuffer
	cancel  func()       // like SIGTERM: starts the shutdown
	stop    func() error // cancels and returns run's error; idempotent
}

// opsServe runs `chatrelay serve` in this process on a loopback port with a
// fresh data folder; args come after the defaults, so they override them.
func opsServe(t *testing.T, args ...string) *opsServer {
	t.Helper()
	s := &opsServer{data: t.TempDir(), log: new(opsBuffer)}
	full := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", s.data, "--fsync", "never"}, args...)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	done := make(chan error, 1)
	go func() {
		err := run(ctx, full, func(string) string { return "" }, strings.NewReader(""), pw, s.log)
		pw.Close()
		done <- err
	}()
	wantMetrics := strings.Contains(strings.Join(args, " "), "--metrics-addr")
	sc := bufio.NewScanner(pr)
	for (s.base == "" || (wantMetrics && s.metrics == "")) && sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "listening on "); ok {
			s.base = strings.TrimSuffix(v, "/")
		}
		if v, ok := strings.CutPrefix(line, "metrics on "); ok {
			s.metrics = strings.TrimSuffix(v, "/metrics")
		}
	}
	go io.Copy(io.Discard, pr)
	var once sync.Once
	var err error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				err = fmt.Errorf("serve did not return 20s after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("serve: %v\nlog:\n%s", err, s.log)
		}
	})
	if s.base == "" {
		t.Fatalf("serve printed no address; log:\n%s", s.log)
	}
	return s
}

func opsToken(name string) string {
	sum := sha256.Sum256([]byte("cmd ops test token " + name))
	return hex.EncodeToString(sum[:])
}

// opsCert writes a self-signed certificate for 127.0.0.1, localhost and
// chat.example.com, and returns its files and a pool that trusts it.
func opsCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	assert.Success(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "chatrelay test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost", "chat.example.com"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	assert.Success(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	assert.Success(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	assert.Success(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	assert.Success(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	assert.Success(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// opsPost posts text as an operator and returns the status.
func opsPost(t *testing.T, ctx context.Context, c *http.Client, base, token, text string, hdr http.Header) int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/chat/post", bytes.NewReader(body))
	assert.Success(t, err)
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	assert.Success(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// opsStream is an open SSE stream.
type opsStream struct {
	resp *http.Response
	r    *bufio.Reader
}

// opsOpenSSE opens a stream of token's thread and reads up to its "ready".
func opsOpenSSE(t *testing.T, ctx context.Context, c *http.Client, base, token string) *opsStream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/chat/stream", nil)
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", token)
	resp, err := c.Do(req)
	assert.Success(t, err)
	assert.Equal(t, "SSE status", resp.StatusCode, http.StatusOK)
	assert.Equal(t, "SSE content type", resp.Header.Get("Content-Type"), "text/event-stream")
	s := &opsStream{resp: resp, r: bufio.NewReader(resp.Body)}
	t.Cleanup(func() { resp.Body.Close() })
	for {
		line, err := s.r.ReadString('\n')
		assert.Success(t, err)
		if line == "event: ready\n" {
			return s
		}
	}
}

// next returns the data of the next "message" event.
func (s *opsStream) next() (string, error) {
	event := ""
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimSuffix(line, "\n")
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok && event == "message" {
			return v, nil
		}
	}
}

// opsDialWS opens a WebSocket of token's thread and reads its "ready".
func opsDialWS(t *testing.T, ctx context.Context, c *http.Client, url, token string, hdr http.Header) *websocket.Conn {
	t.Helper()
	h := hdr.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("X-Chat-Token", token)
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: c, HTTPHeader: h})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", url, err, status)
	}
	t.Cleanup(func() { conn.CloseNow() })
	assert.Equal(t, "first frame", opsWSNext(t, ctx, conn).Type, "ready")
	return conn
}

type opsWSFrame struct {
	Type    string          `json:"type"`
	Message json.RawMessage `json:"message"`
}

func opsWSNext(t *testing.T, ctx context.Context, c *websocket.Conn) opsWSFrame {
	t.Helper()
	_, b, err := c.Read(ctx)
	assert.Success(t, err)
	var f opsWSFrame
	assert.Success(t, json.Unmarshal(b, &f))
	return f
}

// TestServeHTTPSAndHTTP2: with --tls-cert and --tls-key the server speaks
// HTTPS; a Go client negotiates h2 and holds 20 SSE streams (and posts) on
// one connection, and every stream gets the message. A WebSocket still
// works, over HTTP/1.1 as browsers open it.
func TestServeHTTPSAndHTTP2(t *testing.T) {
	t.Parallel()
	cert, key, pool := opsCert(t)
	srv := opsServe(t, "--tls-cert", cert, "--tls-key", key, "--max-streams-per-thread", "50")
	assert.True(t, strings.HasPrefix(srv.base, "https://"), "listening on %s, want https", srv.base)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var dials atomic.Int32
	var d net.Dialer
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}}
	defer client.CloseIdleConnections()
	tok := opsToken("h2")
	streams := make([]*opsStream, 20)
	for i := range streams {
		streams[i] = opsOpenSSE(t, ctx, client, srv.base, tok)
		resp := streams[i].resp
		assert.Equal(t, fmt.Sprintf("stream %d protocol", i), resp.Proto, "HTTP/2.0")
		assert.Equal(t, fmt.Sprintf("stream %d ALPN", i), resp.TLS.NegotiatedProtocol, "h2")
	}
	assert.Equal(t, "post", opsPost(t, ctx, client, srv.base, tok, "to twenty streams", nil), http.StatusCreated)
	for i, s := range streams {
		data, err := s.next()
		assert.Success(t, err)
		assert.True(t, strings.Contains(data, `"text":"to twenty streams"`), "stream %d got %s", i, data)
	}
	assert.Equal(t, "TCP connections", dials.Load(), int32(1))

	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}}}
	defer h1.CloseIdleConnections()
	ws := opsDialWS(t, ctx, h1, "wss"+strings.TrimPrefix(srv.base, "https")+"/api/chat/ws", tok, nil)
	ws.Close(websocket.StatusNormalClosure, "")
}

// TestServeTLSFlagsChecked: a missing half or an unreadable file fails at
// start.
func TestServeTLSFlagsChecked(t *testing.T) {
	t.Parallel()
	cert, key, _ := opsCert(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"cert without key", []string{"--tls-cert", cert}},
		{"key without cert", []string{"--tls-key", key}},
		{"key is not a key", []string{"--tls-cert", cert, "--tls-key", cert}},
		{"bad log format", []string{"--log-format", "xml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}, tc.args...)
			err := run(t.Context(), args, func(string) string { return "" }, strings.NewReader(""), io.Discard, io.Discard)
			assert.True(t, err != nil, "serve %v started", tc.args)
		})
	}
}

// opsGet returns the status and body of a GET.
func opsGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	assert.Success(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.Success(t, err)
	return resp.StatusCode, b
}

// opsWait polls cond until it holds, failing after 20s.
func opsWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// TestServeMetricsAddrLogsAndDrain: --metrics-addr moves /metrics to a
// private listener (which also answers /healthz and /readyz); JSON logs
// hold a line per request and never the token or text; on SIGTERM
// (cancel), /readyz turns 503 for --drain-delay before the server stops.
func TestServeMetricsAddrLogsAndDrain(t *testing.T) {
	t.Parallel()
	srv := opsServe(t, "--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug", "--drain-delay", "3s")
	assert.True(t, srv.metrics != "", "no metrics address printed")

	status, _ := opsGet(t, srv.base+"/metrics")
	assert.Equal(t, "main /metrics", status, http.StatusNotFound)
	opsWait(t, "ready", func() bool { s, _ := opsGet(t, srv.metrics+"/readyz"); return s == http.StatusOK })
	status, body := opsGet(t, srv.base+"/readyz")
	assert.Equal(t, "main /readyz", status, http.StatusOK)
	// The store serve opens is checked (a file store can say it is writable).
	assert.True(t, strings.Contains(string(body), `"store":"ok"`), "readyz %s", body)
	status, _ = opsGet(t, srv.base+"/healthz")
	assert.Equal(t, "main /healthz", status, http.StatusOK)

	tok := opsToken("metrics-addr")
	secret := "words that must not be logged"
	assert.Equal(t, "post", opsPost(t, t.Context(), http.DefaultClient, srv.base, tok, secret, nil), http.StatusCreated)
	assert.Equal(t, "no token", opsPost(t, t.Context(), http.DefaultClient, srv.base, "", secret, nil), http.StatusUnauthorized)

	status, body = opsGet(t, srv.metrics+"/metrics")
	assert.Equal(t, "private /metrics", status, http.StatusOK)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	assert.Success(t, err)
	for _, name := range []string{"chatrelay_messages_appended_total", "chatrelay_requests_refused_total", "chatrelay_threads", "go_goroutines"} {
		assert.True(t, fams[name] != nil, "%s missing from /metrics", name)
	}
	var appended float64
	for _, m := range fams["chatrelay_messages_appended_total"].GetMetric() {
		appended += m.GetCounter().GetValue()
	}
	assert.Equal(t, "appended", appended, 1.0)

	srv.cancel()
	opsWait(t, "/readyz 503 while draining", func() bool {
		s, b := opsGet(t, srv.metrics+"/readyz")
		return s == http.StatusServiceUnavailable && strings.Contains(string(b), `"shutting_down":true`)
	})
	assert.Success(t, srv.stop())

	logs := srv.log.String()
	var refused, requests int
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		switch m["msg"] {
		case "request refused":
			refused++
			assert.Equal(t, "refused level", m["level"], any("INFO"))
			assert.Equal(t, "refused code", m["code"], any("unauthorized"))
		case "request":
			requests++
			assert.Equal(t, "request level", m["level"], any("DEBUG"))
		}
	}
	assert.Equal(t, "refused lines", refused, 1)
	assert.True(t, requests >= 4, "%d request lines, want one per request", requests)
	assert.True(t, !strings.Contains(logs, tok) && !strings.Contains(logs, secret), "the log holds the token or the text:\n%s", logs)
}

// TestServePprof: --pprof serves Go's profiles on the private listener
// only, and is refused without one.
func TestServePprof(t *testing.T) {
	t.Parallel()
	srv := opsServe(t, "--metrics-addr", "127.0.0.1:0", "--pprof")
	status, body := opsGet(t, srv.metrics+"/debug/pprof/heap?debug=1")
	assert.Equal(t, "private heap profile", status, http.StatusOK)
	assert.True(t, strings.Contains(string(body), "heap profile"), "heap profile: %.200s", body)
	status, _ = opsGet(t, srv.metrics+"/metrics")
	assert.Equal(t, "private /metrics beside it", status, http.StatusOK)
	status, _ = opsGet(t, srv.base+"/debug/pprof/heap")
	assert.Equal(t, "main listener", status, http.StatusNotFound)

	var stderr bytes.Buffer
	err := run(t.Context(), []string{"serve", "--data", t.TempDir(), "--pprof"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, &stderr)
	assert.Equal(t, "exit code without --metrics-addr", exitCode(err), 2)
}
