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
type MemoryLimiter struct {
	w    chatrelay.Windows
	now  func() time.Time
	base time.Time

	mu      sync.Mutex                 // guards threads, ips and takes
	threads map[string][]time.Duration // by thread
	ips     map[string][]time.Duration // by client address: two maps, so that a post builds no key
	takes   int
}

// NewMemoryLimiter returns a limiter for w; now defaults to time.Now.
func NewMemoryLimiter(w chatrelay.Windows, now func() time.Time) *MemoryLimiter {
	if now == nil {
		now = time.Now
	}
	return &MemoryLimiter{w: w.WithDefaults(), now: now, base: now(),
		threads: make(map[string][]time.Duration), ips: make(map[string][]time.Duration)}
}

var _ chatrelay.RateLimiter = (*MemoryLimiter)(nil)

// Take implements chatrelay.RateLimiter.
func (l *MemoryLimiter) Take(_ context.Context, thread, ip string) (func(), error) {
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
	l.threads[thread] = append(l.threads[thread], now)
	l.ips[ip] = append(l.ips[ip], now)
	return func() { l.undo(now, thread, ip) }, nil
}

// wait trims the log of key in logs to the window and returns how long
// until it has room for one more post (0 if it has room now).
func (l *MemoryLimiter) wait(logs map[string][]time.Duration, key string, limit int, now time.Duration) time.Duration {
	log := logs[key]
	from := now - l.w.Window
	i := 0
	for i < len(log) && log[i] <= from {
		i++
	}
	log = log[i:]
	if len(log) == 0 {
		delete(logs, key)
		return 0
	}
	logs[key] = log
	if len(log) < limit {
		return 0
	}
	return log[len(log)-limit] + l.w.Window - now
}

func (l *MemoryLimiter) undo(at time.Duration, thread, ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	unlog(l.threads, thread, at)
	unlog(l.ips, ip, at)
}

// unlog removes the newest time at from the log of key in logs.
func unlog(logs map[string][]time.Duration, key string, at time.Duration) {
	log := logs[key]
	for i := len(log) - 1; i >= 0; i-- {
		if log[i] == at {
			logs[key] = append(log[:i:i], log[i+1:]...)
			return
		}
	}
}

// prune drops the logs of keys with no post in the window.
func (l *MemoryLimiter) prune(now time.Duration) {
	from := now - l.w.Window
	for _, logs := range []map[string][]time.Duration{l.threads, l.ips} {
		for k, log := range logs {
			if len(log) == 0 || log[len(log)-1] <= from {
				delete(logs, k)
			}
		}
	}
}
