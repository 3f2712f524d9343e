// Package testproc runs the test binary again, as a helper process that
// stands in for a program on a machine of its own (a push service, the
// people uploading files): its CPU is not the process under test's, and
// it runs at a low CPU priority, so that on a small machine it takes the
// CPU the process under test leaves rather than that process's.
//
// The helper is one test function of the binary, which does its job only
// when an environment variable the caller names is set (and skips
// otherwise), reads nothing but its standard input's end (its signal to
// stop), and reports on its standard output.
package testproc

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Proc is a running helper process.
type Proc struct {
	// Stdout is the helper's standard output; the caller reads it to its
	// end (the helper's exit), or Stop cannot return before its timeout.
	Stdout io.Reader
	stdin  io.WriteCloser
	cmd    *exec.Cmd
	done   chan error
}

// Idle, as Start's niceness, runs the helper in Linux's SCHED_IDLE
// class (chrt --idle), at nice 19 as well: the kernel gives it a core
// only when no thread of another class wants one, and takes the core
// back at once when one wakes. A nice-19 thread is weighed against the
// others (1.5 % of a nice-0 thread's share, 14 % of a nice-10 one's: the
// machine's rule runs the benchmarks at nice 10) and, once the kernel
// picks it, may keep the core for its slice while a thread of the
// process under test that just woke waits: on one machine it stands in
// for a machine of its own less well. Without chrt, nice 19 alone.
const Idle = 20

// Start runs the test function test of this binary with env added to
// this process's environment, at niceness nice (or Idle), its standard
// error this process's. It fails tb if the process cannot start.
func Start(tb testing.TB, test string, env []string, nice int) *Proc {
	tb.Helper()
	args := []string{os.Args[0], "-test.run=^" + test + "$", "-test.count=1"}
	idle := nice == Idle
	if idle {
		nice = 19
	}
	// nice(1) sets the niceness before the binary runs, so every thread of
	// it has it: a Go program makes its threads from its first ones, and
	// Linux's niceness is a thread's (setpriority on the pid, once the
	// helper ran, left the runtime's first threads, and those they made, at
	// 0, and the helper's work ran on them at the priority of the process
	// under test as often as not).
	nicer, err := exec.LookPath("nice")
	if err == nil {
		args = append([]string{nicer, "-n", strconv.Itoa(nice)}, args...)
	}
	if chrt, err := exec.LookPath("chrt"); err == nil && idle {
		args = append([]string{chrt, "--idle", "0"}, args...) // every thread, as nice(1)'s niceness
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	if nicer == "" { // no nice(1): the main thread's at least
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, nice); err != nil {
			tb.Logf("%s process: nice %d: %v", test, nice, err)
		}
	}
	p := &Proc{Stdout: stdout, stdin: stdin, cmd: cmd, done: make(chan error, 1)}
	return p
}

// Write writes b to the helper's standard input (a helper that takes
// its work there reads it).
func (p *Proc) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Stop closes the helper's standard input (its signal to exit) and waits
// for it, up to timeout; past it, the helper is killed. It returns the
// helper's exit error (a kill's included). Its output must be read to
// the end meanwhile (exec: Wait closes the pipe once the process exits).
func (p *Proc) Stop(timeout time.Duration) error {
	p.stdin.Close()
	go func() { p.done <- p.cmd.Wait() }()
	select {
	case err := <-p.done:
		return err
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		return <-p.done
	}
}

// Kill kills the helper with SIGKILL, as a crash or the OOM killer would:
// it runs no more code of its own (no deferred call, no shutdown), and
// what it wrote to files stays in the page cache. It waits for the exit.
func (p *Proc) Kill() {
	p.cmd.Process.Kill()
	p.stdin.Close()
	go func() { p.done <- p.cmd.Wait() }()
	<-p.done
}

// Nice is the niceness in the environment variable name, or def if it is
// unset or not a number ("idle" is Idle).
func Nice(name string, def int) int {
	if os.Getenv(name) == "idle" {
		return Idle
	}
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
