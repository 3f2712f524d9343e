package chatrelay

import (
	"context"
	"time"
)

// RateLimiter counts accepted posts in sliding windows, per thread and per
// client address. Every implementation is safe for concurrent use; a
// shared backend (Redis) counts across nodes.
type RateLimiter interface {
	// Take counts one post against thread and ip if both are under their
	// windows. It returns an *Error with code RateLimited and the wait
	// otherwise (StoreUnavailable if a shared backend cannot be reached).
	// Call undo if the post was then not stored, so that only accepted
	// posts count.
	Take(ctx context.Context, thread, ip string) (undo func(), err error)
}

// StreamLimiter bounds the open streams (SSE and WebSocket) per thread and
// per client address. Every implementation is safe for concurrent use.
type StreamLimiter interface {
	// Acquire counts one open stream, or returns an *Error with code
	// TooManyStreams. release must be called once when the stream ends.
	Acquire(ctx context.Context, thread, ip string) (release func(), err error)
}

// Windows are the rate windows: at most PerThread posts per thread and
// PerIP posts per client address in any Window.
type Windows struct {
	PerThread int           // defaults to DefaultRatePerThread
	PerIP     int           // defaults to DefaultRatePerIP
	Window    time.Duration // defaults to DefaultRateWindow
}

// WithDefaults fills the zero fields of w.
func (w Windows) WithDefaults() Windows {
	if w.PerThread <= 0 {
		w.PerThread = DefaultRatePerThread
	}
	if w.PerIP <= 0 {
		w.PerIP = DefaultRatePerIP
	}
	if w.Window <= 0 {
		w.Window = DefaultRateWindow
	}
	return w
}

// StreamLimits are the open-stream limits.
type StreamLimits struct {
	PerThread int // defaults to DefaultStreamsPerThread
	PerIP     int // defaults to DefaultStreamsPerIP
}

// WithDefaults fills the zero fields of l.
func (l StreamLimits) WithDefaults() StreamLimits {
	if l.PerThread <= 0 {
		l.PerThread = DefaultStreamsPerThread
	}
	if l.PerIP <= 0 {
		l.PerIP = DefaultStreamsPerIP
	}
	return l
}
