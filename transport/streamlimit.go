package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay/hub"
)

// StreamLimiter bounds the open streams (SSE and WebSocket) per thread and
// per client IP. A shared backend (Redis) implements it to count across
// nodes.
type StreamLimiter interface {
	// Acquire counts one open stream, or returns an *hub.Error with code
	// TooManyStreams. release must be called once when the stream ends.
	Acquire(ctx context.Context, thread, ip string) (release func(), err error)
}

// MemoryStreams is the in-process StreamLimiter. It is safe for concurrent use.
type MemoryStreams struct {
	perThread, perIP int
	mu               sync.Mutex // guards counts
	counts           map[string]int
}

// NewMemoryStreams allows perThread streams per thread (default 20) and
// perIP per client IP (default 200).
func NewMemoryStreams(perThread, perIP int) *MemoryStreams {
	if perThread <= 0 {
		perThread = 20
	}
	if perIP <= 0 {
		perIP = 200
	}
	return &MemoryStreams{perThread: perThread, perIP: perIP, counts: make(map[string]int)}
}

var _ StreamLimiter = (*MemoryStreams)(nil)

// Acquire implements StreamLimiter.
func (m *MemoryStreams) Acquire(_ context.Context, thread, ip string) (func(), error) {
	tk, ik := "t:"+thread, "i:"+ip
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts[tk] >= m.perThread || m.counts[ik] >= m.perIP {
		return nil, &hub.Error{Code: hub.TooManyStreams, Retry: 5 * time.Second,
			Message: fmt.Sprintf("too many open streams: at most %d per thread and %d per client address", m.perThread, m.perIP)}
	}
	m.counts[tk]++
	m.counts[ik]++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, k := range []string{tk, ik} {
				if m.counts[k]--; m.counts[k] <= 0 {
					delete(m.counts, k)
				}
			}
		})
	}, nil
}
