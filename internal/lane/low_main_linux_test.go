package lane

import (
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// onMain runs functions on the process's main thread: TestMain's
// goroutine, which init locks to it.
var onMain = make(chan func())

func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	done := make(chan int)
	go func() { done <- m.Run() }()
	for {
		select {
		case f := <-onMain:
			f()
		case code := <-done:
			os.Exit(code)
		}
	}
}

// niceOf is the nice value of the thread tid (getpriority(2) on a thread
// id answers 20 less the nice value).
func niceOf(t *testing.T, tid int) int {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	assert.Success(t, err)
	return 20 - p
}

// TestLowNeverTakesTheMainThread: a low thread's goroutine that starts on
// the process's main thread (the runtime runs goroutines there too) runs
// its work on another thread, at nice 19, and leaves the main thread's
// priority as it was. Go never ends the main thread (it parks it for good
// when the goroutine locked to it ends): lowered, it stayed at nice 19 for
// the process's life, and ps and top showed the whole server at nice 19.
func TestLowNeverTakesTheMainThread(t *testing.T) {
	pid := syscall.Getpid()
	before := niceOf(t, pid)
	l := New(1)
	var nice, tid int
	j := &job{fn: func() { tid = syscall.Gettid(); nice = niceOf(t, tid) }, done: make(chan any, 1)}
	l.lows.Add(1)
	ended := make(chan struct{})
	onMain <- func() {
		defer close(ended)
		l.low(j, nil) // as Run's goroutine does, had it started on the main thread
	}
	assert.Equal(t, "the work's panic", <-j.done, any(nil))
	assert.Equal(t, "the work's thread's nice value", nice, lowPriority)
	assert.True(t, tid != pid, "the work ran on the main thread")
	<-ended
	assert.Equal(t, "the main thread's nice value", niceOf(t, pid), before)
}
