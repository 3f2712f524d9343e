package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
)

// MemoryLimiter is the in-process chatrelay.RateLimiter (one node): a sliding log of the times of
// accepted posts per thread and per client address. It is safe for concurrent use.
//
// A log holds its times as offsets from base, not as time.Time values: no
// pointer in them for the GC to scan (a log holds a window's posts: with
// raised limits, tens of thousands), and the same comparisons (Sub keeps
// the monotonic clock's reading, as After and Equal do).
//
// A log also counts its posts still in flight (taken, not yet settled): a
// post refused while one of them holds a place in its full window is told
// to retry in heldRetry, not when the window's oldest post leaves it (up
// to the whole window), since the held place comes back if the store
// refuses that post.
type MemoryLimiter struct {
	w    chatrelay.Windows
	now  func() time.Time
	base time.Time

	mu      sync.Mutex      // guards threads, ips and takes
	threads map[string]rlog // by thread
	ips     map[string]rlog // by client address: two maps, so that a post builds no key
	takes   int
}

// rlog is one key's log: the times of its posts in the window, oldest
// first, and how many of them are still in flight.
type rlog struct {
	times []time.Duration
	held  int
}

// heldRetry is the Retry-After of a post refused over a full window that
// holds a post in flight (whole seconds on the wire: the least there is).
const heldRetry = time.Second

// NewMemoryLimiter returns a limiter for w; now defaults to time.Now.
func NewMemoryLimiter(w chatrelay.Windows, now func() time.Time) *MemoryLimiter {
	if now == nil {
		now = time.Now
	}
	return &MemoryLimiter{w: w.WithDefaults(), now: now, base: now(),
		threads: make(map[string]rlog), ips: make(map[string]rlog)}
}

var _ chatrelay.RateLimiter = (*MemoryLimiter)(nil)

// Take implements chatrelay.RateLimiter.
func (l *MemoryLimiter) Take(_ context.Context, thread, ip string) (func(bool), error) {
	now := l.now().Sub(l.base)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.takes++
	if l.takes%1024 == 0 {
		l.prune(now)
	}
	wait := max(l.wait(l.threads, thread, l.w.PerThread, now), l.wait(l.ips, ip, l.w.PerIP, now))
	if wait > 0 {
		return nil, &chatrelay.Error{Code: chatrelay.RateLimited, Retry: wait,
			Message: fmt.Sprintf("rate limit: at most %d posts per thread and %d per client address every %s", l.w.PerThread, l.w.PerIP, l.w.Window)}
	}
	hold(l.threads, thread, now)
	hold(l.ips, ip, now)
	return func(stored bool) { // called once (chatrelay.RateLimiter)
		l.mu.Lock()
		defer l.mu.Unlock()
		settle(l.threads, thread, now, stored)
		settle(l.ips, ip, now, stored)
	}, nil
}

// wait trims the log of key in logs to the window and returns how long
// until it has room for one more post (0 if it has room now; heldRetry
// at most while a post of it is in flight).
func (l *MemoryLimiter) wait(logs map[string]rlog, key string, limit int, now time.Duration) time.Duration {
	lg, ok := logs[key]
	if !ok {
		return 0
	}
	from := now - l.w.Window
	i := 0
	for i < len(lg.times) && lg.times[i] <= from {
		i++
	}
	lg.times = lg.times[i:]
	if len(lg.times) == 0 && lg.held == 0 {
		delete(logs, key)
		return 0
	}
	logs[key] = lg
	if len(lg.times) < limit {
		return 0
	}
	wait := lg.times[len(lg.times)-limit] + l.w.Window - now
	if lg.held > 0 {
		wait = min(wait, heldRetry)
	}
	return wait
}

// hold logs a post of key at now, in flight.
func hold(logs map[string]rlog, key string, now time.Duration) {
	lg := logs[key]
	lg.times = append(lg.times, now)
	lg.held++
	logs[key] = lg
}

// settle ends the flight of key's post taken at at: a post not stored
// leaves the log (its newest time at).
func settle(logs map[string]rlog, key string, at time.Duration, stored bool) {
	lg, ok := logs[key]
	if !ok {
		return
	}
	lg.held--
	if !stored {
		for i := len(lg.times) - 1; i >= 0; i-- {
			if lg.times[i] == at {
				lg.times = append(lg.times[:i:i], lg.times[i+1:]...)
				break
			}
		}
	}
	logs[key] = lg
}

// prune drops the logs of keys with no post in the window and none in
// flight.
func (l *MemoryLimiter) prune(now time.Duration) {
	from := now - l.w.Window
	for _, logs := range []map[string]rlog{l.threads, l.ips} {
		for k, lg := range logs {
			if lg.held == 0 && (len(lg.times) == 0 || lg.times[len(lg.times)-1] <= from) {
				delete(logs, k)
			}
		}
	}
}
