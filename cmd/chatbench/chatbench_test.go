package main

import (
	"bufio"
	"strings"
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
		tg, err := loopbackTarget(c.url, 4)
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
	tg, _ := loopbackTarget("http://127.0.0.1:8080/spaces/newos4/", 1)
	if tg.prefix != "/spaces/newos4" || tg.addr != "127.0.0.1:8080" {
		t.Errorf("prefix %q addr %q", tg.prefix, tg.addr)
	}
}

func TestBenchText(t *testing.T) {
	t.Parallel()
	text := benchText(nil, "S1.ab12", 42, 123456789)
	seq, sent, ok := parseBenchText(text, "S1.ab12")
	if !ok || seq != 42 || sent != 123456789 {
		t.Fatalf("%q: %d %d %v", text, seq, sent, ok)
	}
	for _, other := range []string{"S1.ab1", "S1.ab123", "S2.ab12"} {
		if _, _, ok := parseBenchText(text, other); ok {
			t.Errorf("%q parsed with tag %q", text, other)
		}
	}
	if _, _, ok := parseBenchText([]byte("hello"), "S1.ab12"); ok {
		t.Error("a person's text parsed")
	}
}

func TestJSONFields(t *testing.T) {
	t.Parallel()
	f := []byte(`{"type":"message","message":{"id":"MSG-1","epoch":1792778400123,"ts":"x","author":"operator","text":"cb S1.x 1 2"}}`)
	if e, ok := jsonInt(f, "epoch"); !ok || e != 1792778400123 {
		t.Errorf("epoch %d %v", e, ok)
	}
	if s, ok := jsonStr(f, "text"); !ok || string(s) != "cb S1.x 1 2" {
		t.Errorf("text %q %v", s, ok)
	}
	if s, ok := jsonStr([]byte(`{"text":"a\"b"}`), "text"); !ok || string(s) != `a\"b` {
		t.Errorf("escaped text %q %v", s, ok)
	}
}

// recordingHandler keeps what a subscriber was handed.
type recordingHandler struct {
	readies []int64
	epochs  []int64
	texts   []string
}

func (h *recordingHandler) ready(_ *subscriber, c int64) { h.readies = append(h.readies, c) }
func (h *recordingHandler) message(_ *subscriber, e int64, text []byte) {
	h.epochs = append(h.epochs, e)
	h.texts = append(h.texts, string(text))
}

func TestReadSSE(t *testing.T) {
	t.Parallel()
	stream := "retry: 2000\n\nevent: ready\ndata: {\"thread\":\"a\",\"cursor\":5,\"awaiting\":true}\n\n" +
		": ping\n\n" +
		"id: 6\nevent: message\ndata: {\"id\":\"MSG-x\",\"epoch\":6,\"text\":\"one\"}\n\n" +
		"event: reset\ndata: {}\n\n" +
		"id: 7\r\nevent: message\r\ndata: {\"id\":\"MSG-y\",\"epoch\":7,\"text\":\"" + strings.Repeat("z", 5000) + "\"}\r\n\r\n"
	s := &subscriber{lines: bufio.NewReaderSize(strings.NewReader(stream), 64)}
	h := &recordingHandler{}
	if err := s.readSSE(h); err == nil {
		t.Fatal("want the end of the stream as an error")
	}
	if len(h.readies) != 1 || h.readies[0] != 5 {
		t.Errorf("readies %v", h.readies)
	}
	if len(h.epochs) != 2 || h.epochs[0] != 6 || h.epochs[1] != 7 || h.texts[0] != "one" || len(h.texts[1]) != 5000 {
		t.Errorf("epochs %v texts %d", h.epochs, len(h.texts))
	}
	if s.cursor.Load() != 7 || s.resets.Load() != 1 {
		t.Errorf("cursor %d resets %d", s.cursor.Load(), s.resets.Load())
	}
}

func TestReadHead(t *testing.T) {
	t.Parallel()
	resp := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\ncontent-length: 11\r\n\r\n{\"epoch\":9}" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(resp))
	status, cl, chunked, keep, err := readHead(br)
	if err != nil || status != 201 || cl != 11 || chunked || !keep {
		t.Fatalf("%d %d %v %v %v", status, cl, chunked, keep, err)
	}
	body, err := readBody(br, nil, cl, chunked)
	if err != nil || string(body) != `{"epoch":9}` {
		t.Fatalf("body %q %v", body, err)
	}
	status, cl, chunked, keep, err = readHead(br)
	if err != nil || status != 200 || cl != -1 || !chunked || keep {
		t.Fatalf("%d %d %v %v %v", status, cl, chunked, keep, err)
	}
	body, err = readBody(br, nil, cl, chunked)
	if err != nil || string(body) != "hello" {
		t.Fatalf("chunked body %q %v", body, err)
	}
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
