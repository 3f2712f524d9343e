package chatrelay

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// RateLimiter counts accepted posts in sliding windows, per thread and per
// client address. Every implementation is safe for concurrent use; a
// shared backend (Redis) counts across nodes.
type RateLimiter interface {
	// Take counts one post against thread and ip if both are under their
	// windows. It returns an *Error with code RateLimited and the wait
	// otherwise (StoreUnavailable if a shared backend cannot be reached).
	// Call settle once with the post's outcome: stored false gives its
	// place back, so that only accepted posts count. Until then the place
	// is held: a take refused meanwhile may be told to retry sooner than
	// the window's oldest post leaves it, as the held place may come back.
	Take(ctx context.Context, thread, ip string) (settle func(stored bool), err error)
}

// StreamLimiter bounds the open streams (SSE and WebSocket) per thread and
// per client address, and the participants' share of a thread's streams
// (StreamLimits). Every implementation is safe for concurrent use.
type StreamLimiter interface {
	// Acquire counts one open stream of thread from ip, held by a
	// participant (a share token, or a ticket minted from one) or by the
	// owner, or returns an *Error with code TooManyStreams (StreamLimits.
	// Refusal). release must be called once when the stream ends.
	Acquire(ctx context.Context, thread, ip string, holder StreamHolder) (release func(), err error)
}

// StreamHolder says who holds a stream: its thread's owner (the token, or
// a ticket minted with it), or a participant.
type StreamHolder uint8

// The stream holders.
const (
	OwnerStream StreamHolder = iota
	ParticipantStream
)

// Windows are the rate windows: at most PerThread posts per thread and
// PerIP posts per client address in any Window.
type Windows struct {
	PerThread int           // defaults to DefaultRatePerThread
	PerIP     int           // defaults to DefaultRatePerIP
	Window    time.Duration // defaults to DefaultRateWindow
}

// WithDefaults fills the zero fields of w.
func (w Windows) WithDefaults() Windows {
	orDefault(&w.PerThread, DefaultRatePerThread)
	orDefault(&w.PerIP, DefaultRatePerIP)
	orDefault(&w.Window, DefaultRateWindow)
	return w
}

// StreamLimits are the open-stream limits. A thread's PerThread streams
// are shared by its owner and its participants, but the participants (all
// the thread's grants together) hold at most Participants() of them: the
// rest, a quarter rounded up, is kept for the owner, so that a viewer's
// streams never lock the owner out of live push.
type StreamLimits struct {
	PerThread int // defaults to DefaultStreamsPerThread
	PerIP     int // defaults to DefaultStreamsPerIP
}

// OwnerReserve is how many of a thread's streams only its owner may hold:
// PerThread / StreamsOwnerShare, rounded up (5 of the default 20).
func (l StreamLimits) OwnerReserve() int {
	return (l.PerThread + StreamsOwnerShare - 1) / StreamsOwnerShare
}

// Participants is the most streams a thread's participants may hold
// together: PerThread less the owner's reserve (15 of the default 20; none
// when PerThread is 1).
func (l StreamLimits) Participants() int { return l.PerThread - l.OwnerReserve() }

// Refusal is the TooManyStreams error of a stream over l.
func (l StreamLimits) Refusal() *Error {
	return &Error{Code: TooManyStreams, Retry: 5 * time.Second,
		Message: fmt.Sprintf("too many open streams: at most %d per thread (participants together %d of them: %s kept for the owner) and %d per client address",
			l.PerThread, l.Participants(), plural(l.OwnerReserve(), "stream is", "streams are"), l.PerIP)}
}

// WithDefaults fills the zero fields of l.
func (l StreamLimits) WithDefaults() StreamLimits {
	orDefault(&l.PerThread, DefaultStreamsPerThread)
	orDefault(&l.PerIP, DefaultStreamsPerIP)
	return l
}

// plural is n and one or many, as n asks: "1 stream is", "5 streams are".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
