package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/redisstore"
	"github.com/chatrelay/chatrelay/transport"
)

// pushEnv is a real server on loopback: a store of one backend (a file
// store in a temp dir, or a Redis store under a key prefix of its own),
// the transport, its change feed running, and an HTTP client of its own.
type pushEnv struct {
	t       testing.TB
	backend *storetest.Backend
	dir     string // the file store's data folder; "" on Redis
	store   store.Store
	srv     *transport.Server
	ts      *httptest.Server
	client  *http.Client
	stop    func() // ends everything; idempotent

	stopFeed func() // stops Run and waits for it
}

// startFeed runs the server's change feed (Run) until stopFeed.
func (e *pushEnv) startFeed() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx) }()
	var once sync.Once
	e.stopFeed = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("Run: %v", err)
			}
		})
	}
}

type pushOptions struct {
	backend string             // storetest.File (the default) or storetest.Redis
	on      *storetest.Backend // a store already open (a node's own view of shared data); overrides backend
	store   storetest.Options
	// windows are the rate windows; zero: too wide to matter.
	windows chatrelay.Windows
	// streamsThread and streamsIP bound the open streams; zero: the
	// transport's defaults (20 and 200).
	streamsThread, streamsIP int
	// On Redis the rate windows and the stream limits are Redis's, shared
	// by every node of the store, as serve sets them up; config may
	// replace them.
	config func(*transport.Config)
	// server is given the server before it serves.
	server func(*transport.Server)
	http   func(*http.Server)
	// listener wraps the server's listener (for socket options).
	listener func(net.Listener) net.Listener
}

// testTicketKey signs the tickets of every test server.
var testTicketKey = bytes.Repeat([]byte{7}, 32)

// startPush starts a server; t.Cleanup shuts it down.
func startPush(t testing.TB, o pushOptions) *pushEnv {
	t.Helper()
	be := o.on
	if be == nil {
		if o.backend == "" {
			o.backend = storetest.File
		}
		be = storetest.Open(t, o.backend, o.store)
	}
	st := be.Store
	if o.windows == (chatrelay.Windows{}) {
		o.windows = chatrelay.Windows{PerThread: 100000, PerIP: 100000}
	}
	cfg := transport.Config{
		Store:     st,
		Limiter:   transport.NewMemoryLimiter(o.windows, o.store.Now),
		Streams:   transport.NewMemoryStreams(o.streamsThread, o.streamsIP),
		TicketKey: testTicketKey,
		Log:       slog.New(slog.DiscardHandler),
	}
	if rate, streams, ok := be.SharedLimiters(o.windows.PerThread, o.windows.PerIP, o.windows.Window, o.streamsThread, o.streamsIP); ok {
		cfg.Limiter, cfg.Streams = rate, streams
	}
	if o.config != nil {
		o.config(&cfg)
	}
	srv := transport.NewServer(cfg)
	if o.server != nil {
		o.server(srv)
	}
	ts := httptest.NewUnstartedServer(srv)
	if o.listener != nil {
		ts.Listener = o.listener(ts.Listener)
	}
	if o.http != nil {
		o.http(ts.Config)
	}
	ts.Start()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	e := &pushEnv{t: t, backend: be, dir: be.Dir, store: st, srv: srv, ts: ts, client: &http.Client{Transport: tr}}
	e.startFeed()
	select {
	case <-srv.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("the feed was not ready within 5s")
	}
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			if err := srv.Shutdown(sctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			tr.CloseIdleConnections()
			ts.Close()
			e.stopFeed()
			st.Close()
		})
	}
	t.Cleanup(e.stop)
	return e
}

// procStore names a test's store for a helper process (testproc) to
// open again: the file store's data folder, or a Redis URL and key prefix.
type procStore struct {
	Dir    string `json:"dir,omitempty"`
	Redis  string `json:"redis,omitempty"`
	Prefix string `json:"prefix,omitempty"`
}

// procStoreOf is be's procStore.
func procStoreOf(be *storetest.Backend) procStore {
	if be.Server != nil {
		return procStore{Redis: be.Server.URL(), Prefix: be.Prefix}
	}
	return procStore{Dir: be.Dir}
}

