package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestHistBuckets(t *testing.T) {
	t.Parallel()
	prev := -1
	for _, v := range []uint64{0, 1, 63, 64, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<20 + 12345, 1 << 39} {
		i := bucketOf(v)
		if i < prev {
			t.Fatalf("bucketOf(%d) = %d, below the previous %d", v, i, prev)
		}
		prev = i
		lo, hi := bucketLow(i), bucketLow(i+1)
		if v < lo || v >= hi {
			t.Fatalf("value %d in bucket %d = [%d,%d)", v, i, lo, hi)
		}
		if bucketOf(lo) != i {
			t.Fatalf("bucketOf(bucketLow(%d)) = %d", i, bucketOf(lo))
		}
		if v >= 128 && float64(hi-lo)/float64(lo) > 1.0/64+1e-9 {
			t.Fatalf("bucket %d = [%d,%d) wider than 1/64", i, lo, hi)
		}
	}
}

func TestHistQuantiles(t *testing.T) {
	t.Parallel()
	var h hist
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty hist: want 0")
	}
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		name string
		q    float64
		want time.Duration
	}{
		{"p50", 0.50, 500 * time.Microsecond},
		{"p99", 0.99, 990 * time.Microsecond},
		{"p100", 1, 1000 * time.Microsecond},
	} {
		got := h.Quantile(c.q)
		if d := float64(got-c.want) / float64(c.want); d < -0.02 || d > 0.02 {
			t.Errorf("%s = %v, want %v ±2%%", c.name, got, c.want)
		}
	}
	if h.Max() != time.Millisecond || h.Count() != 1000 {
		t.Errorf("max %v count %d", h.Max(), h.Count())
	}
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://127.9.9.9:8080/spaces/newos4/", true},
		{"http://localhost:8080", true},
		{"http://[::1]:8080", true},
		{"http://10.0.0.1:8080", false},
		{"http://192.168.1.5", false},
		{"http://example.com", false},
		{"https://127.0.0.1:8080", false},
		{"http://0.0.0.0:8080", false},
	} {
		tg, err := loopbackTarget(c.url, 4, 8)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.url, err, c.ok)
			continue
		}
		if err == nil {
			for _, ip := range tg.sources {
				if !ip.IsLoopback() {
					t.Errorf("%s: source %s is not loopback", c.url, ip)
				}
			}
		}
	}
	tg, _ := loopbackTarget("http://127.0.0.1:8080/spaces/newos4/", 1, 8)
	if tg.prefix != "/spaces/newos4" || tg.addr != "127.0.0.1:8080" || tg.base != "http://127.0.0.1:8080/spaces/newos4" {
		t.Errorf("prefix %q addr %q base %q", tg.prefix, tg.addr, tg.base)
	}
}

func TestBenchText(t *testing.T) {
	t.Parallel()
	text := benchText(nil, "S1.ab12", 42, 123456789, 0)
	seq, sent, ok := parseBenchText(string(text), "S1.ab12")
	if !ok || seq != 42 || sent != 123456789 {
		t.Fatalf("%q: %d %d %v", text, seq, sent, ok)
	}
	for _, other := range []string{"S1.ab1", "S1.ab123", "S2.ab12"} {
		if _, _, ok := parseBenchText(string(text), other); ok {
			t.Errorf("%q parsed with tag %q", text, other)
		}
	}
	if _, _, ok := parseBenchText("hello", "S1.ab12"); ok {
		t.Error("a person's text parsed")
	}
	// The scenarios' texts are 100 bytes and still carry their send time.
	padded := benchText([]byte("prefix"), "S1.ab12", 7, 987654321, 100)
	if got := len(padded) - len("prefix"); got != 100 {
		t.Fatalf("padded text is %d bytes, want 100: %q", got, padded)
	}
	seq, sent, ok = parseBenchText(string(padded[len("prefix"):]), "S1.ab12")
	if !ok || seq != 7 || sent != 987654321 {
		t.Errorf("%q: %d %d %v", padded, seq, sent, ok)
	}
	if _, _, ok := parseBenchText("cb S1.ab12 7 987654321 xxyx", "S1.ab12"); ok {
		t.Error("a text with a foreign tail parsed")
	}
}

