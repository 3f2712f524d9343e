package main

import (
	"net"
	"net/http"
	"sync"
)

// newConns tracks the connections that have not yet sent a whole request
// (http.StateNew) so that shutdown can close them. http.Server.Shutdown
// closes idle keep-alive connections at once but waits for a new one until
// it is 5 s old (its first request may be on the way): a client that opened
// a connection it did not use (an HTTP client's spare dial while its other
// connections were busy, a browser's preconnect) held the shutdown past its
// own 5 s, and serve returned "context deadline exceeded". Such a
// connection holds no request of ours; closing it is what happens to a
// connection that arrives once the listener is closed.
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
