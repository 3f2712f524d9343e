package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/transport"
)

// "chatrelay push send" is a node of the store that only sends its Web
// Push: it follows the store's feed and sends each change's pushes as a
// server's pusher does, claiming each change in the store (ClaimPush: a
// lease, journaled until settled), so that it shares the work with the
// servers and the other senders, and nothing it claimed and did not send
// is lost when it stops or is killed (the claim lapses, and the next
// sender or server sends it). It serves no HTTP. "serve
// --push-sender=process" runs one as its child, in Linux's SCHED_IDLE
// class, and sends none itself: a push's encryption and writing (about
// 300 µs a push) then run only on a core no server thread wants, and the
// kernel takes it back the moment one wakes. Measured, that ends the
// server's goroutines' wait behind pushes, yet on a quiet 2-vCPU machine
// not the posts' longer tail (docs/performance.md).

// pushSend runs "chatrelay push send" until ctx is done.
func pushSend(ctx context.Context, e cmdEnv, sf *storeFlags, pf *pushFlags, ops *opsFlags, logLevel string) error {
	level, err := parseLevel(logLevel)
	if err != nil {
		return err
	}
	if err := ops.check(); err != nil {
		return err
	}
	pc, err := pf.config()
	if err != nil {
		return err
	}
	log := ops.logger(e.stderr, level)
	child := e.getenv(pushChildEnv) == "1"
	if child {
		// serve's child stops when serve closes its standard input
		// (after serve's drain, or serve's end, whatever ended it), not
		// on the signal a terminal's Ctrl-C or a service manager sends
		// to every process of serve's group or unit at once: stopping
		// then, it would leave the posts serve still takes while it
		// drains unpushed.
		signal.Ignore(os.Interrupt, syscall.SIGTERM)
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		go func() { // ends with the process, at the latest
			io.Copy(io.Discard, e.stdin)
			cancel()
		}()
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if dir, ok := sf.folder(); ok {
		release, err := filestore.LockPushSender(dir, "chatrelay push send")
		if err != nil {
			return err
		}
		defer release()
	}
	if err := startPush(ctx, pc, st.Store, log); err != nil {
		return err
	}
	srv := transport.NewServer(transport.Config{Store: st.Store, Push: pc, Log: log})
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }() // until ctx is done: then its pusher hands over what it did not send
	select {
	case <-srv.Ready(): // the feed is live: every change from here on is pushed
		log.Info("push sender running", "store", st.Where, "pid", os.Getpid())
		if child {
			fmt.Fprintln(e.stdout, pushChildReady) // serve serves from here on
		}
		err = <-done
	case err = <-done:
	}
	if ctx.Err() != nil {
		log.Info("push sender stopped")
		return nil
	}
	return fmt.Errorf("change feed: %w", err)
}

// pushChildEnv, set to 1 in a push sender's environment, says it is
// serve's child (--push-sender=process): it stops when its standard input
// ends, and writes pushChildReady to its standard output once its feed
// is live.
const (
	pushChildEnv   = "CHATRELAY_PUSH_CHILD"
	pushChildReady = "push sender ready"
)

// pushSenderReadyWait bounds serve's wait at its start for its first
// child's feed to be live, before it serves: a post stored before then
// would not be pushed. A child slower than that (a machine whose cores are
// all busy, which a SCHED_IDLE child waits for) is warned of, and serve
// serves all the same.
const pushSenderReadyWait = 30 * time.Second

// The push sender child's restarts: the wait before the first is
// pushSenderBackoffMin, doubled at each exit up to pushSenderBackoffMax,
// and back to the least once a child ran pushSenderSteady.
const (
	pushSenderBackoffMin = time.Second
	pushSenderBackoffMax = time.Minute
	pushSenderSteady     = time.Minute
)

// pushSenderStop is how long a child told to stop (its standard input
// closed) has to hand
// over what it did not send (its pusher's reads and write, 7 s at most)
// before it is killed: what it claimed and did not settle then lapses
// and is sent by the next sender.
const pushSenderStop = 10 * time.Second

