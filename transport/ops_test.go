package transport_test

// Tests of the operational side: /metrics after a scripted session,
// /healthz and /readyz, and the request log. Helpers are prefixed "ops" so
// they stay clear of the other test files of this package.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/transport"
)

type opsEnv struct {
	t      *testing.T
	dir    string
	hub    *hub.Hub[*transport.Event]
	srv    *transport.Server
	ts     *httptest.Server
	prefix string
	cancel context.CancelFunc // stops Run
	runErr chan error
}

// opsStart starts a server with a file store in a temp folder and runs its
// feed; cleanup shuts everything down.
func opsStart(t *testing.T, run bool, config func(*transport.Config)) *opsEnv {
	t.Helper()
	return opsStartIn(t, t.TempDir(), run, config)
}

// opsStartIn is opsStart with the data folder dir.
func opsStartIn(t *testing.T, dir string, run bool, config func(*transport.Config)) *opsEnv {
	t.Helper()
	st, err := filestore.OpenFile(dir, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	cfg := transport.Config{
		Store:     st,
		Hub:       hub.New[*transport.Event](0),
		Limiter:   transport.NewMemoryLimiter(chatrelay.Windows{PerThread: 1000, PerIP: 1000}, nil),
		TicketKey: bytes.Repeat([]byte{9}, 32),
		Log:       slog.New(slog.DiscardHandler),
	}
	if config != nil {
		config(&cfg)
	}
	e := &opsEnv{t: t, dir: dir, hub: cfg.Hub, srv: transport.NewServer(cfg), prefix: cfg.Prefix, runErr: make(chan error, 1)}
	e.ts = httptest.NewServer(e.srv)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if run {
		go func() { e.runErr <- e.srv.Run(ctx) }()
		<-e.srv.Ready()
	} else {
		e.runErr <- nil
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		e.srv.Shutdown(sctx)
		e.ts.Close()
		cancel()
		<-e.runErr
	})
	return e
}

func opsToken(name string) string {
	sum := sha256.Sum256([]byte("ops test token " + name))
	return hex.EncodeToString(sum[:])
}

// do sends a request under the prefix (paths starting "/api") or at the
// root, and returns the status and body.
func (e *opsEnv) do(method, path, token, body string) (int, []byte) {
	e.t.Helper()
	if strings.HasPrefix(path, "/api") {
		path = e.prefix + path
	}
	req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	assert.Success(e.t, err)
	if token != "" {
		req.Header.Set("X-Chat-Token", token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.ts.Client().Do(req)
	assert.Success(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.Success(e.t, err)
	return resp.StatusCode, b
}

func (e *opsEnv) post(token, kind, text string, want int) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]string{"text": text, "kind": kind})
	status, body := e.do(http.MethodPost, "/api/chat/post", token, string(b))
	assert.True(e.t, status == want, "post %q as %s: status %d, want %d: %s", text, kind, status, want, body)
}

