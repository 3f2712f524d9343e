package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// The limiters are what the transport asks for.
var (
	_ transport.RateLimiter   = (*RateLimiter)(nil)
	_ transport.StreamLimiter = (*StreamLimiter)(nil)
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// go-redis logs every failed reconnection to stderr; the tests provoke many.
	redis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m) // every Follow, renewal and server goroutine ends by Close and cleanup
}

// redisServer is a private redis-server on a loopback port, in a folder of
// its own, killed when the test ends.
type redisServer struct {
	t       testing.TB
	bin     string
	dir     string
	port    int
	persist bool // appendonly yes: data survives a kill and restart

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startRedis starts a redis-server for the test. It fails the test (never
// skips it) if redis-server is not installed.
func startRedis(t testing.TB, persist bool) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (%v): these tests run a real Redis; on Debian, apt-get install redis-server (.ci/test installs what .ci/packages lists)", err)
	}
	r := &redisServer{t: t, bin: bin, dir: t.TempDir(), persist: persist}
	r.start(true)
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) URL() string  { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }
func (r *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// start runs redis-server and waits until it answers PING. With newPort it
// picks a free port first (retrying if another process takes it); without,
// it reuses the port (a restart).
func (r *redisServer) start(newPort bool) {
	r.t.Helper()
	var last error
	for range 5 {
		if newPort {
			r.port = freePort(r.t)
		}
		aof := "no"
		if r.persist {
			aof = "yes"
		}
		cmd := exec.Command(r.bin,
			"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
			"--save", "", "--appendonly", aof, "--daemonize", "no",
			"--logfile", filepath.Join(r.dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			r.t.Fatalf("start redis-server: %v", err)
		}
		done := make(chan struct{})
		go func() { // owned by this server: ends when the process does
			cmd.Wait()
			close(done)
		}()
		if last = waitPing(r.addr(), done, 10*time.Second); last == nil {
			r.cmd, r.done = cmd, done
			return
		}
		cmd.Process.Kill()
		<-done
	}
	logs, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	r.t.Fatalf("redis-server did not answer PING: %v\n%s", last, logs)
}

// kill ends the server at once (SIGKILL, as a crash) and waits for it.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
	r.cmd = nil
}

// restart kills the server and starts it again on the same port and folder.
func (r *redisServer) restart() {
	r.t.Helper()
	r.kill()
	r.start(false)
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitPing polls addr with PING until it answers +PONG, the process exits,
// or the deadline passes.
func waitPing(addr string, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		if err = ping(addr); err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return err
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// openStore opens a Store on r, closed when the test ends.
func openStore(t testing.TB, r *redisServer, opt Options) *Store {
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

// testLogger logs through t.Logf.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// clock is a settable clock shared by stores in a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func wantCode(t testing.TB, err error, code hub.Code) *hub.Error {
	t.Helper()
	if got := hub.CodeOf(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
	var he *hub.Error
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

// eventually polls cond until it is true or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval of a condition with a deadline
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
func follow(t testing.TB, s *Store) *recorder {
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
