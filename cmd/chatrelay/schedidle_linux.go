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

// childAttr is the push sender child's: a process group of its own, so
// that a terminal's Ctrl-C (SIGINT to the foreground group) reaches serve
// alone, which stops the child after its drain (pushChild.run).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
