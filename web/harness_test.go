package web_test

// The harness of the browser tests: one Chromium for the whole package,
// the chatrelay binary built once and run as a real server per test, a
// reverse proxy that can refuse the push routes, and helpers that read the
// page's DOM.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

var (
	chromiumPath = flag.String("chromium", envOr("CHROMIUM", "/usr/bin/chromium"), "the Chromium the browser tests drive")
	update       = flag.Bool("update", false, "rewrite the screenshots in testdata/ (screenshot.png, approval.png, people.png, participant.png)")
	showBrowser  = flag.Bool("browser-log", false, "print Chromium's own output")
	testPorts    = flag.String("ports", os.Getenv("CHATRELAY_TEST_PORTS"), "FIRST-LAST: the loopback ports the tests listen on (servers and the tests' own sites); empty: any free port")
)

// portRange is -ports parsed: [first, last], or zeros for any free port.
var portRange [2]int

// nextPort is the next port of portRange a server tries.
var nextPort atomic.Int32

// newLoopbackServer is httptest.NewServer on loopbackAddr.
func newLoopbackServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", loopbackAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// loopbackAddr is an address for a server to listen on: 127.0.0.1:0, or
// with -ports the next port of the range that is free now.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	if portRange[0] == 0 {
		return "127.0.0.1:0"
	}
	for range portRange[1] - portRange[0] + 1 {
		p := int(nextPort.Add(1)) - 1
		if p > portRange[1] {
			nextPort.Store(int32(portRange[0]) + 1)
			p = portRange[0]
		}
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatalf("no free port in %s", *testPorts)
	return ""
}

var (
	chatrelayBin string          // built once by TestMain
	browserCtx   context.Context // the one browser every test opens tabs in
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

// runTests builds chatrelay and starts Chromium, then runs the tests. A
// missing Chromium fails the package: these tests are never skipped
// (.ci/packages installs it).
func runTests(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "chatrelay-web-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	if *testPorts != "" {
		if _, err := fmt.Sscanf(*testPorts, "%d-%d", &portRange[0], &portRange[1]); err != nil || portRange[0] < 1 || portRange[1] <= portRange[0] || portRange[1] > 65535 {
			fmt.Fprintf(os.Stderr, "-ports %q: want FIRST-LAST, two ports, FIRST below LAST\n", *testPorts)
			return 1
		}
		nextPort.Store(int32(portRange[0]))
	}

	chatrelayBin = filepath.Join(tmp, "chatrelay")
	build := exec.Command("go", "build", "-o", chatrelayBin, "github.com/chatrelay/chatrelay/cmd/chatrelay")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building chatrelay: %v\n%s", err, out)
		return 1
	}
	if _, err := os.Stat(*chromiumPath); err != nil {
		fmt.Fprintf(os.Stderr, "browser tests need Chromium at %s (apt-get install chromium, or -chromium PATH): %v\n", *chromiumPath, err)
		return 1
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(*chromiumPath),
		chromedp.UserDataDir(filepath.Join(tmp, "profile")),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1000, 700),
	)
	if *showBrowser {
		opts = append(opts, chromedp.CombinedOutput(os.Stderr))
	}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer allocCancel()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	// The first action starts the browser, which lives as long as the
	// context given to it: so not one with a deadline.
	if err := within(60*time.Second, func() error { return chromedp.Do(ctx) }); err != nil {
		fmt.Fprintf(os.Stderr, "starting %s: %v\n", *chromiumPath, err)
		return 1
	}
	browserCtx = ctx
	return m.Run()
}

// ---- the server ----

// server is a chatrelay process on loopback.
type server struct {
	t    *testing.T
	URL  string // http://127.0.0.1:PORT/
	Addr string
	Data string
	args []string
	env  []string // more of the process's environment ("K=V")

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  strings.Builder
}

// startServer runs `chatrelay serve` on a free loopback port with a fresh
// data folder and extra flags.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startServerEnv(t, nil, args...)
}

// startServerEnv is startServer with more environment for the process
// (env: "K=V").
func startServerEnv(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	s := &server{t: t, Addr: loopbackAddr(t), Data: t.TempDir(), args: args, env: env}
	s.start()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("chatrelay log:\n%s", s.logText())
		}
	})
	return s
}

