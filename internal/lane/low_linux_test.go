package lane_test

import (
	"runtime"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/lane"
)

// threadNice is the calling OS thread's nice value (getpriority(2) on a
// thread id answers 20 less the nice value).
func threadNice(t *testing.T) int {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	assert.Success(t, err)
	return 20 - p
}

// TestRunOnALowThread: Run's work runs on a thread at nice 19, never on
// its caller's, whose priority stays as it was, and a thread made while
// a low thread runs is not low.
func TestRunOnALowThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, tid := threadNice(t), syscall.Gettid()
	l := lane.New(1)
	var nice, workTid int
	l.Run(func() { nice, workTid = threadNice(t), syscall.Gettid() })
	assert.Equal(t, "the work's thread's nice value", nice, 19)
	assert.True(t, workTid != tid, "the work ran on its caller's thread")
	assert.Equal(t, "the caller's nice value", threadNice(t), before)
	// Threads the runtime starts from a low thread (its work starts
	// goroutines, each locked to a thread of its own, so that the runtime
	// makes threads): the runtime makes them from a clean template
	// thread, never by cloning the low one, so none is low.
	var nices []int
	l.Run(func() {
		for range 8 {
			got := make(chan int)
			go func() {
				runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
				got <- threadNice(t)
			}()
			nices = append(nices, <-got)
		}
	})
	for _, n := range nices {
		assert.Equal(t, "a thread started from a low thread: its nice value", n, before)
	}
}
