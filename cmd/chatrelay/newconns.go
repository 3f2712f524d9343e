package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// freshGrace is how long a shutdown lets the connections accepted before
// the listener closed send their request (a proxy's, opened for one
// request: it is on its way).
const freshGrace = 500 * time.Millisecond

// newConns tracks the connections that have not yet sent a whole request
// (http.StateNew) so that shutdown can close them. http.Server.Shutdown
// closes idle keep-alive connections at once but waits for a new one until
// it is 5 s old (its first request may be on the way): a client that opened
// a connection it did not use (an HTTP client's spare dial while its other
// connections were busy, a browser's preconnect) held the shutdown past its
// own 5 s, and serve returned "context deadline exceeded". So the
// shutdown closes the listener, lets the connections it accepted send
// their request for freshGrace (settle: one a proxy just opened holds a
// request on its way), then closes those still silent (close): such a
// connection holds no request of ours.
type newConns struct {
	mu      sync.Mutex // guards conns and closing
	conns   map[net.Conn]struct{}
	closing bool
}

// track is the http.Server's ConnState hook.
func (n *newConns) track(c net.Conn, st http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case st != http.StateNew:
		delete(n.conns, c)
	case n.closing: // accepted as the shutdown began
		c.Close()
	default:
		if n.conns == nil {
			n.conns = make(map[net.Conn]struct{})
		}
		n.conns[c] = struct{}{}
	}
}

// settle waits until every connection accepted so far has sent a
// request (or closed), at most grace or until ctx is done.
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

// close closes every connection that has sent no whole request yet, and
// those accepted from now on.
func (n *newConns) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closing = true
	for c := range n.conns {
		c.Close()
	}
	clear(n.conns)
}