// start runs the server on s.Addr, which the first start fixes, so a
// restart comes back on the same origin.
func (s *server) start() {
	s.t.Helper()
	args := append([]string{"serve", "--addr", s.Addr, "--data", s.Data, "--log-level", "debug"}, s.args...)
	cmd := exec.Command(chatrelayBin, args...)
	cmd.Env = append(cleanEnv(), s.env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.log.Write(p)
	})
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "listening on ") {
				select {
				case line <- strings.TrimPrefix(sc.Text(), "listening on "):
				default:
				}
			}
		}
	}()
	select {
	case u := <-line:
		s.URL = u
		pu, err := url.Parse(u)
		if err != nil {
			s.t.Fatal(err)
		}
		s.Addr = pu.Host
	case <-done:
		s.t.Fatalf("chatrelay exited at start:\n%s", s.logText())
	case <-time.After(20 * time.Second):
		s.t.Fatalf("chatrelay did not start:\n%s", s.logText())
	}
}

// stop ends the server as SIGTERM does, and waits for it.
func (s *server) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.t.Errorf("chatrelay did not stop within 10s of SIGTERM")
		cmd.Process.Kill()
		<-done
	}
}

func (s *server) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// reply answers a thread as hermes with the host CLI, in its own process.
func (s *server) reply(thread, text string) {
	s.t.Helper()
	cmd := exec.Command(chatrelayBin, "reply", "--data", s.Data, thread, text)
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("chatrelay reply: %v\n%s", err, out)
	}
}

// cli runs a host CLI verb on the server's data folder and returns what it
// printed; it fails the test if the verb fails.
func (s *server) cli(args ...string) []byte {
	s.t.Helper()
	out, errOut, err := s.cliRun(nil, args...)
	if err != nil {
		s.t.Fatalf("chatrelay %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// cliRun runs a host CLI verb on the server's data folder with stdin.
func (s *server) cliRun(stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	s.t.Helper()
	cmd := exec.Command(chatrelayBin, append(args, "--data", s.Data)...)
	cmd.Env = cleanEnv()
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHATRELAY_") {
			env = append(env, kv)
		}
	}
	return env
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// ---- the API, from Go ----

type message struct {
	ID     string `json:"id"`
	Epoch  int64  `json:"epoch"`
	TS     string `json:"ts"`
	Author string `json:"author"`
	Text   string `json:"text"`
}

type pollPage struct {
	Success  bool      `json:"success"`
	Thread   string    `json:"thread"`
	Messages []message `json:"messages"`
	Awaiting bool      `json:"awaiting"`
	Cursor   int64     `json:"cursor"`
}

// message2 is a v2 message object, with the fields the page draws.
type message2 struct {
	ID          string              `json:"id"`
	Epoch       int64               `json:"epoch"`
	Rev         int64               `json:"rev"`
	Author      string              `json:"author"`
	Text        string              `json:"text"`
	ClientID    string              `json:"client_id"`
	Interaction *interaction        `json:"interaction"`
	Card        json.RawMessage     `json:"card"`
	Reactions   map[string][]string `json:"reactions"`
}

type interaction struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Prompt     string `json:"prompt"`
	Deadline   int64  `json:"deadline"`
	State      string `json:"state"`
	AnsweredBy string `json:"answered_by"`
	Answer     struct {
		Decision string `json:"decision"`
		Value    string `json:"value"`
	} `json:"answer"`
}

// poll2 reads a thread's newest messages through the v2 poll route.
func poll2(t *testing.T, base, token string) []message2 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"api/chat/poll?v=2", nil)
	req.Header.Set("X-Chat-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Messages []message2 `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
		t.Fatalf("poll v2: %d %v", resp.StatusCode, err)
	}
	return p.Messages
}

// poll reads a thread's newest messages through the v1 poll route.
func poll(t *testing.T, base, token string) pollPage {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"api/chat/poll", nil)
	req.Header.Set("X-Chat-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p pollPage
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
		t.Fatalf("poll: %d %v", resp.StatusCode, err)
	}
	return p
}

// post writes a message through the v1 post route.
func post(t *testing.T, base, token, text, kind string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text, "kind": kind})
	req, _ := http.NewRequest(http.MethodPost, base+"api/chat/post", strings.NewReader(string(body)))
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("post: %d %s", resp.StatusCode, b)
	}
}

