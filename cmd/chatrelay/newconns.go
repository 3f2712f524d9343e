package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// freshGrace is how long a shutdown lets the connections that wait for a
// request when the listener closes send it: one a proxy just opened, or
// one a client kept after an answer, may hold a request on its way.
const freshGrace = 500 * time.Millisecond

// newConns tracks the connections that wait for a request: new ones that
// have sent none yet (http.StateNew) and kept ones between two
// (http.StateIdle), so that shutdown can let them send it, then close
// them. http.Server.Shutdown closes idle keep-alive connections at once
// and drops, unanswered, a request it reads once it began; it waits for a
// new connection until it is 5 s old: a client that opened a connection
// it did not use (an HTTP client's spare dial, a browser's preconnect)
// held the shutdown past its own 5 s, and serve returned "context
// deadline exceeded". So the shutdown closes the listener, lets these
// connections send their request for freshGrace (settle: it is answered,
// with Connection: close since the server drains), then closes those
// still silent (close), which hold no request of ours.
type newConns struct {
	mu      sync.Mutex            // guards conns and closing
	conns   map[net.Conn]struct{} // StateNew and StateIdle
	closing bool
}

// track is the http.Server's ConnState hook.
func (n *newConns) track(c net.Conn, st http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case st != http.StateNew && st != http.StateIdle:
		delete(n.conns, c)
	case n.closing: // accepted, or answered, as the shutdown began
		delete(n.conns, c)
		c.Close()
	default:
		if n.conns == nil {
			n.conns = make(map[net.Conn]struct{})
		}
		n.conns[c] = struct{}{}
	}
}

// settle waits until every connection that waited for a request has
// sent one (or closed), at most grace or until ctx is done.
func (n *newConns) settle(ctx context.Context, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n.mu.Lock()
		left := len(n.conns)
		n.mu.Unlock()
		if left == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// close closes every connection that waits for a request, and those
// accepted or answered from now on.
func (n *newConns) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closing = true
	for c := range n.conns {
		c.Close()
	}
	clear(n.conns)
}
