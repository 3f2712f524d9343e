package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
)

// MemoryLimiter is the in-process chatrelay.RateLimiter (one node): a sliding log of the times of
// accepted posts per key. It is safe for concurrent use.
type MemoryLimiter struct {
	w   chatrelay.Windows
	now func() time.Time

	mu    sync.Mutex // guards logs and takes
	logs  map[string][]time.Time
	takes int
}

// NewMemoryLimiter returns a limiter for w; now defaults to time.Now.
func NewMemoryLimiter(w chatrelay.Windows, now func() time.Time) *MemoryLimiter {
	if now == nil {
		now = time.Now
	}
	return &MemoryLimiter{w: w.WithDefaults(), now: now, logs: make(map[string][]time.Time)}
}

var _ chatrelay.RateLimiter = (*MemoryLimiter)(nil)

// Take implements chatrelay.RateLimiter.
func (l *MemoryLimiter) Take(_ context.Context, thread, ip string) (func(), error) {
	now := l.now()
	tk, ik := "t:"+thread, "i:"+ip
	l.mu.Lock()
	defer l.mu.Unlock()
	l.takes++
	if l.takes%1024 == 0 {
		l.prune(now)
	}
	wait := max(l.wait(tk, l.w.PerThread, now), l.wait(ik, l.w.PerIP, now))
	if wait > 0 {
		return nil, &chatrelay.Error{Code: chatrelay.RateLimited, Retry: wait,
			Message: fmt.Sprintf("rate limit: at most %d posts per thread and %d per client address every %s", l.w.PerThread, l.w.PerIP, l.w.Window)}
	}
	l.logs[tk] = append(l.logs[tk], now)
	l.logs[ik] = append(l.logs[ik], now)
	return func() { l.undo(now, tk, ik) }, nil
}

// wait trims key's log to the window and returns how long until it has room
// for one more post (0 if it has room now).
func (l *MemoryLimiter) wait(key string, limit int, now time.Time) time.Duration {
	log := l.logs[key]
	from := now.Add(-l.w.Window)
	i := 0
	for i < len(log) && !log[i].After(from) {
		i++
	}
	log = log[i:]
	if len(log) == 0 {
		delete(l.logs, key)
		return 0
	}
	l.logs[key] = log
	if len(log) < limit {
		return 0
	}
	return log[len(log)-limit].Add(l.w.Window).Sub(now)
}

func (l *MemoryLimiter) undo(at time.Time, keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		log := l.logs[k]
		for i := len(log) - 1; i >= 0; i-- {
			if log[i].Equal(at) {
				l.logs[k] = append(log[:i:i], log[i+1:]...)
				break
			}
		}
	}
}

// prune drops the logs of keys with no post in the window.
func (l *MemoryLimiter) prune(now time.Time) {
	from := now.Add(-l.w.Window)
	for k, log := range l.logs {
		if len(log) == 0 || !log[len(log)-1].After(from) {
			delete(l.logs, k)
		}
	}
}