// pushChild runs "chatrelay push send" as serve's child
// (--push-sender=process), in SCHED_IDLE, restarting it when it exits.
type pushChild struct {
	exe    string   // this program
	env    []string // the child's environment: the server's store and push flags
	stderr io.Writer
	log    *slog.Logger

	ready     chan struct{} // closed once a child's feed is live
	settled   chan struct{} // closed once a child's feed is live or the first child has exited: serve waits for it
	markReady func()        // closes ready, once
	settle    func()        // closes settled, once
}

// newPushChild is the child of serve's flags f: the same store, the
// same push flags and the same logs, passed in its environment (a Redis
// URL may hold a password: not on a command line others can read), and
// none of the server's other CHATRELAY_ variables (a host command
// refuses a store setting that contradicts the folder's).
func newPushChild(f *serveFlags, stderr io.Writer, log *slog.Logger) (*pushChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--push-sender=process: this program's path: %w", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHATRELAY_") {
			env = append(env, kv)
		}
	}
	set := func(flag, v string) { env = append(env, envName(flag)+"="+v) }
	if f.store.store != "" {
		set("store", f.store.store)
	} else {
		set("data", f.store.data)
	}
	set("redis-prefix", f.store.redisPrefix)
	set("fsync", f.store.fsync)
	if f.store.appendLog {
		set("append-log", "true")
	}
	set("push-contact", f.server.Push.Contact)
	if len(f.server.Push.Guard.Allow) > 0 {
		set("push-allow-host", strings.Join(f.server.Push.Guard.Allow, ","))
	}
	set("log-level", f.level.String())
	set("log-format", f.ops.logFormat)
	env = append(env, pushChildEnv+"=1")
	c := &pushChild{exe: exe, env: env, stderr: stderr, log: log, ready: make(chan struct{}), settled: make(chan struct{})}
	c.markReady = sync.OnceFunc(func() { close(c.ready) })
	c.settle = sync.OnceFunc(func() { close(c.settled) })
	return c, nil
}

// run runs the child until ctx is done, then stops it (its standard
// input closed, and SIGKILL pushSenderStop later) and returns once it has
// exited. It starts each child from a thread of its own that it has put
// in SCHED_IDLE: a child inherits its class from the thread that forked
// it, every thread of it then too, and the thread is let go of (it ends)
// when run returns. The child is in a process group of its own, and
// ignores SIGINT and SIGTERM: it stops when its standard input ends,
// which serve's end also does, however it ends.
func (c *pushChild) run(ctx context.Context) {
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
	if err := schedIdle(); err != nil {
		c.log.Warn("push sender: not in SCHED_IDLE: it runs at the server's priority", "err", err)
	}
	wait := pushSenderBackoffMin
	for {
		began := time.Now()
		err := c.once(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) >= pushSenderSteady {
			wait = pushSenderBackoffMin
		}
		c.log.Error("push sender exited; starting it again", "err", err, "in", wait.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, pushSenderBackoffMax)
	}
}

// once runs one child until it exits, or until ctx is done and it has
// stopped. Its standard error goes to serve's, a line at a time (a line
// over 64 KiB in pieces); its standard output says when its feed is live
// (ready).
func (c *pushChild) once(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, c.exe, "push", "send")
	cmd.Env = c.env
	cmd.WaitDelay = pushSenderStop
	cmd.SysProcAttr = childAttr()
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	cmd.Cancel = in.Close // the child's stop: it hands over, then exits
	out, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	said, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.log.Info("push sender started", "pid", cmd.Process.Pid)
	var wg sync.WaitGroup
	wg.Go(func() { copyLines(c.stderr, out) })
	wg.Go(func() {
		lines := bufio.NewScanner(said)
		for lines.Scan() {
			if lines.Text() == pushChildReady {
				c.markReady()
				c.settle()
			}
		}
		io.Copy(io.Discard, said)
	})
	wg.Wait() // the pipes' ends: the child exited (or closed them)
	err = cmd.Wait()
	c.settle() // a child that exited before it was ready: serve waits no longer
	return err
}

// copyLines copies r to w a line at a time, each in one Write (a line
// over 64 KiB in pieces of that size), until r ends.
func copyLines(w io.Writer, r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if err == io.EOF && line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			w.Write(line)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
