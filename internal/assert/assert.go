// Package assert is the tests' handful of checks: each reports the caller's
// line and stops the test.
package assert

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
)

// Equal fails the test unless got and want are deeply equal.
func Equal[T any](tb testing.TB, name string, got, want T) {
	tb.Helper()
	if !reflect.DeepEqual(got, want) {
		tb.Fatalf("%s:\n got: %#v\nwant: %#v", name, got, want)
	}
}

// Success fails the test if err is not nil.
func Success(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("unexpected error: %v", err)
	}
}

// True fails the test with msg unless cond holds.
func True(tb testing.TB, cond bool, format string, args ...any) {
	tb.Helper()
	if !cond {
		tb.Fatalf(format, args...)
	}
}

// Code fails the test unless err carries the domain code want.
func Code(tb testing.TB, err error, want chatrelay.Code) {
	tb.Helper()
	if got := chatrelay.CodeOf(err); got != want {
		tb.Fatalf("error code = %q, want %q (err: %v)", got, want, err)
	}
}

// ErrorIs fails the test unless errors.Is(err, target).
func ErrorIs(tb testing.TB, err, target error) {
	tb.Helper()
	if !errors.Is(err, target) {
		tb.Fatalf("error = %v, want %v", err, target)
	}
}

// Eventually polls cond every few milliseconds until it holds, and fails
// the test if it does not within the given time: the wait for a condition
// that another goroutine or process brings about.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval of a condition with a deadline
	}
}

// Deadliner is a test that knows its deadline: a *testing.T.
type Deadliner interface {
	testing.TB
	Deadline() (time.Time, bool)
}

// deadlineMargin is how long before the test binary's deadline (go test
// -timeout) Receive gives up, so that its failure, not the binary's
// panic, says what was waited for.
const deadlineMargin = 10 * time.Second

// Receive waits for a value on c and returns it, or fails the test once
// the test's deadline is near: the wait for what another goroutine
// brings about, which has no bound of its own (a call that hangs is the
// failure) but the test's. With no deadline (-timeout 0) it waits for good.
func Receive[T any](t Deadliner, c <-chan T, what string) T {
	t.Helper()
	var near <-chan time.Time
	if d, ok := t.Deadline(); ok {
		timer := time.NewTimer(time.Until(d) - deadlineMargin)
		defer timer.Stop()
		near = timer.C
	}
	select {
	case v := <-c:
		return v
	case <-near:
		t.Fatalf("not before the test's deadline: %s", what)
	}
	panic("unreachable")
}