// open opens the store s names, closed at t's end.
func (s procStore) open(t testing.TB) *storetest.Backend {
	t.Helper()
	if s.Dir != "" {
		return storetest.OpenFileIn(t, s.Dir, storetest.Options{})
	}
	rs, err := redisstore.Open(context.Background(), s.Redis, redisstore.Options{Prefix: s.Prefix, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { rs.Close() })
	return &storetest.Backend{Name: storetest.Redis, Store: rs, Redis: rs, Prefix: s.Prefix}
}

// tokenN is a deterministic valid token; threadN is its thread.
func tokenN(i int) string {
	sum := sha256.Sum256([]byte("chatrelay test token " + strconv.Itoa(i)))
	return hex.EncodeToString(sum[:])
}

func threadN(i int) string { return chatrelay.ThreadOf(tokenN(i)) }

func (e *pushEnv) url(path string) string { return e.ts.URL + path }

func (e *pushEnv) wsURL(path string) string {
	return "ws" + strings.TrimPrefix(e.ts.URL, "http") + path
}

// do sends a request and returns the status, headers and body.
func (e *pushEnv) do(method, path, token string, body string, hdr map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url(path), strings.NewReader(body))
	assert.Success(e.t, err)
	if token != "" {
		req.Header.Set("X-Chat-Token", token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	assert.Success(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.Success(e.t, err)
	schematest.Answer(e.t, method, path, resp.StatusCode, resp.Header, b)
	return resp.StatusCode, resp.Header, b
}

type postAnswer struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
	Epoch   int64  `json:"epoch"`
	TS      string `json:"ts"`
	Thread  string `json:"thread"`
}

// post posts text as operator and returns the 201 answer. It may be
// called from any goroutine; it reports failures with Errorf.
func (e *pushEnv) post(token, text string) (postAnswer, error) {
	b, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequest(http.MethodPost, e.url("/api/chat/post"), bytes.NewReader(b))
	if err != nil {
		return postAnswer{}, err
	}
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return postAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return postAnswer{}, err
	}
	if err := schematest.CheckAnswer(http.MethodPost, "/api/chat/post", resp.StatusCode, resp.Header, body); err != nil {
		return postAnswer{}, err
	}
	if resp.StatusCode != http.StatusCreated {
		return postAnswer{}, fmt.Errorf("post: %d %s", resp.StatusCode, body)
	}
	var a postAnswer
	return a, json.Unmarshal(body, &a)
}

func (e *pushEnv) mustPost(token, text string) postAnswer {
	e.t.Helper()
	a, err := e.post(token, text)
	assert.Success(e.t, err)
	return a
}

// pollPage is a poll answer with each message kept as the exact bytes the
// server sent.
type pollPage struct {
	Success  bool              `json:"success"`
	Thread   string            `json:"thread"`
	Messages []json.RawMessage `json:"messages"`
	Awaiting bool              `json:"awaiting"`
	Cursor   int64             `json:"cursor"`
}

// message is the v1 message object as clients receive it: exactly these
// five fields.
type message struct {
	ID     string           `json:"id"`
	Epoch  int64            `json:"epoch"`
	TS     string           `json:"ts"`
	Author chatrelay.Author `json:"author"`
	Text   string           `json:"text"`
}

func decodeMessage(t testing.TB, raw []byte) message {
	t.Helper()
	var m message
	assert.Success(t, json.Unmarshal(raw, &m))
	return m
}

func (e *pushEnv) poll(token string, since int64) pollPage {
	e.t.Helper()
	status, _, body := e.do(http.MethodGet, "/api/chat/poll?since="+strconv.FormatInt(since, 10), token, "", nil)
	assert.Equal(e.t, "poll status", status, http.StatusOK)
	var p pollPage
	assert.Success(e.t, json.Unmarshal(body, &p))
	return p
}

// ticket mints a ticket for token's thread.
func (e *pushEnv) ticket(token string) string {
	e.t.Helper()
	status, _, body := e.do(http.MethodPost, "/api/chat/ticket", token, "", nil)
	assert.Equal(e.t, "ticket status", status, http.StatusCreated)
	var a struct{ Ticket string }
	assert.Success(e.t, json.Unmarshal(body, &a))
	return a.Ticket
}

// sseFrame is one SSE event block as it was on the wire.
type sseFrame struct {
	ID       string
	HasID    bool
	Event    string
	Data     string
	Retry    string
	Comments []string
}

// sseStream reads an SSE response block by block.
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

// openSSE opens GET path with optional extra headers (token as
// X-Chat-Token if non-empty). It returns the stream only on 200; otherwise
// the response with its body read into errBody.
func (e *pushEnv) openSSE(ctx context.Context, path, token string, hdr map[string]string) (*sseStream, *http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url(path), nil)
	if err != nil {
		return nil, nil, nil, err
	}
	if token != "" {
		req.Header.Set("X-Chat-Token", token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, resp, b, schematest.CheckAnswer(http.MethodGet, path, resp.StatusCode, resp.Header, b)
	}
	return &sseStream{resp: resp, r: bufio.NewReaderSize(resp.Body, 64<<10)}, resp, nil, nil
}

// mustSSE opens a stream that must answer 200; it is closed at cleanup.
func (e *pushEnv) mustSSE(path, token string, hdr map[string]string) *sseStream {
	e.t.Helper()
	s, resp, body, err := e.openSSE(context.Background(), path, token, hdr)
	assert.Success(e.t, err)
	if s == nil {
		e.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	e.t.Cleanup(s.Close)
	return s
}

func (s *sseStream) Close() { s.resp.Body.Close() }

// checkSchema checks an event's data against the bundle (x-sse of the
// stream's view); comments and retry hints carry none.
func (s *sseStream) checkSchema(f sseFrame) error {
	if f.Event == "" && f.Data == "" {
		return nil
	}
	event := f.Event
	if event == "" {
		event = "message" // SSE's default
	}
	return schematest.CheckSSE(s.resp.Request.URL.String(), event, f.Data)
}

// Next reads the next block (an event, a retry hint or comments).
func (s *sseStream) Next() (sseFrame, error) {
	var f sseFrame
	n := 0
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && n == 0 {
				return f, io.EOF
			}
			return f, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if n == 0 {
				continue
			}
			return f, s.checkSchema(f)
		}
		n++
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "":
			f.Comments = append(f.Comments, value)
		case "id":
			f.ID, f.HasID = value, true
		case "event":
			f.Event = value
		case "data":
			if f.Data != "" {
				f.Data += "\n"
			}
			f.Data += value
		case "retry":
			f.Retry = value
		default:
			return f, fmt.Errorf("unknown SSE field in %q", line)
		}
	}
}

