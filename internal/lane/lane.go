// Package lane is a server's background-work lane: the turns that work
// done beside the requests (a push's encryption and write, an upload's
// hashing and writing of a chunk) takes one piece at a time, so that it
// never runs on more Ps than the lane has turns however much of it is
// due, and a post always finds a free P.
//
// A turn is short: a piece of work enters, does its piece and leaves, and
// the next waiting piece (in the order they came) enters. A piece that
// may block while it holds its turn (a write to a stalled peer) enters for
// a bounded time (EnterFor): its turn is let go when the time is up,
// whether or not the piece is done, so that no stalled piece holds up the
// others for longer than that.
//
// The turns bound the Ps background work takes; Run runs a piece's work
// on threads the operating system serves last (nice 19 on Linux), so
// that it also takes the cores only when the requests leave them: on two
// cores, the lane's one P of work no longer competes on equal terms with
// the posts and the clients beside them. (RocksDB runs its compactions
// on threads of lowered priority for the same reason.) Handing a piece
// to a low thread costs a thread's wake-up (about 35 µs of CPU on a small
// VM): Run is for pieces that are much longer than that.
package lane

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Lane is a set of turns. Its zero value is not usable: see New.
type Lane struct {
	turns   chan struct{}
	waiting atomic.Int64 // pieces in Enter, waiting for a turn
	work    chan *job    // to a low thread waiting for work (unbuffered)
	lows    atomic.Int64 // low threads running
}

// New is a lane of n turns (at least one).
func New(n int) *Lane {
	return &Lane{turns: make(chan struct{}, max(1, n)), work: make(chan *job)}
}

// ForCores is a lane of one turn fewer than GOMAXPROCS (one at least): on
// a server of two or more Ps, background work leaves one free.
func ForCores() *Lane { return New(runtime.GOMAXPROCS(0) - 1) }

// Turns is how many pieces may hold a turn at once.
func (l *Lane) Turns() int { return cap(l.turns) }

// Enter waits for a turn, or for ctx to end (its error). The caller must
// Leave once, after its piece. Pieces that wait get their turns in the
// order they came (a channel's waiting senders are served first in, first
// out): a piece is never passed over for ever, however busy the lane.
func (l *Lane) Enter(ctx context.Context) error {
	select {
	case l.turns <- struct{}{}:
		return nil
	default:
	}
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	select {
	case l.turns <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Waiting is how many pieces wait for a turn now.
func (l *Lane) Waiting() int { return int(l.waiting.Load()) }

// Leave gives back a turn taken by Enter.
func (l *Lane) Leave() { <-l.turns }

// EnterFor waits for a turn, as Enter does, and holds it at most d: leave
// gives it back (once, however often it is called), and if it has not
// been called d after the turn was taken, the turn is given back then.
func (l *Lane) EnterFor(ctx context.Context, d time.Duration) (leave func(), err error) {
	if err := l.Enter(ctx); err != nil {
		return nil, err
	}
	var once sync.Once
	give := func() { once.Do(l.Leave) }
	t := time.AfterFunc(d, give)
	return func() {
		t.Stop()
		give()
	}, nil
}
