package redistest

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback between a client and a Server, for
// faults a real Redis cannot make on its own: one connection that goes
// silent (a half-open connection, as a NAT or a firewall that dropped it
// leaves it) while the others keep working.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[*proxied]struct{}
}

type proxied struct {
	client, server net.Conn
	stalled        chan struct{} // closed once the connection is stalled
	stallOnce      sync.Once
}

// StartProxy listens on a free loopback port and forwards every
// connection to s; it closes when the test ends.
func StartProxy(t testing.TB, s *Server) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: s.Addr(), conns: make(map[*proxied]struct{})}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's redis:// URL (database 0).
func (p *Proxy) URL() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	pc := &proxied{client: c, server: u, stalled: make(chan struct{})}
	p.mu.Lock()
	if p.conns == nil { // closed meanwhile
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	go pc.pump(u, c)
	pc.pump(c, u)
}

// pump copies src to dst until either ends; once the connection is
// stalled it forwards nothing more, and closes nothing either.
func (pc *proxied) pump(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-pc.stalled:
			io.Copy(io.Discard, src) // silent, until the proxy closes
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	pc.client.Close()
	pc.server.Close()
}

// StallSubscribers makes every connection of s that is subscribed to a
// channel (the feeds) silent, both ways, without closing it: the client
// neither hears from Redis nor learns that the connection is gone, and
// its other connections keep working. It returns how many it stalled.
func (p *Proxy) StallSubscribers(t testing.TB, s *Server) int {
	t.Helper()
	list, err := s.Client(t).Do(context.Background(), "CLIENT", "LIST").Text()
	if err != nil {
		t.Fatalf("redistest: CLIENT LIST: %v", err)
	}
	ports := map[string]bool{}
	for line := range strings.SplitSeq(list, "\n") {
		f := map[string]string{}
		for kv := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if n, _ := strconv.Atoi(f["sub"]); n > 0 {
			if _, port, err := net.SplitHostPort(f["addr"]); err == nil {
				ports[port] = true
			}
		} else if n, _ := strconv.Atoi(f["ssub"]); n > 0 {
			if _, port, err := net.SplitHostPort(f["addr"]); err == nil {
				ports[port] = true
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	stalled := 0
	for pc := range p.conns {
		if _, port, _ := net.SplitHostPort(pc.server.LocalAddr().String()); ports[port] {
			pc.stallOnce.Do(func() { close(pc.stalled) })
			stalled++
		}
	}
	return stalled
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for pc := range conns {
		pc.client.Close()
		pc.server.Close()
	}
}
