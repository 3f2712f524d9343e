package pushtest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// FakeNet is a resolver whose answers a test scripts and a dialer that
// records each address it is asked to dial and connects nowhere, for
// testing the SSRF guard: no packet leaves the machine.
type FakeNet struct {
	mu      sync.Mutex
	answers map[string][][]string
	asked   map[string]int
	dialled []string
}

// NewFakeNet returns a FakeNet answering each name with its answers in
// turn (each a list of addresses), the last one repeated; a name without
// answers is not found.
func NewFakeNet(answers map[string][][]string) *FakeNet {
	return &FakeNet{answers: answers, asked: map[string]int{}}
}

// LookupNetIP answers host with its next scripted answer.
func (f *FakeNet) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	as := f.answers[host]
	if len(as) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(f.asked[host], len(as)-1)
	f.asked[host]++
	var out []netip.Addr
	for _, a := range as[i] {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// ErrNotDialled is what FakeNet's Dial answers.
var ErrNotDialled = errors.New("the fake dialer connects nowhere")

// Dial records address and fails with ErrNotDialled.
func (f *FakeNet) Dial(_ context.Context, _, address string) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dialled = append(f.dialled, address)
	return nil, ErrNotDialled
}

// Dialled returns the addresses Dial was asked for, in order.
func (f *FakeNet) Dialled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dialled)
}
