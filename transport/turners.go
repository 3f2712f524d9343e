package transport

import (
	"sync"
	"time"
)

// turners runs the sessions' turns (session.wake) on goroutines that stay
// for a while after a turn, waiting for the next session that needs one.
// A goroutine started for each turn begins on a small stack and grows it
// (copying it) on the way to the socket write every time; one that is
// kept has grown it already. A wake hands its session to a waiting
// goroutine, or starts one when none waits, so a turn never waits for
// another session's.
//
// Each goroutine is owned by the set: it leaves once it waited turnerIdle
// for work, or at once when the server has shut down (stop).
type turners struct {
	next     chan *session // unbuffered: a send succeeds only if a goroutine is waiting
	quit     chan struct{} // closed by stop
	stopOnce sync.Once
	idle     time.Duration // turnerIdle; a test lengthens it before the server serves
}

// turnerIdle is how long a goroutine waits for a turn before it leaves.
const turnerIdle = time.Second

func newTurners() *turners {
	return &turners{next: make(chan *session), quit: make(chan struct{}), idle: turnerIdle}
}

// run runs ss.turns on a waiting goroutine, or on a new one.
func (t *turners) run(ss *session) {
	select {
	case t.next <- ss:
	default:
		go t.work(ss)
	}
}

// work runs ss's turns, then those of the sessions handed to it, until it
// waited turnerIdle (t.idle) for one or the set is stopped.
func (t *turners) work(ss *session) {
	ss.turns()
	idle := time.NewTimer(t.idle)
	defer idle.Stop()
	for {
		select {
		case ss = <-t.next:
			ss.turns()
			idle.Reset(t.idle)
		case <-idle.C:
			return
		case <-t.quit:
			return
		}
	}
}

// stop lets the waiting goroutines go, and every later one after its
// first turn: a wake after it costs a goroutine, as a turn did before.
func (t *turners) stop() { t.stopOnce.Do(func() { close(t.quit) }) }
