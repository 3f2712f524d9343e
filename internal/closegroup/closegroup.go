// Package closegroup counts the goroutines and calls that a Close waits
// for, and refuses new ones once closing began.
package closegroup

import "sync"

// Group is a sync.WaitGroup closed to new members by Close: Enter fails
// once Close was called, so that a Wait after Close waits for every
// member there will ever be. (A WaitGroup's Add from zero must not race
// its Wait; the mutex orders every Add before Close, and so before the
// Wait that follows it.) The zero Group is open. It is safe for
// concurrent use.
type Group struct {
	mu     sync.Mutex // guards closed, and orders wg.Add before Close
	closed bool
	wg     sync.WaitGroup
}

// Enter counts one more member and reports true; once Close was called
// it counts nothing and reports false. A member that entered calls Leave
// when it ends.
func (g *Group) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// Leave ends a member that Enter counted.
func (g *Group) Leave() { g.wg.Done() }

// Close refuses new members. It does not wait: Wait does.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Wait returns once every member that entered has left.
func (g *Group) Wait() { g.wg.Wait() }
