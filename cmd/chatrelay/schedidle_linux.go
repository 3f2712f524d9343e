package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// schedIdle puts the calling thread in Linux's SCHED_IDLE class: the
// kernel runs it only on a core no thread of another class wants, and
// preempts it the moment one wakes. An unprivileged thread may lower
// itself to it; the threads it makes (and the processes it forks) are in
// it too.
func schedIdle() error {
	return unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
}

// childAttr is the push sender child's: SIGTERM when the thread that
// started it ends (serve crashed), so that it hands over and exits.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
