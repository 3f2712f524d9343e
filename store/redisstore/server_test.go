package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// The limiters are what the transport asks for.
var (
	_ chatrelay.RateLimiter   = (*RateLimiter)(nil)
	_ chatrelay.StreamLimiter = (*StreamLimiter)(nil)
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// go-redis logs every failed reconnection to stderr; the tests provoke many.
	redis.SetLogger(quietLogger{})
	if os.Getenv("CHATRELAY_TEST_CHILD") == "attach" {
		os.Exit(attachChild()) // attach_crash_test.go
	}
	// Every Follow, renewal and server goroutine ends by Close and cleanup.
	// go-redis's own redial of a node that died (TestClusterPrimaryKilled
	// leaves one dead) sleeps a second between tries and sees the closed
	// pool only then.
	goleak.VerifyTestMain(killAfter{m}, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// openStore opens a Store on r, closed when the test ends.
func openStore(t testing.TB, r *redistest.Server, opt Options) *Store {
	t.Helper()
	if opt.Log == nil {
		opt.Log = testLogger(t)
	}
	s, err := Open(t.Context(), r.URL(), opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testLogger logs through t.Logf until the test's cleanup: go-redis's own
// lines go to the newest open store's logger (clientlog.go), which may be
// another test's, and t.Logf after a test ended panics.
func testLogger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	t    testing.TB
	mu   sync.RWMutex // held (read) across t.Logf, so stop waits for it
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if !w.done {
		w.t.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

func wantCode(t testing.TB, err error, code chatrelay.Code) *chatrelay.Error {
	t.Helper()
	if got := chatrelay.CodeOf(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
	var he *chatrelay.Error
	errors.As(err, &he)
	return he
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// recorder collects what Follow hands on.
type recorder struct {
	mu      sync.Mutex
	batches []store.Batch
	ready   chan struct{}
	once    sync.Once
}

func newRecorder() *recorder { return &recorder{ready: make(chan struct{})} }

func (r *recorder) fn(b store.Batch) {
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	if b.Ready {
		r.once.Do(func() { close(r.ready) })
	}
}

func (r *recorder) snapshot() []store.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.Batch(nil), r.batches...)
}

// messages returns the messages handed on for thread, in order.
func (r *recorder) messages(thread string) []store.Entry {
	var out []store.Entry
	for _, b := range r.snapshot() {
		if b.Thread == thread {
			out = append(out, b.Messages...)
		}
	}
	return out
}

func (r *recorder) resets(thread string) int {
	n := 0
	for _, b := range r.snapshot() {
		if b.Thread == thread && b.Reset {
			n++
		}
	}
	return n
}

// follow runs s.Follow into a recorder until the test ends, and waits for
// Ready.
func follow(t testing.TB, s store.Store) *recorder {
	t.Helper()
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Follow(ctx, rec.fn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Follow: %v", err)
		}
	})
	select {
	case <-rec.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("Follow sent no Ready")
	}
	if b := rec.snapshot(); len(b) == 0 || !b[0].Ready {
		t.Fatalf("first batch %+v, want Ready", b)
	}
	return rec
}

// killAfter runs the tests, then ends the shared servers of the sharded
// tests (sharded_test.go) before goleak looks for goroutines left.
type killAfter struct{ m *testing.M }

func (k killAfter) Run() int {
	code := k.m.Run()
	killShared()
	return code
}
