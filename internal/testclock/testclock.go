// Package testclock is a settable clock for tests that inject a Now func
// (filestore.FileOptions.Now, redisstore.Options.Now, transport.Config.Now)
// and an AfterFunc (transport.Config.AfterFunc).
package testclock

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when told. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex // guards t and timers
	t      time.Time
	timers map[*timer]struct{}
}

type timer struct {
	c  *Clock
	at time.Time
	f  func()
}

// New returns a clock stopped at t.
func New(t time.Time) *Clock { return &Clock{t: t, timers: make(map[*timer]struct{})} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t (backwards too), running the functions of
// AfterFunc whose time has come, each in its own goroutine.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	var due []*timer
	for tm := range c.timers {
		if !tm.at.After(t) {
			due = append(due, tm)
			delete(c.timers, tm)
		}
	}
	c.mu.Unlock()
	for _, tm := range due {
		go tm.f()
	}
}

// Advance moves the clock by d (see Set).
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Stopper stops a function of AfterFunc that has not run.
type Stopper interface{ Stop() bool }

// AfterFunc runs f in its own goroutine once the clock has moved d past
// now (at once if d <= 0), as time.AfterFunc does on the real clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) Stopper {
	c.mu.Lock()
	tm := &timer{c: c, at: c.t.Add(d), f: f}
	if d <= 0 {
		c.mu.Unlock()
		go f()
		return tm
	}
	c.timers[tm] = struct{}{}
	c.mu.Unlock()
	return tm
}

// Stop implements Stopper.
func (tm *timer) Stop() bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	_, ok := tm.c.timers[tm]
	delete(tm.c.timers, tm)
	return ok
}