// ticket gets a stream ticket for token.
func ticket(t *testing.T, base, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"api/chat/ticket", nil)
	req.Header.Set("X-Chat-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct{ Ticket string }
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("ticket: %d %v", resp.StatusCode, err)
	}
	return a.Ticket
}

// waitExpired waits until the stream route refuses ticket tk.
func waitExpired(t *testing.T, base, tk string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "api/chat/stream?ticket=" + url.QueryEscape(tk))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticket still accepted (%d) after 20s", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond) // the poll interval of a condition
	}
}

// waitFor polls cond every 20ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval of a condition
	}
}

// threadOf is the contract's thread of a token.
func threadOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])[:16]
}

// ---- the proxy ----

// gate is a reverse proxy in front of a server that can refuse the
// WebSocket route, the SSE route, or both, as a corporate proxy or a
// broken middlebox would. Refusing also cuts the streams already open. It
// can also refuse polls, and lose the answers to posts (and to answers of
// interactions, and reactions): the request reaches the server, which stores it, and the
// connection is then cut before the browser reads a byte of the answer.
type gate struct {
	URL          string
	noWS         atomic.Bool
	noSSE        atomic.Bool
	noPoll       atomic.Bool
	dropPosts    atomic.Bool
	dropResponds atomic.Bool
	dropReacts   atomic.Bool
	posts        atomic.Int32 // posts that went through, answered or not

	mu      sync.Mutex
	streams map[*int]stream
	peak    int      // most SSE streams open at once
	lines   []string // every request line that reached the proxy: "METHOD URI"
	heads   []string // the Referer and Authorization scheme of each, "Referer: …"
}

type stream struct {
	ws     bool
	cancel context.CancelFunc
}

func newGate(t *testing.T, backend *server) *gate {
	t.Helper()
	target, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{streams: map[*int]stream{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the page's origin is the proxy's
		},
		FlushInterval: -1,
		ErrorLog:      nil,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	srv := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.lines = append(g.lines, r.Method+" "+r.RequestURI)
		if ref := r.Header.Get("Referer"); ref != "" {
			g.heads = append(g.heads, "Referer: "+ref)
		}
		if scheme, _, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok {
			g.heads = append(g.heads, "Authorization: "+scheme+" for "+r.Method+" "+r.URL.Path)
		}
		g.mu.Unlock()
		isWS := strings.HasSuffix(r.URL.Path, "/api/chat/ws")
		isSSE := strings.HasSuffix(r.URL.Path, "/api/chat/stream")
		isPoll := strings.HasSuffix(r.URL.Path, "/api/chat/poll")
		if (isWS && g.noWS.Load()) || (isSSE && g.noSSE.Load()) || (isPoll && g.noPoll.Load()) {
			http.Error(w, "refused by the test proxy", http.StatusServiceUnavailable)
			return
		}
		isPost := strings.HasSuffix(r.URL.Path, "/api/chat/post") && r.Method == http.MethodPost
		if isPost {
			g.posts.Add(1)
		}
		isRespond := strings.HasSuffix(r.URL.Path, "/api/chat/respond") && r.Method == http.MethodPost
		isReact := strings.HasSuffix(r.URL.Path, "/api/chat/react") && r.Method == http.MethodPost
		if isPost && g.dropPosts.Load() || isRespond && g.dropResponds.Load() || isReact && g.dropReacts.Load() {
			rp.ServeHTTP(httptest.NewRecorder(), r) // the server stores it…
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // …and its answer is lost
			}
			return
		}
		if isWS || isSSE {
			ctx, cancel := context.WithCancel(r.Context())
			key := new(int)
			g.mu.Lock()
			g.streams[key] = stream{ws: isWS, cancel: cancel}
			if n := g.open(false); n > g.peak {
				g.peak = n
			}
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				delete(g.streams, key)
				g.mu.Unlock()
				cancel()
			}()
			r = r.WithContext(ctx)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		g.refuse(true, true) // ends the hijacked WebSockets, which Close does not wait for
		srv.CloseClientConnections()
		srv.Close()
	})
	g.URL = srv.URL + "/"
	return g
}

// refuse sets which push routes are refused and cuts their open streams.
func (g *gate) refuse(ws, sse bool) {
	g.noWS.Store(ws)
	g.noSSE.Store(sse)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.streams {
		if (s.ws && ws) || (!s.ws && sse) {
			s.cancel()
		}
	}
}