// NextEvent skips comment-only blocks and retry hints.
func (s *sseStream) NextEvent() (sseFrame, error) {
	for {
		f, err := s.Next()
		if err != nil || f.Event != "" || f.HasID || f.Data != "" {
			return f, err
		}
	}
}

// within runs fn in a goroutine and fails the test if it takes longer than
// d. fn must return once the stream it reads is closed.
func within[T any](t testing.TB, d time.Duration, what string, closer func(), fn func() (T, error)) T {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		v, err := fn()
		c <- result{v, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.v
	case <-timer.C:
		closer()
		<-c
		t.Fatalf("%s: nothing within %v", what, d)
	}
	panic("unreachable")
}

// nextEvent reads the next SSE event within 5s.
func (s *sseStream) nextEvent(t testing.TB) sseFrame {
	t.Helper()
	return within(t, 5*time.Second, "SSE event", s.Close, s.NextEvent)
}

// wsFrame is any frame the server sends on the WebSocket.
type wsFrame struct {
	Type      string          `json:"type"`
	Thread    string          `json:"thread"`
	Cursor    int64           `json:"cursor"`
	Awaiting  bool            `json:"awaiting"`
	Message   json.RawMessage `json:"message"`
	Success   bool            `json:"success"`
	ID        string          `json:"id"`
	Epoch     int64           `json:"epoch"`
	TS        string          `json:"ts"`
	Code      string          `json:"code"`
	Error     string          `json:"error"`
	Retryable bool            `json:"retryable"`
	RetryMS   int64           `json:"retry_after_ms"`
	raw       []byte
}

// dialWS opens the WebSocket at path with token (if non-empty) and extra headers.
func (e *pushEnv) dialWS(ctx context.Context, path, token string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	for k, v := range hdr {
		h[k] = v
	}
	if token != "" {
		h.Set("X-Chat-Token", token)
	}
	c, resp, err := websocket.Dial(ctx, e.wsURL(path), &websocket.DialOptions{HTTPClient: e.client, HTTPHeader: h})
	if c != nil {
		wsV2.Store(c, schematest.IsV2(path))
	}
	return c, resp, err
}

// wsV2 records the view of each socket dialWS opened, for readWS's check
// of its frames against the bundle.
var wsV2 sync.Map // *websocket.Conn → bool

func (e *pushEnv) mustWS(path, token string) *websocket.Conn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := e.dialWS(ctx, path, token, nil)
	assert.Success(e.t, err)
	c.SetReadLimit(1 << 20)
	e.t.Cleanup(func() { c.CloseNow() })
	return c
}