// recordingHandler keeps what a subscriber was handed.
type recordingHandler struct {
	readies []int64
	epochs  []int64
	texts   []string
}

func (h *recordingHandler) ready(_ *subscriber, c int64) { h.readies = append(h.readies, c) }
func (h *recordingHandler) message(_ *subscriber, e int64, text string) {
	h.epochs = append(h.epochs, e)
	h.texts = append(h.texts, text)
}

// TestSSESession runs two SSE sessions against a local server: the first
// is cut in the middle of an event, the second must resume from the last
// complete message, not from the cut event's id.
func TestSSESession(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lastIDs, tokens []string
	long := strings.Repeat("z", 100<<10) // above r3labs' default 64 KiB event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		tokens = append(tokens, r.Header.Get("X-Chat-Token"))
		n := len(lastIDs)
		mu.Unlock()
		if r.URL.Path != "/p/api/chat/stream" || r.URL.RawQuery != "" {
			http.Error(w, "bad path "+r.URL.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		if n == 1 {
			io.WriteString(w, "retry: 2000\n\nevent: ready\ndata: {\"thread\":\"a\",\"cursor\":5,\"awaiting\":true}\n\n"+
				": ping\n\n"+
				"id: 6\nevent: message\ndata: {\"id\":\"MSG-x\",\"epoch\":6,\"text\":\"one\"}\n\n"+
				"event: reset\ndata: {}\n\n"+
				"id: 7\r\nevent: message\r\ndata: {\"id\":\"MSG-y\",\"epoch\":7,\"text\":\""+long+"\"}\r\n\r\n"+
				"id: 8\nevent: message\ndata: {\"id\":\"MSG-z\",\"epo")
			fl.Flush()
			panic(http.ErrAbortHandler) // drop the connection mid-event
		}
		io.WriteString(w, "event: ready\ndata: {\"cursor\":8}\n\nid: 8\nevent: message\ndata: {\"epoch\":8,\"text\":\"two\"}\n\n")
	}))
	defer srv.Close()
	tg, err := loopbackTarget(srv.URL+"/p/", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := &subscriber{thread: &thread{token: "tok"}}
	h := &recordingHandler{}
	if err := s.session(ctx, tg, h); err == nil {
		t.Fatal("first session: want the cut connection as an error")
	}
	if len(h.readies) != 1 || h.readies[0] != 5 {
		t.Errorf("readies %v", h.readies)
	}
	if len(h.epochs) != 2 || h.epochs[0] != 6 || h.epochs[1] != 7 || h.texts[0] != "one" || len(h.texts[1]) != len(long) {
		t.Errorf("epochs %v texts %d", h.epochs, len(h.texts))
	}
	if s.cursor.Load() != 7 || s.resets.Load() != 1 || s.partial.Load() != 1 {
		t.Errorf("cursor %d resets %d partial %d", s.cursor.Load(), s.resets.Load(), s.partial.Load())
	}
	if err := s.session(ctx, tg, h); !errors.Is(err, errStreamEnded) {
		t.Errorf("second session: %v, want a clean end", err)
	}
	if len(h.epochs) != 3 || h.epochs[2] != 8 || s.cursor.Load() != 8 {
		t.Errorf("after resume: epochs %v cursor %d", h.epochs, s.cursor.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lastIDs) != 2 || lastIDs[0] != "" || lastIDs[1] != "7" || tokens[0] != "tok" {
		t.Errorf("Last-Event-ID sent %q, tokens %q", lastIDs, tokens)
	}
}

func TestSSESessionStatus(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer srv.Close()
	tg, _ := loopbackTarget(srv.URL, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := &subscriber{thread: &thread{token: "tok"}}
	if err := s.session(ctx, tg, &recordingHandler{}); statusOf(err) != http.StatusTooManyRequests {
		t.Errorf("err %v, want HTTP 429", err)
	}
}

func TestAPIClient(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Chat-Token") != "tok" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			if r.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"text":"cb S1.x 3 `) {
				http.Error(w, "bad body "+string(b), http.StatusBadRequest)
				return
			}
			n := posts.Add(1)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"success":true,"id":"MSG-a","epoch":%d,"ts":"x","thread":"t"}`, 1000+n)
			return
		}
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer srv.Close()
	tg, _ := loopbackTarget(srv.URL, 2, 2)
	p := &poster{hc: apiClient{t: tg}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		epoch, _, err := p.post(ctx, &thread{token: "tok"}, "S1.x", 3)
		if err != nil || epoch != int64(1001+i) {
			t.Fatalf("post %d: %d %v", i, epoch, err)
		}
	}
	if _, err := p.hc.do(ctx, http.MethodGet, "/api/chat/poll", "tok", nil); statusOf(err) != http.StatusTooManyRequests {
		t.Errorf("poll: %v, want HTTP 429", err)
	}
	closePosters([]*poster{p})
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                                string
		acked, got                          []int64
		lost, repeated, outOfOrder, unacked int64
	}{
		{"exact", []int64{1, 2, 3}, []int64{1, 2, 3}, 0, 0, 0, 0},
		{"lost", []int64{1, 2, 3}, []int64{1, 3}, 1, 0, 0, 0},
		{"repeated", []int64{1, 2, 3}, []int64{1, 2, 2, 3}, 0, 1, 0, 0},
		{"out of order", []int64{1, 2, 3}, []int64{2, 1, 3}, 0, 0, 1, 0},
		{"unacknowledged", []int64{1, 3}, []int64{1, 2, 3}, 0, 0, 0, 1},
		{"nothing", nil, nil, 0, 0, 0, 0},
	} {
		var k check
		k.add(c.acked, c.got)
		if k.lost != c.lost || k.repeated != c.repeated || k.outOfOrder != c.outOfOrder || k.unexpected != c.unacked {
			t.Errorf("%s: %+v", c.name, k)
		}
	}
}