// cut ends the open streams, as a dropped connection does.
func (g *gate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.streams {
		s.cancel()
	}
}

// open counts the open streams, WebSockets if ws, else SSE. Call with g.mu held.
func (g *gate) open(ws bool) int {
	n := 0
	for _, s := range g.streams {
		if s.ws == ws {
			n++
		}
	}
	return n
}

// requests returns every request line the proxy saw ("GET /p") and the
// Referer headers and Authorization schemes sent with them.
func (g *gate) requests() (lines, heads []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.lines), slices.Clone(g.heads)
}

func (g *gate) counts() (sse, peakSSE int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open(false), g.peak
}

// ---- tabs ----

// tab is one browser tab.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// newWindow opens a tab in a fresh browser profile (its own storage, as a
// new incognito window has), closed when the test ends.
func newWindow(t *testing.T) *tab {
	t.Helper()
	return openTab(t, browserCtx, chromedp.WithNewBrowserContext())
}

// adopt gives a tab of another profile the identity token (as a person
// who copied it to a second browser would), then loads the page at u.
func (tb *tab) adopt(u, token string) {
	tb.t.Helper()
	tb.open(u)
	eval[bool](tb, `(localStorage.setItem("chatrelay.token", `+js(token)+`), true)`)
	tb.open(u)
	if got := tb.token(); got != token {
		tb.t.Fatalf("the tab kept token %s…, want %s…", got[:8], token[:8])
	}
}

// sibling opens another tab in the same profile as tb: same localStorage,
// so the same token.
func (tb *tab) sibling() *tab {
	tb.t.Helper()
	return openTab(tb.t, tb.ctx)
}

func openTab(t *testing.T, parent context.Context, opts ...chromedp.ContextOption) *tab {
	t.Helper()
	parent, stop := context.WithCancel(parent)
	ctx, cancel := chromedp.NewContext(parent, opts...)
	t.Cleanup(func() {
		stop()
		cancel()
	})
	// The first action opens the tab, which lives as long as the context
	// given to it: so not one with a deadline.
	if err := within(20*time.Second, func() error { return chromedp.Do(ctx) }); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return &tab{t: t, ctx: ctx}
}

// within runs f, giving up on it after d.
func within(d time.Duration, f func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		return fmt.Errorf("no answer within %v", d)
	}
}

// do runs actions with a deadline.
func (tb *tab) do(d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("%s: %v%s", what, err, tb.dump())
	}
}

// open loads the page at u.
func (tb *tab) open(u string) {
	tb.t.Helper()
	tb.do(20*time.Second, "navigate to "+u, chromedp.Navigate(u))
}

// eval runs JavaScript in the tab (awaiting a promise) and decodes its value.
func eval[T any](tb *tab, js string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v%s", js, err, tb.dump())
	}
	return v
}

// waitJS waits until the JavaScript expression js is truthy, polling every
// 50ms, and returns how long that took.
func (tb *tab) waitJS(d time.Duration, what, js string) time.Duration {
	tb.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(tb.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		tb.t.Fatalf("waiting %v for %s: %v%s", d, what, err, tb.dump())
	}
	return time.Since(start)
}