// opsScrape reads url and flattens every chatrelay_ series to
// name{label="value",…} → value; a histogram gives its _count.
func opsScrape(t *testing.T, client *http.Client, url string) map[string]float64 {
	t.Helper()
	resp, err := client.Get(url)
	assert.Success(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "scrape status", resp.StatusCode, http.StatusOK)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	assert.Success(t, err)
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_open_fds"} {
		assert.True(t, fams[name] != nil, "runtime metric %s missing", name)
	}
	out := make(map[string]float64)
	for name, f := range fams {
		if !strings.HasPrefix(name, "chatrelay_") {
			continue
		}
		for _, m := range f.GetMetric() {
			key, v := name, 0.0
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				key, v = name+"_count", float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("%s: unexpected type %v", name, f.GetType())
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			slices.Sort(labels)
			out[key+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// opsEventually polls cond until it holds, failing after 10s.
func opsEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

// sse opens a stream and returns a function that reads up to the next
// "event: message" frame's data.
func (e *opsEnv) sse(ctx context.Context, token string) (next func() string, closeFn func()) {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+e.prefix+"/api/chat/stream", nil)
	req.Header.Set("X-Chat-Token", token)
	resp, err := e.ts.Client().Do(req)
	assert.Success(e.t, err)
	assert.Equal(e.t, "SSE status", resp.StatusCode, http.StatusOK)
	br := bufio.NewReader(resp.Body)
	next = func() string {
		e.t.Helper()
		event := ""
		for {
			line, err := br.ReadString('\n')
			assert.Success(e.t, err)
			line = strings.TrimRight(line, "\n")
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				event = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok && event == "message" {
				return v
			}
		}
	}
	// Read up to "ready" so the subscriber is registered.
	for {
		line, err := br.ReadString('\n')
		assert.Success(e.t, err)
		if strings.HasPrefix(line, "event: ready") {
			break
		}
	}
	return next, func() { resp.Body.Close() }
}

// ws dials the WebSocket and waits for its "ready" frame.
func (e *opsEnv) ws(ctx context.Context, token string) *websocket.Conn {
	e.t.Helper()
	h := http.Header{}
	h.Set("X-Chat-Token", token)
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+e.prefix+"/api/chat/ws", &websocket.DialOptions{HTTPHeader: h})
	assert.Success(e.t, err)
	assert.Equal(e.t, "first frame", opsWSType(e.t, ctx, c), "ready")
	return c
}

func opsWSType(t *testing.T, ctx context.Context, c *websocket.Conn) string {
	t.Helper()
	_, b, err := c.Read(ctx)
	assert.Success(t, err)
	var f struct{ Type string }
	assert.Success(t, json.Unmarshal(b, &f))
	return f.Type
}

// TestMetricsAfterSession runs a scripted session and checks that every
// chatrelay_ series moved by exactly what the session did, and nothing else.
func TestMetricsAfterSession(t *testing.T) {
	t.Parallel()
	e := opsStart(t, true, func(c *transport.Config) {
		c.Prefix = "/p"
		c.Hub = hub.New[*transport.Event](2)
		c.Limiter = transport.NewMemoryLimiter(chatrelay.Windows{PerThread: 3, PerIP: 1000}, nil)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	metricsURL := e.ts.URL + "/metrics" // at the root, not under the prefix
	before := opsScrape(t, e.ts.Client(), metricsURL)
	for k, v := range before {
		assert.True(t, v == 0 || strings.Contains(k, `route="/metrics"`), "fresh server: %s = %v", k, v)
	}

	a, b, c, d := opsToken("a"), opsToken("b"), opsToken("c"), opsToken("d")
	for i := range 3 {
		e.post(a, "operator", fmt.Sprint("a", i), http.StatusCreated)
	}
	e.post(a, "operator", "over the thread's window", http.StatusTooManyRequests)
	e.post(b, "agent", "b0", http.StatusCreated)
	e.post(b, "agent", "b1", http.StatusCreated)
	e.post("", "operator", "no token", http.StatusUnauthorized)
	e.post(b, "hermes", "impersonation", http.StatusBadRequest)
	status, _ := e.do(http.MethodGet, "/api/chat/post", b, "")
	assert.Equal(t, "GET post", status, http.StatusMethodNotAllowed)
	status, _ = e.do(http.MethodGet, "/api/chat/poll", a, "")
	assert.Equal(t, "poll", status, http.StatusOK)

	// One SSE and one WebSocket subscriber of thread c get one message.
	next, closeSSE := e.sse(ctx, c)
	conn := e.ws(ctx, c)
	mid := opsScrape(t, e.ts.Client(), metricsURL)
	assert.Equal(t, "open sse", mid[`chatrelay_streams_open{transport="sse"}`], 1.0)
	assert.Equal(t, "open ws", mid[`chatrelay_streams_open{transport="ws"}`], 1.0)
	e.post(c, "operator", "c0", http.StatusCreated)
	assert.True(t, strings.Contains(next(), `"text":"c0"`), "SSE got another message")
	assert.Equal(t, "ws frame", opsWSType(t, ctx, conn), "message")
	closeSSE()
	conn.Close(websocket.StatusNormalClosure, "")

	// A subscriber of thread d that never reads: with a queue of 2, the
	// third message drops it as a slow consumer.
	dead, err := e.hub.Subscribe(chatrelay.ThreadOf(d))
	assert.Success(t, err)
	defer dead.Close()
	for i := range 3 {
		e.post(d, "operator", fmt.Sprint("d", i), http.StatusCreated)
	}
	assert.ErrorIs(t, dead.Err(), hub.ErrSlow)

	// The host CLI (another store on the same folder) answers in thread a:
	// the feed delivers it, but this server appended nothing.
	cli, err := filestore.OpenFile(e.dir, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	_, err = cli.Append(ctx, chatrelay.ThreadOf(a), store.NewMessage{Author: chatrelay.Hermes, Text: "hello from the host", MustExist: true})
	assert.Success(t, err)

	want := map[string]float64{
		`chatrelay_messages_appended_total{author="operator"}`:                                 7,
		`chatrelay_messages_appended_total{author="agent"}`:                                    2,
		`chatrelay_feed_messages_total{author="operator"}`:                                     7,
		`chatrelay_feed_messages_total{author="agent"}`:                                        2,
		`chatrelay_feed_messages_total{author="hermes"}`:                                       1,
		`chatrelay_requests_refused_total{code="rate_limited"}`:                                1,
		`chatrelay_requests_refused_total{code="unauthorized"}`:                                1,
		`chatrelay_requests_refused_total{code="invalid_kind"}`:                                1,
		`chatrelay_requests_refused_total{code="method_not_allowed"}`:                          1,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/post",status="201"}`:   9,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/post",status="429"}`:   1,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/post",status="401"}`:   1,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/post",status="400"}`:   1,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/post",status="405"}`:   1,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/poll",status="200"}`:   1,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/stream",status="200"}`: 1,
		`chatrelay_http_request_duration_seconds_count{route="/api/chat/ws",status="101"}`:     1,
		`chatrelay_store_duration_seconds_count{op="append"}`:                                  9,
		`chatrelay_store_duration_seconds_count{op="since"}`:                                   3, // the poll and two stream backlogs
		`chatrelay_streams_opened_total{transport="sse"}`:                                      1,
		`chatrelay_streams_opened_total{transport="ws"}`:                                       1,
		`chatrelay_fanout_delay_seconds_count{transport="sse"}`:                                1,
		`chatrelay_fanout_delay_seconds_count{transport="ws"}`:                                 1,
		`chatrelay_hub_drops_total{reason="slow"}`:                                             1,
		`chatrelay_threads{}`: 4,
	}
	var after map[string]float64
	// Streams finish (and are counted) after the client leaves, and the
	// feed notices the host's file by watching the folder: wait for both.
	opsEventually(t, "the session's last effects", func() bool {
		after = opsScrape(t, e.ts.Client(), metricsURL)
		for _, k := range []string{
			`chatrelay_feed_messages_total{author="hermes"}`,
			`chatrelay_http_request_duration_seconds_count{route="/api/chat/stream",status="200"}`,
			`chatrelay_http_request_duration_seconds_count{route="/api/chat/ws",status="101"}`,
		} {
			if after[k] != want[k] {
				return false
			}
		}
		return after[`chatrelay_streams_open{transport="sse"}`] == 0 && after[`chatrelay_streams_open{transport="ws"}`] == 0
	})
	for k := range want {
		_, ok := after[k]
		assert.True(t, ok, "series %s missing", k)
	}
	for k, v := range after {
		if strings.Contains(k, `route="/metrics"`) {
			continue // the scrapes themselves
		}
		assert.True(t, v-before[k] == want[k], "%s moved by %v, want %v", k, v-before[k], want[k])
	}
}

// TestMetricsLabelsAreBounded checks that no label value carries a thread,
// token or raw path, whatever the requests were.
func TestMetricsLabelsAreBounded(t *testing.T) {
	t.Parallel()
	e := opsStart(t, true, nil)
	tok := opsToken("bounded")
	e.post(tok, "operator", "x", http.StatusCreated)
	e.do(http.MethodGet, "/api/nothing/"+tok, tok, "")
	e.do(http.MethodGet, "/no/such/page-"+tok, "", "")
	for k := range opsScrape(t, e.ts.Client(), e.ts.URL+"/metrics") {
		assert.True(t, !strings.Contains(k, tok) && !strings.Contains(k, chatrelay.ThreadOf(tok)) && !strings.Contains(k, "127.0.0.1"),
			"label value leaks a request detail: %s", k)
	}
	all := opsScrape(t, e.ts.Client(), e.ts.URL+"/metrics")
	assert.Equal(t, "unknown API path", all[`chatrelay_http_request_duration_seconds_count{route="/api/",status="404"}`], 1.0)
	assert.Equal(t, "unknown page", all[`chatrelay_http_request_duration_seconds_count{route="/",status="404"}`], 1.0)
}

// TestMetricsBaseline: every label value docs/operations.md lists for a
// fixed-set series exists on a fresh server at 0, so an alert on it (such as
// rate(chatrelay_hub_drops_total{reason="overflow"}[5m])) has a baseline.
func TestMetricsBaseline(t *testing.T) {
	t.Parallel()
	e := opsStart(t, true, nil)
	fresh := opsScrape(t, e.ts.Client(), e.ts.URL+"/metrics")
	var want []string
	for _, r := range []string{"slow", "reset", "overflow", "shutdown"} {
		want = append(want, `chatrelay_hub_drops_total{reason="`+r+`"}`)
	}
	for _, a := range []string{"operator", "agent", "hermes", "other"} {
		want = append(want, `chatrelay_messages_appended_total{author="`+a+`"}`,
			`chatrelay_feed_messages_total{author="`+a+`"}`)
	}
	for _, k := range want {
		v, ok := fresh[k]
		assert.True(t, ok, "fresh server: series %s missing", k)
		assert.Equal(t, k, v, 0.0)
	}
}

// TestPrivateMetrics: with PrivateMetrics, /metrics is off the main
// handler and on OpsHandler, with the health routes.
func TestPrivateMetrics(t *testing.T) {
	t.Parallel()
	e := opsStart(t, true, func(c *transport.Config) { c.PrivateMetrics = true })
	status, _ := e.do(http.MethodGet, "/metrics", "", "")
	assert.Equal(t, "main /metrics", status, http.StatusNotFound)
	ops := httptest.NewServer(e.srv.OpsHandler())
	defer ops.Close()
	got := opsScrape(t, ops.Client(), ops.URL+"/metrics")
	_, ok := got[`chatrelay_streams_open{transport="sse"}`]
	assert.True(t, ok, "ops /metrics lacks chatrelay_streams_open")
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := ops.Client().Get(ops.URL + p)
		assert.Success(t, err)
		resp.Body.Close()
		assert.Equal(t, "ops "+p, resp.StatusCode, http.StatusOK)
	}
}

type opsReady struct {
	Ready        bool   `json:"ready"`
	Store        string `json:"store"`
	StoreError   string `json:"store_error"`
	Feed         string `json:"feed"`
	ShuttingDown bool   `json:"shutting_down"`
}

func (e *opsEnv) readyz() (int, opsReady) {
	e.t.Helper()
	status, body := e.do(http.MethodGet, "/readyz", "", "")
	var r opsReady
	assert.Success(e.t, json.Unmarshal(body, &r))
	assert.Equal(e.t, "ready matches status", r.Ready, status == http.StatusOK)
	return status, r
}

// TestReadyz: /readyz is 503 until the feed runs, 503 while the chat
// folder cannot be written (even by root), 503 after the feed stops and
// while shutting down; /healthz stays 200 throughout.
func TestReadyz(t *testing.T) {
	t.Parallel()
	e := opsStart(t, false, nil)
	healthy := func() {
		t.Helper()
		status, body := e.do(http.MethodGet, "/healthz", "", "")
		assert.Equal(t, "healthz", status, http.StatusOK)
		assert.Equal(t, "healthz body", string(body), `{"status":"ok"}`)
	}
	status, r := e.readyz()
	assert.Equal(t, "before Run", r, opsReady{Store: "ok", Feed: "not live"})
	assert.Equal(t, "before Run status", status, http.StatusServiceUnavailable)
	healthy()

	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- e.srv.Run(ctx) }()
	<-e.srv.Ready()
	_, r = e.readyz()
	assert.Equal(t, "running", r, opsReady{Ready: true, Store: "ok", Feed: "ok"})

	// Make the chat folder unwritable in a way that stops root too: move
	// it away and put a plain file at its path (a lost mount looks alike).
	chat := filepath.Join(e.dir, "chat")
	assert.Success(t, os.Rename(chat, chat+".away"))
	assert.Success(t, os.WriteFile(chat, nil, 0o600))
	status, r = e.readyz()
	assert.Equal(t, "folder is a file", r, opsReady{Store: "not writable", StoreError: "data folder missing", Feed: "ok"})
	assert.Equal(t, "folder is a file status", status, http.StatusServiceUnavailable)
	healthy()
	assert.Success(t, os.Remove(chat))
	status, _ = e.readyz()
	assert.Equal(t, "folder missing status", status, http.StatusServiceUnavailable)
	assert.Success(t, os.Rename(chat+".away", chat))
	_, r = e.readyz()
	assert.Equal(t, "folder back", r, opsReady{Ready: true, Store: "ok", Feed: "ok"})
	// The probe leaves nothing behind.
	des, err := os.ReadDir(chat)
	assert.Success(t, err)
	assert.Equal(t, "chat folder entries", len(des), 0)

	cancel()
	assert.Success(t, <-runErr)
	_, r = e.readyz()
	assert.Equal(t, "feed stopped", r, opsReady{Store: "ok", Feed: "not live"})

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { runErr <- e.srv.Run(ctx) }()
	opsEventually(t, "the feed to run again", func() bool { _, r := e.readyz(); return r.Ready })
	e.srv.Drain()
	status, r = e.readyz()
	assert.Equal(t, "draining", r, opsReady{Store: "ok", Feed: "ok", ShuttingDown: true})
	assert.Equal(t, "draining status", status, http.StatusServiceUnavailable)
	healthy()
}

