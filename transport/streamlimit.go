package transport

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryStreams is the in-process chatrelay.StreamLimiter. It is safe for concurrent use.
type MemoryStreams struct {
	perThread, perIP int
	mu               sync.Mutex // guards counts
	counts           map[string]int
}

// NewMemoryStreams allows perThread streams per thread and perIP per client
// IP (zero: chatrelay.DefaultStreamsPerThread and DefaultStreamsPerIP).
func NewMemoryStreams(perThread, perIP int) *MemoryStreams {
	l := chatrelay.StreamLimits{PerThread: perThread, PerIP: perIP}.WithDefaults()
	return &MemoryStreams{perThread: l.PerThread, perIP: l.PerIP, counts: make(map[string]int)}
}

var _ chatrelay.StreamLimiter = (*MemoryStreams)(nil)

// Acquire implements chatrelay.StreamLimiter.
func (m *MemoryStreams) Acquire(_ context.Context, thread, ip string) (func(), error) {
	tk, ik := "t:"+thread, "i:"+ip
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts[tk] >= m.perThread || m.counts[ik] >= m.perIP {
		return nil, &chatrelay.Error{Code: chatrelay.TooManyStreams, Retry: 5 * time.Second,
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
