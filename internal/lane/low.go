package lane

import (
	"runtime"
	"time"
)

// lowIdle is how long a low thread waits for more work before it ends
// (and its OS thread with it).
const lowIdle = 250 * time.Millisecond

// job is a piece of work for a low thread: fn, and where its end is said
// (the panic it raised, if any).
type job struct {
	fn   func()
	done chan any
}

// Run runs fn on one of the lane's low threads and returns when fn has:
// a goroutine locked to an OS thread of its own whose CPU priority is the
// lowest the system gives (see lowerPriority), so that the kernel runs it
// only on what the server's other threads (its requests) and the
// machine's other work leave of the cores. A panic in fn is raised again
// in Run's caller.
//
// Run does not take a turn: a caller holds one (Enter, EnterFor) around
// the work it runs, so that the lane's bound on Ps holds too. A thread
// that finds no work for lowIdle ends; Run starts one when none waits,
// so the lane keeps as many as pieces run at once, no more.
//
// A low thread blocks as any goroutine does (a write to a disk or to a
// peer parks it); it holds no lock of its caller's beyond what fn takes.
func (l *Lane) Run(fn func()) {
	j := &job{fn: fn, done: make(chan any, 1)}
	select {
	case l.work <- j: // a low thread waiting for work took it
	default:
		l.lows.Add(1)
		go l.low(j, nil)
	}
	if p := <-j.done; p != nil {
		panic(p)
	}
}

// Lows is how many low threads run now (working or waiting for work).
func (l *Lane) Lows() int { return int(l.lows.Load()) }

// low is a low thread: it runs j, then each job sent on l.work, and ends
// once none came for lowIdle. Its goroutine never unlocks its OS thread,
// so that the thread, its priority lowered, ends with it rather than go
// back to the runtime to run other goroutines. It closes moved, if
// given, once it holds its thread.
//
// The process's main thread is never lowered: Go never ends it (it parks
// it for good when the goroutine locked to it ends), so it would stay at
// nice 19 for the process's life, and ps and top, which show a process's
// nice value as its main thread's, would show the whole server at 19. A
// low goroutine that starts there holds it while another takes the job
// (that one cannot start on the main thread meanwhile), then gives it back
// to the runtime, its priority untouched.
func (l *Lane) low(j *job, moved chan<- struct{}) {
	runtime.LockOSThread()
	if mainThread() {
		next := make(chan struct{})
		go l.low(j, next)
		<-next
		runtime.UnlockOSThread()
		return
	}
	if moved != nil {
		close(moved)
	}
	defer l.lows.Add(-1)
	lowerPriority()
	idle := time.NewTimer(lowIdle)
	defer idle.Stop()
	for {
		j.done <- run(j.fn)
		idle.Reset(lowIdle)
		select {
		case j = <-l.work:
		case <-idle.C:
			return
		}
	}
}

// run calls fn and returns the value it panicked with, or nil.
func run(fn func()) (p any) {
	defer func() { p = recover() }()
	fn()
	return nil
}