func TestProcParsers(t *testing.T) {
	t.Parallel()
	stat := []byte("1234 (chat relay) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0")
	d, err := parseStatCPU(stat)
	if err != nil || d != 3*time.Second {
		t.Errorf("stat: %v %v", d, err)
	}
	status := []byte("Name:\tchatrelay\nVmHWM:\t  20480 kB\nVmRSS:\t  10240 kB\nThreads:\t9\n")
	if n, err := parseStatusField(status, "VmRSS"); err != nil || n != 10240 {
		t.Errorf("VmRSS %d %v", n, err)
	}
	if n, err := parseStatusField(status, "Threads"); err != nil || n != 9 {
		t.Errorf("Threads %d %v", n, err)
	}
	busy, err := parseMachineBusy([]byte("cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n"))
	if err != nil || busy != 161*clockTick {
		t.Errorf("busy %v %v", busy, err)
	}
	if _, err := procCPU("self"); err != nil {
		t.Errorf("own /proc/self/stat: %v", err)
	}
}

// TestUsageShards: with several backend processes (Redis shards) the
// meter sums their CPU and names the busiest one's apart. The test
// process is each of two "shards" here, so the sum is twice the busiest
// (within a tick).
func TestUsageShards(t *testing.T) {
	t.Parallel()
	self := strconv.Itoa(os.Getpid())
	u := startUsage("", []string{self, self})
	start, _ := procCPU(self)
	for { // spend CPU until /proc counts some
		if now, _ := procCPU(self); now-start >= 2*clockTick {
			break
		}
	}
	u.stop()
	// The two reads of each moment are microseconds apart: a tick may
	// fall between them.
	if !u.BackendOK || u.BackendBusiest < 2*clockTick || u.Backend > 2*u.BackendBusiest || u.Backend < 2*u.BackendBusiest-clockTick {
		t.Errorf("backend %v, busiest %v, ok %v", u.Backend, u.BackendBusiest, u.BackendOK)
	}
	gone := startUsage("", []string{"999999999"})
	gone.stop()
	if gone.BackendOK {
		t.Error("a backend with no /proc entry was counted")
	}
}

