package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// freshGrace is how long a shutdown lets the connections open when the
// listener closes send a request that may be on its way: one a proxy
// just opened, or one a client kept after an answer.
const freshGrace = 500 * time.Millisecond

// newConns tracks the open connections by state, so that shutdown can
// let them send a request on its way, then close those that wait for
// one (new ones that have sent none yet, http.StateNew, and kept ones
// between two, http.StateIdle). http.Server.Shutdown closes idle
// keep-alive connections at once and drops, unanswered, a request it
// reads once it began; it waits for a new connection until it is 5 s old:
// a client that opened a connection it did not use (an HTTP client's
// spare dial, a browser's preconnect) held the shutdown past its own 5 s,
// and serve returned "context deadline exceeded". So the shutdown closes
// the listener, waits freshGrace if any connection is open (settle: a
// request sent meanwhile is answered, with Connection: close since the
// server drains), then closes those still silent (close), which hold no
// request of ours. A connection busy with an answer as the listener
// closes may be idle a moment later and get its next request then, so
// settle waits whatever the states: a wait that ended once none was new
// or idle missed it (TestServeShutdownAnswersAKeptConnection, 3 runs in
// 10).
type newConns struct {
	mu      sync.Mutex                  // guards conns and closing
	conns   map[net.Conn]http.ConnState // open, not hijacked
	closing bool
}

// waiting says whether a connection in state st waits for a request.
func waiting(st http.ConnState) bool { return st == http.StateNew || st == http.StateIdle }

// track is the http.Server's ConnState hook.
func (n *newConns) track(c net.Conn, st http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case st == http.StateClosed || st == http.StateHijacked:
		delete(n.conns, c)
	case n.closing && waiting(st): // accepted, or answered, as the shutdown began
		delete(n.conns, c)
		c.Close()
	default:
		if n.conns == nil {
			n.conns = make(map[net.Conn]http.ConnState)
		}
		n.conns[c] = st
	}
}

// settle gives the open connections grace to send a request on its way
// (or until ctx is done); none open, it returns at once.
func (n *newConns) settle(ctx context.Context, grace time.Duration) {
	n.mu.Lock()
	open := len(n.conns)
	n.mu.Unlock()
	if open == 0 {
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// close closes every connection that waits for a request, and those
// accepted or answered from now on.
func (n *newConns) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closing = true
	for c, st := range n.conns {
		if waiting(st) {
			c.Close()
			delete(n.conns, c)
		}
	}
}