// refusedWS dials a WebSocket that must be refused before the upgrade and
// returns the HTTP status and the contract's error body.
func (e *pushEnv) refusedWS(path, token string, hdr http.Header) (*http.Response, errorAnswer) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := e.dialWS(ctx, path, token, hdr)
	if err == nil {
		c.CloseNow()
		e.t.Fatalf("WebSocket %s was upgraded; want a refusal", path)
	}
	if resp == nil {
		e.t.Fatalf("WebSocket %s: no HTTP answer: %v", path, err)
	}
	assert.Equal(e.t, "refusal content type", resp.Header.Get("Content-Type"), "application/json")
	body, rerr := io.ReadAll(resp.Body)
	assert.Success(e.t, rerr)
	schematest.Answer(e.t, http.MethodGet, path, resp.StatusCode, resp.Header, body)
	return resp, decodeError(e.t, body)
}

// readWS reads one frame with a deadline; a closed connection is an error
// that websocket.CloseStatus can read.
func readWS(ctx context.Context, c *websocket.Conn) (wsFrame, error) {
	typ, b, err := c.Read(ctx)
	if err != nil {
		return wsFrame{}, err
	}
	if typ != websocket.MessageText {
		return wsFrame{}, errors.New("binary frame")
	}
	var f wsFrame
	if err := json.Unmarshal(b, &f); err != nil {
		return wsFrame{}, fmt.Errorf("frame %q: %w", b, err)
	}
	f.raw = b
	view, _ := wsV2.Load(c)
	v2, _ := view.(bool)
	if err := schematest.CheckWS(v2, b); err != nil {
		return f, err
	}
	return f, nil
}

func nextWS(t testing.TB, c *websocket.Conn) wsFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := readWS(ctx, c)
	assert.Success(t, err)
	return f
}

// wsCloseStatus reads until the connection ends and returns its close
// status (-1 if it ended without a close frame).
func wsCloseStatus(t testing.TB, c *websocket.Conn, d time.Duration) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("the WebSocket was not closed within %v", d)
			}
			return websocket.CloseStatus(err)
		}
	}
}

func writeWS(t testing.TB, c *websocket.Conn, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	assert.Success(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	assert.Success(t, c.Write(ctx, websocket.MessageText, b))
}

// errorAnswer is the contract's error body.
type errorAnswer struct {
	Success   bool   `json:"success"`
	Error     string `json:"error"`
	Code      string `json:"code"`
	Retryable bool   `json:"retryable"`
}

func decodeError(t testing.TB, body []byte) errorAnswer {
	t.Helper()
	var e errorAnswer
	assert.Success(t, json.Unmarshal(body, &e))
	return e
}

// mustBinary builds ./cmd/chatrelay into a temp dir (the build cache
// makes the second and later builds quick) and returns its path.
func mustBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds ./cmd/chatrelay; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "chatrelay")
	goTool := "go" // go test puts its own GOROOT/bin first in PATH
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/chatrelay/chatrelay/cmd/chatrelay").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/chatrelay: %v\n%s", err, out)
	}
	return bin
}

// revokedAt is when grant id of thread (a share link's or a device's) was
// revoked, as the store has it (revoked_at), so that a test counts a
// revoke's second from its write: counting from the start of the CLI that
// revokes it put the process's start and its store's open on the clock,
// over a second on a loaded machine (as cmd/chatrelay's revokedAt says of
// agent keys).
func (e *pushEnv) revokedAt(t *testing.T, thread, id string) time.Time {
	t.Helper()
	g, err := e.backend.Store.(store.Participants).Grant(t.Context(), thread, id)
	assert.Success(t, err)
	if g.RevokedAt == 0 {
		t.Fatalf("the grant %s has no revoked_at in the store", id)
	}
	return time.UnixMilli(g.RevokedAt)
}

// cliReply runs "chatrelay reply" against the env's store (--data, or
// --store redis://… --redis-prefix) and returns the stored message's
// epoch. fsync is "always" or "never" (the file store's).
func (e *pushEnv) cliReply(ctx context.Context, bin, fsync, thread, text string) (int64, error) {
	args := append([]string{"reply"}, e.backend.CLIArgs()...)
	out, err := e.cli(ctx, bin, append(args, "--fsync", fsync, thread, text)...)
	if err != nil {
		return 0, err
	}
	var a struct{ Epoch int64 }
	if err := json.Unmarshal(out, &a); err != nil {
		return 0, fmt.Errorf("chatrelay reply printed %q: %w", out, err)
	}
	return a.Epoch, nil
}

// cli runs the chatrelay command bin with args (which point it at the
// env's store: e.backend.CLIArgs()) and returns what it printed; an error
// carries its standard error.
func (e *pushEnv) cli(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=", "CHATRELAY_REDIS_PREFIX=")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, fmt.Errorf("chatrelay %s: %v: %s", args[0], err, ee.Stderr)
	}
	return out, err
}
