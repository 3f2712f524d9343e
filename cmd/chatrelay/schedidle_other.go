//go:build !linux

package main

import (
	"errors"
	"syscall"
)

// schedIdle is Linux's: elsewhere the push sender runs at the server's
// priority.
func schedIdle() error { return errors.New("SCHED_IDLE is Linux's") }

// childAttr is nothing special outside Linux.
func childAttr() *syscall.SysProcAttr { return nil }
