package lane

import "syscall"

// lowPriority is the nice value of the lane's low threads: the lowest
// priority of Linux's normal scheduling class. Lowering a thread's
// priority needs no privilege (raising it back would: a low thread is
// never given back to the runtime).
const lowPriority = 19

// lowerPriority sets the calling OS thread's nice value to lowPriority:
// on Linux, setpriority(2) on a thread id applies to that thread alone.
// A failure (a sandbox that forbids the call) leaves the thread at its
// priority: the work runs all the same.
func lowerPriority() {
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), lowPriority)
}

// mainThread reports whether the calling goroutine runs on the process's
// main thread (its thread id is the process id).
func mainThread() bool { return syscall.Gettid() == syscall.Getpid() }