// dump describes the page, for a failure message.
func (tb *tab) dump() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 3*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		url: location.href,
		status: document.getElementById("status")?.dataset.state,
		shown: [...document.querySelectorAll("#log li")].map((li) => li.querySelector(".text, .ix, .card")?.textContent),
		notice: document.getElementById("notice-text")?.textContent,
		waiting: document.getElementById("waiting") ? !document.getElementById("waiting").hidden : null,
		me: document.getElementById("me")?.textContent,
		ended: document.getElementById("ended-text")?.textContent,
		people: document.getElementById("invite-error")?.textContent || document.getElementById("people-status")?.textContent,
	})`))
	if err != nil {
		return ""
	}
	return "\npage: " + s
}

// js quotes s as a JavaScript string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// waitState waits for the status indicator to show state.
func (tb *tab) waitState(d time.Duration, state string) time.Duration {
	tb.t.Helper()
	return tb.waitJS(d, "status "+state, `document.getElementById("status").dataset.state === `+js(state))
}

// waitShown waits until a message with this text is shown.
func (tb *tab) waitShown(d time.Duration, text string) time.Duration {
	tb.t.Helper()
	return tb.waitJS(d, "message "+js(text)+" shown",
		`[...document.querySelectorAll("#log li .text")].some((e) => e.textContent === `+js(text)+`)`)
}

// shownMsg is a message as the page shows it. Text is a plain message's
// text; Kind says what the page drew: "text", "ix" (an interaction) or
// "card".
type shownMsg struct {
	ID     string `json:"id"`
	Author string `json:"author"`
	Text   string `json:"text"`
	Time   string `json:"time"`
	Kind   string `json:"kind"`
}

func (tb *tab) shown() []shownMsg {
	tb.t.Helper()
	return eval[[]shownMsg](tb, `[...document.querySelectorAll("#log li")].map((li) => ({
		id: li.dataset.id,
		author: li.querySelector(".author").textContent,
		text: li.querySelector(":scope > .text")?.textContent ?? "",
		time: li.querySelector("time").textContent,
		kind: li.querySelector(":scope > .ix") ? "ix" : li.querySelector(":scope > .card") ? "card" : "text",
	}))`)
}

// token is the page's identity, from its localStorage.
func (tb *tab) token() string {
	tb.t.Helper()
	tok := eval[string](tb, `localStorage.getItem("chatrelay.token") || ""`)
	if len(tok) != 64 {
		tb.t.Fatalf("token %q in localStorage, want 64 hex", tok)
	}
	return tok
}

// write types text in the composer and presses Enter.
func (tb *tab) write(text string) {
	tb.t.Helper()
	tb.do(15*time.Second, "type "+js(text), chromedp.SendKeys(chromedp.CSS("#text"), text))
	tb.enter(false)
}

// enter presses Enter (with Shift if shift) in the focused element as a
// keyboard does: one keydown that carries the text, so that a page which
// cancels the keydown gets no newline. (SendKeys sends the character as a
// separate event that no keydown handler can cancel.)
func (tb *tab) enter(shift bool) {
	tb.t.Helper()
	var mods int64
	if shift {
		mods = 8 // Shift
	}
	tb.press(input.DispatchKeyEventParams{
		Key: "Enter", Code: "Enter", Modifiers: mods,
		WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13, Text: "\r", UnmodifiedText: "\r",
	})
}

// arrowRight presses the right arrow key in the focused element.
func (tb *tab) arrowRight() {
	tb.t.Helper()
	tb.press(input.DispatchKeyEventParams{Key: "ArrowRight", Code: "ArrowRight", WindowsVirtualKeyCode: 39, NativeVirtualKeyCode: 39})
}

// press presses and releases a key (down's Type is set here).
func (tb *tab) press(down input.DispatchKeyEventParams) {
	tb.t.Helper()
	down.Type = input.DispatchKeyEventTypeKeyDown
	up := down
	up.Type, up.Text, up.UnmodifiedText = input.DispatchKeyEventTypeKeyUp, "", ""
	tb.do(5*time.Second, "press "+down.Key, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, down); err != nil {
			return chromedp.Void{}, err
		}
		_, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, up)
		return chromedp.Void{}, err
	})
}

// checkOnce fails unless the page shows exactly the thread's messages, in
// order, each once.
func checkOnce(t *testing.T, tb *tab, want []message) {
	t.Helper()
	got := tb.shown()
	if len(got) != len(want) {
		t.Fatalf("page shows %d messages, the thread has %d:\npage: %v\nthread: %v", len(got), len(want), got, want)
	}
	seen := map[string]bool{}
	for i := range got {
		if seen[got[i].ID] {
			t.Errorf("message %s shown twice", got[i].ID)
		}
		seen[got[i].ID] = true
		if got[i].ID != want[i].ID || (got[i].Kind == "text" && got[i].Text != want[i].Text) {
			t.Errorf("message %d: page shows %s %q, thread has %s %q", i, got[i].ID, got[i].Text, want[i].ID, want[i].Text)
		}
	}
}

// callAPI sends body (JSON, unless nil) to the server at url with the
// header's credential ("X-Chat-Token: …" or "Authorization: Bearer …"),
// and returns the answer's status and body.
func callAPI(t *testing.T, method, url, header, credential string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(header, credential)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}
