package assert

import (
	"testing"
	"time"
)

// fakeT is a test whose deadline is set, and whose Fatalf is recorded.
type fakeT struct {
	testing.TB
	deadline time.Time
	failed   string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Deadline() (time.Time, bool)       { return f.deadline, true }
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = format; panic(f) }

// TestReceive: a value sent is received; with nothing sent, the wait
// fails once the test's deadline is near (here, past), not later.
func TestReceive(t *testing.T) {
	c := make(chan int, 1)
	c <- 7
	Equal(t, "received", Receive(t, c, "a value sent"), 7)

	f := &fakeT{deadline: time.Now().Add(deadlineMargin / 2)}
	func() {
		defer func() {
			if r := recover(); r != f {
				panic(r)
			}
		}()
		Receive(f, make(chan int), "nothing sent")
	}()
	True(t, f.failed != "", "a wait past the test's deadline did not fail")
}
