package webpush

import (
	"context"
	"errors"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fuzzNet resolves names for the fuzz targets (no packet leaves): under
// "private.test" to a private address, under "mapped.test" to an
// IPv4-mapped loopback one, "nx.test" to nothing, anything else to a
// public address; its dial records the address and connects nowhere.
type fuzzNet struct {
	mu      sync.Mutex
	dialled []string
}

func (*fuzzNet) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	switch {
	case strings.HasSuffix(h, "private.test"):
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	case strings.HasSuffix(h, "mapped.test"):
		return []netip.Addr{netip.MustParseAddr("203.0.114.9"), netip.MustParseAddr("::ffff:127.0.0.1")}, nil
	case h == "nx.test":
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr("203.0.114.9")}, nil
}

var errFuzzDial = errors.New("fuzz: connects nowhere")

func (f *fuzzNet) dial(_ context.Context, _, address string) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dialled = append(f.dialled, address)
	return nil, errFuzzDial
}

// FuzzCheckEndpoint: a subscription's endpoint is a client's. The check
// never panics; an endpoint it takes is an https URL with a host, no
// user and no fragment, within MaxEndpoint bytes as stored (escaped),
// and the stored form passes again unchanged. Whatever it took or
// refused, a dial of its host (and of the raw string as an address)
// never reaches a Blocked address.
func FuzzCheckEndpoint(f *testing.F) {
	for _, s := range []string{
		"https://fcm.googleapis.com/fcm/send/dGVzdA:APA91bH", "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk",
		"https://web.push.apple.com/QGuQyavXutnMrwx", "https://push.example.com:8443/x?y=z", "https://push.example.com./x",
		"https://a.private.test/x", "https://a.mapped.test/x", "https://nx.test/x", "https://127.0.0.1/", "https://[::1]/",
		"https://[::ffff:10.0.0.1]/", "https://[2002:7f00:1::]/", "https://[64:ff9b::a00:1]/", "https://[fe80::1%25eth0]/",
		"https://0x7f000001/", "https://2130706433/", "https://%31%32%37.0.0.1/", "https://１２７.0.0.1/",
		"https://user:pw@push.example.com/", "https://push.example.com/#f", "https:push.example.com", "http://push.example.com/",
		"https://push.example.com:0/", "https://push.example.com:65536/", "https://push.example.com:+443/", "https:///x",
		"https://push.example.com/a b", "127.0.0.1:443", "[::1]:443", "push.example.com:443", "a.private.test:443",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		fn := &fuzzNet{}
		g := &Guard{Resolver: fn, Dial: fn.dial, MaxEndpoint: 2048}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		u, err := g.CheckEndpoint(ctx, raw)
		if err == nil {
			stored := u.String()
			if u.Scheme != "https" || u.Hostname() == "" || u.User != nil || u.Fragment != "" || len(stored) > g.MaxEndpoint {
				t.Fatalf("CheckEndpoint(%q) took %q", raw, stored)
			}
			again, err := g.CheckEndpoint(ctx, stored)
			if err != nil || again.String() != stored {
				t.Fatalf("CheckEndpoint(%q) took %q, which passes again as %v, %v", raw, stored, again, err)
			}
			port := u.Port()
			if port == "" {
				port = "443"
			}
			g.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
		}
		g.DialContext(ctx, "tcp", raw)
		for _, a := range fn.dialled {
			host, _, err := net.SplitHostPort(a) // the port is the caller's (http.Transport's: a number)
			ip, perr := netip.ParseAddr(host)
			if err != nil || perr != nil || Blocked(ip) {
				t.Fatalf("endpoint %q: dialled %q", raw, a)
			}
		}
	})
}

// FuzzRetryAfter: a push service's Retry-After is a remote's word. It
// never gives a negative wait, and n seconds is n seconds (or, past what
// a Duration holds, the longest wait).
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	for _, s := range []string{"", "0", "120", "-1", "+5", "1.5", "Wed, 02 Dec 2026 20:05:00 GMT", "Wed, 02 Dec 2026 19:05:00 GMT",
		"9223372036", "9223372037", "18446744074", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := retryAfter(v, now)
		if d < 0 {
			t.Fatalf("retryAfter(%q) = %v", v, d)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && v[0] != '+' {
			want := time.Duration(math.MaxInt64)
			if n <= math.MaxInt64/int64(time.Second) {
				want = time.Duration(n) * time.Second
			}
			if d != want {
				t.Fatalf("retryAfter(%q) = %v, want %v", v, d, want)
			}
		}
	})
}
