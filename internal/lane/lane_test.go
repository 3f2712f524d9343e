package lane_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/lane"
)

// TestAtMostTurns: however many pieces come at once, no more than the
// lane's turns run at a time, and every piece gets its turn.
func TestAtMostTurns(t *testing.T) {
	for _, turns := range []int{1, 3} {
		l := lane.New(turns)
		var running, most, done atomic.Int64
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				for range 50 {
					assert.Success(t, l.Enter(context.Background()))
					n := running.Add(1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					running.Add(-1)
					l.Leave()
				}
				done.Add(1)
			})
		}
		wg.Wait()
		assert.True(t, most.Load() >= 1 && most.Load() <= int64(turns), "%d turns: %d pieces ran at once", turns, most.Load())
		assert.Equal(t, "pieces that finished", done.Load(), int64(40))
	}
}

// TestNoTurnUnderOne: a lane of 0 turns (a server of one P) still has one.
func TestNoTurnUnderOne(t *testing.T) {
	assert.Equal(t, "turns of New(0)", lane.New(0).Turns(), 1)
	assert.True(t, lane.ForCores().Turns() >= 1, "ForCores has no turn")
}

// TestEnterHonoursContext: a piece that waits for a busy lane gives up
// when its context ends, and takes no turn.
func TestEnterHonoursContext(t *testing.T) {
	l := lane.New(1)
	assert.Success(t, l.Enter(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- l.Enter(ctx) }()
	assert.Eventually(t, 5*time.Second, "the second piece waits", func() bool { return l.Waiting() == 1 })
	cancel()
	assert.True(t, errors.Is(<-got, context.Canceled), "Enter did not end with its context")
	assert.Equal(t, "waiting", l.Waiting(), 0)
	l.Leave()
	assert.Success(t, l.Enter(context.Background())) // the turn given back is free: none was taken
}

// TestEnterForLetsGo: a piece that holds its turn past its time (a write
// to a peer that stalls) loses it, and the piece waiting gets it; the
// stalled piece's own leave, later, gives back nothing more.
func TestEnterForLetsGo(t *testing.T) {
	l := lane.New(1)
	leave, err := l.EnterFor(context.Background(), 20*time.Millisecond)
	assert.Success(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assert.Success(t, l.Enter(ctx)) // the stalled piece never left: its time did
	leave()
	leave()
	none, cancelNone := context.WithCancel(context.Background())
	cancelNone()
	assert.True(t, errors.Is(l.Enter(none), context.Canceled), "the stalled piece's leave gave back the next piece's turn")
	l.Leave()
}

// TestEnterForLeaveEarly: a piece that leaves in time gives its turn
// back at once, and a second leave gives back nothing more.
func TestEnterForLeaveEarly(t *testing.T) {
	l := lane.New(1)
	leave, err := l.EnterFor(context.Background(), time.Hour)
	assert.Success(t, err)
	leave()
	none, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Success(t, l.Enter(none)) // free at once (a free turn is taken even by a piece whose context ended)
	leave()
	assert.True(t, errors.Is(l.Enter(none), context.Canceled), "a second leave gave back the next piece's turn")
	l.Leave()
}
