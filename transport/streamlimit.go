package transport

import (
	"context"
	"sync"

	"github.com/chatrelay/chatrelay"
)

// MemoryStreams is the in-process chatrelay.StreamLimiter. It is safe for concurrent use.
type MemoryStreams struct {
	lim    chatrelay.StreamLimits
	mu     sync.Mutex // guards counts
	counts map[string]int
}

// NewMemoryStreams allows perThread streams per thread, of which the
// thread's participants may hold chatrelay.StreamLimits.Participants, and
// perIP per client IP (zero: chatrelay.DefaultStreamsPerThread and
// DefaultStreamsPerIP).
func NewMemoryStreams(perThread, perIP int) *MemoryStreams {
	l := chatrelay.StreamLimits{PerThread: perThread, PerIP: perIP}.WithDefaults()
	return &MemoryStreams{lim: l, counts: make(map[string]int)}
}

var _ chatrelay.StreamLimiter = (*MemoryStreams)(nil)

// Acquire implements chatrelay.StreamLimiter.
func (m *MemoryStreams) Acquire(_ context.Context, thread, ip string, holder chatrelay.StreamHolder) (func(), error) {
	keys := []string{"t:" + thread, "i:" + ip}
	limits := []int{m.lim.PerThread, m.lim.PerIP}
	if holder == chatrelay.ParticipantStream {
		keys, limits = append(keys, "p:"+thread), append(limits, m.lim.Participants())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range keys {
		if m.counts[k] >= limits[i] {
			return nil, m.lim.Refusal()
		}
	}
	for _, k := range keys {
		m.counts[k]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, k := range keys {
				if m.counts[k]--; m.counts[k] <= 0 {
					delete(m.counts, k)
				}
			}
		})
	}, nil
}