// TestReadyzDuringShutdown: Shutdown alone makes /readyz 503.
func TestReadyzDuringShutdown(t *testing.T) {
	t.Parallel()
	var logs opsLog
	e := opsStart(t, true, func(c *transport.Config) {
		c.Log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	_, r := e.readyz()
	assert.True(t, r.Ready, "not ready before shutdown: %+v", r)
	assert.Success(t, e.srv.Shutdown(t.Context()))
	status, r := e.readyz()
	assert.Equal(t, "after Shutdown", r, opsReady{Store: "ok", Feed: "ok", ShuttingDown: true})
	assert.Equal(t, "after Shutdown status", status, http.StatusServiceUnavailable)
	// A shutdown asked for is no trouble: said at info, with no err=<nil>
	// (a --drain-delay logged a warning per run).
	for _, m := range logs.lines(t) {
		assert.True(t, m["level"] != "WARN" && m["level"] != "ERROR", "a shutdown's log line: %v", m)
	}
}

// opsLog is a concurrency-safe log buffer.
type opsLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *opsLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *opsLog) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		assert.Success(t, json.Unmarshal([]byte(line), &m))
		out = append(out, m)
	}
	return out
}

func (l *opsLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestRequestLogRedactsThePath: a refused request's line (at info) holds
// its path, which a client chose: one that carries a credential (a client
// that built its address from the wrong variable, a link pasted into a
// path) has it redacted as a participant's view would, never written to
// the log. Before, the path was logged as sent.
func TestRequestLogRedactsThePath(t *testing.T) {
	t.Parallel()
	var logs opsLog
	e := opsStart(t, true, func(c *transport.Config) {
		c.Log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	tok := opsToken("path")
	share := "chp_" + strings.Repeat("Q", 43)
	e.post(tok, "operator", "hello", http.StatusCreated)
	for _, c := range []struct {
		method, path, token string
		status              int
	}{
		{http.MethodGet, "/api/chat/attachments/" + tok, "", http.StatusUnauthorized},
		{http.MethodDelete, "/api/chat/participants/" + share, tok, http.StatusNotFound},
		{http.MethodGet, "/api/" + tok + "/poll", tok, http.StatusNotFound},
	} {
		status, body := e.do(c.method, c.path, c.token, "")
		assert.Equal(t, c.method+" "+c.path+" "+string(body), status, c.status)
	}
	opsEventually(t, "a line per refused request", func() bool { return len(logs.lines(t)) >= 3 })
	for _, m := range logs.lines(t) {
		path, _ := m["path"].(string)
		assert.True(t, strings.Contains(path, "[redacted]"), "the path of %v is not redacted", m)
	}
	all := logs.String()
	for _, secret := range []string{tok, share} {
		assert.True(t, !strings.Contains(all, secret), "the log holds %q:\n%s", secret, all)
	}
}

// TestRequestLog: one line per request, at debug, or at info with the code
// when refused; never a token, a ticket or a message's text.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	var logs opsLog
	e := opsStart(t, true, func(c *transport.Config) {
		c.Log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tok := opsToken("log")
	thread := chatrelay.ThreadOf(tok)
	secret := "the secret words of a message"
	e.post(tok, "operator", secret, http.StatusCreated)
	e.post(tok, "hermes", secret+" as hermes", http.StatusBadRequest)
	e.post(strings.ToUpper(tok), "operator", secret, http.StatusUnauthorized)
	status, body := e.do(http.MethodPost, "/api/chat/ticket", tok, "")
	assert.Equal(t, "ticket", status, http.StatusCreated)
	var tk struct{ Ticket string }
	assert.Success(t, json.Unmarshal(body, &tk))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/api/chat/stream?ticket="+tk.Ticket, nil)
	resp, err := e.ts.Client().Do(req)
	assert.Success(t, err)
	assert.Equal(t, "stream by ticket", resp.StatusCode, http.StatusOK)
	resp.Body.Close()
	status, _ = e.do(http.MethodGet, "/api/chat/stream?ticket=t1."+thread+".1.forged", "", "")
	assert.Equal(t, "forged ticket", status, http.StatusUnauthorized)
	wsURL := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/api/chat/ws"
	_, wresp, err := websocket.Dial(ctx, wsURL, nil) // no credentials: refused before the upgrade
	assert.True(t, err != nil && wresp != nil && wresp.StatusCode == http.StatusUnauthorized, "a WebSocket with no credentials: %v", err)

	type line struct{ level, msg, route, code string }
	want := []line{
		{"DEBUG", "request", "/api/chat/post", ""},
		{"INFO", "request refused", "/api/chat/post", "invalid_kind"},
		{"INFO", "request refused", "/api/chat/post", "unauthorized"},
		{"DEBUG", "request", "/api/chat/ticket", ""},
		{"DEBUG", "request", "/api/chat/stream", ""},
		{"INFO", "request refused", "/api/chat/stream", "invalid_ticket"},
		{"INFO", "request refused", "/api/chat/ws", "unauthorized"},
	}
	var got []line
	opsEventually(t, "a line per request", func() bool {
		got = got[:0]
		for _, m := range logs.lines(t) {
			if m["msg"] == "request" || m["msg"] == "request refused" {
				s := func(k string) string { v, _ := m[k].(string); return v }
				got = append(got, line{s("level"), s("msg"), s("route"), s("code")})
			}
		}
		return len(got) >= len(want)
	})
	// The stream lines come when each stream ends, which may be after a
	// later request's line: compare as sets.
	sortLines := func(l []line) {
		slices.SortFunc(l, func(a, b line) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	}
	sortLines(got)
	sortLines(want)
	assert.Equal(t, "request lines", got, want)
	for _, m := range logs.lines(t) {
		if m["route"] == "/api/chat/post" && m["status"] != float64(http.StatusUnauthorized) {
			assert.Equal(t, "thread of "+fmt.Sprint(m), m["thread"], any(thread))
		}
	}
	all := logs.String()
	for _, secretPart := range []string{tok, strings.ToUpper(tok), tk.Ticket, "forged", "secret words"} {
		assert.True(t, !strings.Contains(all, secretPart), "the log holds %q:\n%s", secretPart, all)
	}
}
