// Package redistest runs private redis-server processes for tests, on free
// loopback ports in throwaway folders. Tests that need Redis fail, never
// skip, when redis-server is not installed.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Server is a private redis-server on a free loopback port, in a
// throwaway folder of its own. Its methods are safe for concurrent use.
type Server struct {
	bin     string
	dir     string
	persist bool
	extra   []string // more arguments (a cluster node's)
	busPort int      // a cluster node's bus port, chosen with its port

	mu   sync.Mutex // guards port, cmd and done
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// ServerOptions configures a private server.
type ServerOptions struct {
	// Persist turns on the append-only file with appendfsync always, so
	// that every write Redis acknowledged survives Kill and Restart.
	Persist bool
}

// StartServer starts a redis-server of the test's own, killed at the end
// of the test. It fails the test (never skips it) if redis-server is not
// installed.
func StartServer(t testing.TB, opt ServerOptions) *Server {
	t.Helper()
	s, err := Start(t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Start starts a server in dir that the caller must Kill (StartServer ties
// it to a test instead).
func Start(dir string, opt ServerOptions) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (%v): the tests of the Redis backend run a real Redis, never skipped; "+
			"on Debian: apt-get install redis-server (.ci/test installs what .ci/packages lists)", err)
	}
	s := &Server{bin: bin, dir: dir, persist: opt.Persist}
	if err := s.start(true); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the server's redis:// URL (database 0).
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Addr is the server's host:port on loopback.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Kill ends the server at once with SIGKILL, as a crash would, and waits
// for the process to be gone. Killing a server that is not running does
// nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Restart starts the server again on the same port and folder (after
// Kill), and waits until it answers PING. With Persist, it has loaded its
// data by then.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(false); err != nil {
		t.Fatal(err)
	}
}

// Pause stalls the server for d, as a Redis busy with a slow command or a
// slow disk would look: it accepts connections and reads commands, and
// answers none (CLIENT PAUSE … ALL) until d has passed. It returns once
// the pause is in force.
func (s *Server) Pause(t testing.TB, d time.Duration) {
	t.Helper()
	c := s.Client(t)
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("redistest: CLIENT PAUSE: %v", err)
	}
}

// start runs redis-server and waits until it answers PING. With newPort it
// picks a free port first, and tries again with another if someone took
// it meanwhile; without, it reuses the port (a restart).
func (s *Server) start(newPort bool) error {
	var last error
	for range 5 {
		if newPort {
			port, err := freePort()
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.port = port
			s.mu.Unlock()
			if s.extra != nil {
				if s.busPort, err = freePort(); err != nil {
					return err
				}
			}
		}
		args := []string{
			"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
			"--save", "", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"),
		}
		if s.persist {
			args = append(args, "--appendonly", "yes", "--appendfsync", "always")
		} else {
			args = append(args, "--appendonly", "no")
		}
		if s.extra != nil {
			args = append(append(args, s.extra...), "--cluster-port", strconv.Itoa(s.busPort))
		}
		cmd := exec.Command(s.bin, args...)
		// If the test binary dies without cleaning up (a panic, a timeout),
		// the kernel kills the server with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		started := make(chan error, 1)
		done := make(chan struct{})
		// The parent-death signal is tied to the thread that forked the
		// server, and Go ends a thread when a goroutine locked to it exits.
		// So the server is started by a goroutine that stays locked to its
		// thread until the server has exited: no other goroutine can end
		// that thread early.
		go func() {
			runtime.LockOSThread()
			if err := cmd.Start(); err != nil {
				started <- err
				close(done)
				return
			}
			started <- nil
			cmd.Wait()
			close(done)
		}()
		if err := <-started; err != nil {
			return fmt.Errorf("start redis-server: %w", err)
		}
		if last = waitPing(s.Addr(), done, 10*time.Second); last == nil {
			s.mu.Lock()
			s.cmd, s.done = cmd, done
			s.mu.Unlock()
			return nil
		}
		cmd.Process.Kill()
		<-done
		if !newPort {
			break
		}
	}
	logs, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return fmt.Errorf("redis-server on %s did not answer PING: %v\n%s", s.Addr(), last, logs)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitPing polls addr with PING until it answers +PONG (not -LOADING), the
// process exits, or the deadline passes.
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
		case <-time.After(10 * time.Millisecond): // the poll interval of a condition with a deadline
		}
	}
	return err
}

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer c.Close()
	return c.Ping(context.Background()).Err()
}

// Client returns a plain Redis client on s, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1,
		// Redis before 8 does not know the maintenance notifications handshake.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { c.Close() })
	return c
}

// StartReplica starts a server of the test's own that replicates s
// (REPLICAOF), and waits until its first sync is done (its link to s is
// up, and s counts it online at its offset), so that it holds every write
// s took before and WAIT counts it. s is set to sync a new
// replica at once (repl-diskless-sync-delay 0).
func (s *Server) StartReplica(t testing.TB) *Server {
	t.Helper()
	r, err := s.StartReplicaIn(t.TempDir())
	if r != nil {
		t.Cleanup(r.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// StartReplicaIn is StartReplica in dir, for a replica the caller must
// Kill (even when it returns an error with a server).
func (s *Server) StartReplicaIn(dir string) (*Server, error) {
	ctx := context.Background()
	pc := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer pc.Close()
	if err := pc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return nil, fmt.Errorf("redistest: CONFIG SET on the primary: %w", err)
	}
	r, err := Start(dir, ServerOptions{})
	if err != nil {
		return nil, err
	}
	rc := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer rc.Close()
	host, port, _ := net.SplitHostPort(s.Addr())
	if err := rc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		return r, fmt.Errorf("redistest: REPLICAOF: %w", err)
	}
	// Up on the replica's side, online at the primary's offset on the
	// primary's, and acknowledging writes (waitAck).
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			var pinfo string
			if pinfo, err = pc.Info(ctx, "replication").Result(); err == nil && strings.Contains(pinfo, "state=online") && replicasCaughtUp(pinfo) {
				return r, waitAck(ctx, pc, func(ctx context.Context, c *redis.Conn) error {
					if err := c.Set(ctx, "redistest:ack", "1", 0).Err(); err != nil {
						return err
					}
					return c.Del(ctx, "redistest:ack").Err() // replicated, and no key left
				})
			}
			info += pinfo
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("redistest: the replica of %s did not sync within 10s: %v\n%s", s.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval of a condition with a deadline
	}
}

// waitAck waits until the replicas of c's server acknowledge a write
// (write, on one connection), as WAIT counts them: a replica is online
// after a diskless sync before the primary streams it any command, which
// it does once the replica has acknowledged (once a second).
func waitAck(ctx context.Context, c *redis.Client, write func(context.Context, *redis.Conn) error) error {
	conn := c.Conn()
	defer conn.Close()
	if err := write(ctx, conn); err != nil {
		return fmt.Errorf("redistest: a write to wait for: %w", err)
	}
	n, err := conn.Wait(ctx, 1, 10*time.Second).Result()
	if err != nil || n < 1 {
		return fmt.Errorf("redistest: no replica acknowledged a write within 10s: %d %v", n, err)
	}
	return nil
}

// Stop stops the server with SIGSTOP, as a frozen VM or a partition
// would: it keeps its connections and answers nothing until Cont (or the
// end of the test, which continues it).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		t.Fatal("redistest: Stop of a server that is not running")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: SIGSTOP: %v", err)
	}
	t.Cleanup(s.Cont)
}

// Cont continues a server that Stop stopped.
func (s *Server) Cont() {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGCONT)
	}
}