// TestBackendPIDs: --backend-pid takes one pid or a comma-separated list
// of them, each a running process; anything else is refused.
func TestBackendPIDs(t *testing.T) {
	t.Parallel()
	self := strconv.Itoa(os.Getpid())
	if pids, err := backendPIDs(""); err != nil || pids != nil {
		t.Errorf("none: %v %v", pids, err)
	}
	if pids, err := backendPIDs(self + "," + self); err != nil || len(pids) != 2 {
		t.Errorf("two: %v %v", pids, err)
	}
	for _, bad := range []string{"x", self + ",", "-1", self + ",999999999"} {
		if _, err := backendPIDs(bad); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

func TestResultJSON(t *testing.T) {
	t.Parallel()
	r := &result{id: "S1", name: "latency", label: "fsync=never"}
	r.int("posts", 10)
	r.ms("p99", 1500*time.Microsecond)
	r.ratio("delivered", 20, 20)
	want := `{"scenario":"S1","name":"latency","label":"fsync=never","posts":10,"p99_ms":1.5,"delivered":{"got":20,"want":20}}` + "\n"
	if got := string(r.json()); got != want {
		t.Errorf("json:\n got %s\nwant %s", got, want)
	}
	if got := r.text(); got != "S1 latency    [fsync=never] posts=10 p99_ms=1.50ms delivered=20/20" {
		t.Errorf("text: %q", got)
	}
}

// TestMakeSubs: S1's method gives each thread one SSE and one WebSocket
// subscriber; S3's and S5's mixes are half and half; sse and ws are all of
// one kind.
func TestMakeSubs(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 7, 1000} {
		threads := newThreads(n)
		kinds := map[*thread][]bool{}
		for _, s := range makeSubs(threads, 2*n, "mixed") {
			kinds[s.thread] = append(kinds[s.thread], s.ws)
		}
		for _, th := range threads {
			if k := kinds[th]; len(k) != 2 || k[0] == k[1] {
				t.Fatalf("%d threads: thread %d has subscribers ws=%v, want one SSE and one WebSocket", n, th.idx, k)
			}
		}
	}
	for _, c := range []struct{ threads, subs int }{{5000, 10000}, {1000, 5000}, {9500, 19000}, {3, 6}} {
		ws := 0
		for _, s := range makeSubs(newThreads(c.threads), c.subs, "mixed") {
			if s.ws {
				ws++
			}
		}
		if ws != c.subs/2 {
			t.Errorf("mixed, %d subscribers over %d threads: %d WebSocket, want %d", c.subs, c.threads, ws, c.subs/2)
		}
	}
	for _, mix := range []string{"sse", "ws"} {
		for _, s := range makeSubs(newThreads(3), 9, mix) {
			if s.ws != (mix == "ws") {
				t.Errorf("%s: a subscriber with ws=%v", mix, s.ws)
			}
		}
	}
}

// TestPostStatsKeepKindsApart: S7 counts posts and reactions in one
// result; a failed or rate-limited reaction must not be reported under the
// posts' keys (the result's JSON had "post_errors" twice, and the note
// called a reaction's error a post's).
func TestPostStatsKeepKindsApart(t *testing.T) {
	var posts, reacts postStats
	posts.count(&httpError{status: http.StatusTooManyRequests, body: "slow down"})
	posts.count(errors.New("post broke"))
	reacts.count(&httpError{status: http.StatusTooManyRequests, body: "slow down"})
	reacts.count(errors.New("reaction broke"))
	var r result
	posts.report(&r, "post")
	reacts.report(&r, "reaction")
	var got map[string]any
	if err := json.Unmarshal(r.json(), &got); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, f := range r.figs {
		seen[f.key]++
	}
	for _, key := range []string{"rate_limited", "post_errors", "reactions_rate_limited", "reaction_errors"} {
		if seen[key] != 1 {
			t.Errorf("key %q reported %d times, want once (figures %v)", key, seen[key], r.figs)
		}
	}
	notes := strings.Join(r.notes, "\n")
	if !strings.Contains(notes, "last reaction error: reaction broke") || !strings.Contains(notes, "last post error: post broke") {
		t.Errorf("notes do not name each kind's last error:\n%s", notes)
	}
}

// TestPostStatsLastErrorIsAFailure: the note's last error is the last
// failed call's, not a rate-limited one's that came after it (429s are
// counted and noted on their own).
func TestPostStatsLastErrorIsAFailure(t *testing.T) {
	var posts postStats
	posts.count(errors.New("post broke"))
	posts.count(&httpError{status: http.StatusTooManyRequests, body: "slow down"})
	var r result
	posts.report(&r, "post")
	notes := strings.Join(r.notes, "\n")
	if !strings.Contains(notes, "last post error: post broke") {
		t.Errorf("the note does not name the last failure:\n%s", notes)
	}
}
