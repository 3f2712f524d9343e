// Package samekey lets the requests that share a key run one at a time:
// a write repeated with its client_id waits for its first, still being
// stored, and then finds it stored (a repeat), where beside it the repeat
// would find the rate window's place the first holds taken.
package samekey

import (
	"context"
	"sync"
)

// Key is a key of two parts (a thread and a client_id), so that a caller
// builds no string to name it.
type Key [2]string

// Keys lets the holders of one key in one at a time. Its zero value is
// ready to use; it is safe for concurrent use.
type Keys struct {
	mu    sync.Mutex
	run   map[Key]chan struct{} // the key's holder; closed when it leaves
	waits map[Key]int           // the key's callers waiting for it (Waiting)
}

// Waiting is how many callers of Enter wait for key's holder to leave.
func (k *Keys) Waiting(key Key) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.waits[key]
}

// Enter waits until no other holder of key is in, or ctx ends (the caller
// then runs beside it, as it would without Keys), and returns the
// function that lets the next one in; call it once.
func (k *Keys) Enter(ctx context.Context, key Key) (leave func()) {
	for {
		k.mu.Lock()
		busy, ok := k.run[key]
		if !ok {
			if k.run == nil {
				k.run = make(map[Key]chan struct{})
			}
			done := make(chan struct{})
			k.run[key] = done
			k.mu.Unlock()
			return func() {
				k.mu.Lock()
				delete(k.run, key)
				k.mu.Unlock()
				close(done)
			}
		}
		if k.waits == nil {
			k.waits = make(map[Key]int)
		}
		k.waits[key]++
		k.mu.Unlock()
		var ended bool
		select {
		case <-busy:
		case <-ctx.Done():
			ended = true
		}
		k.mu.Lock()
		if k.waits[key]--; k.waits[key] == 0 {
			delete(k.waits, key)
		}
		k.mu.Unlock()
		if ended {
			return func() {}
		}
	}
}
