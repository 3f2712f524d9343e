package transport

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestPublicBaseOfALinkLocalAddress: a request with no Host that reached
// a link-local IPv6 address (fe80::1%eth0, its zone naming the interface)
// gets links whose host is that address with its zone escaped as a URL
// needs it ([fe80::1%25eth0]), which a browser or url.Parse reads back as
// the address; it was written raw ("http://[fe80::1%eth0]:8080", which
// url.Parse refuses: invalid URL escape "%et"). The address is only
// injected: nothing is dialed.
func TestPublicBaseOfALinkLocalAddress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 8080, Zone: "eth0"}, "http://[fe80::1%25eth0]:8080/x"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 8080}, "http://[::1]:8080/x"},
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}, "http://127.0.0.1:8080/x"},
	} {
		s := &Server{cfg: Config{Prefix: "/x"}}
		r := httptest.NewRequest(http.MethodPost, "/x/api/chat/devices", nil)
		r.Host = ""
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, c.addr))
		base := s.publicBase(r)
		assert.Equal(t, c.addr.String()+": base", base, c.want)
		u, err := url.Parse(base + "/d#chd_x")
		assert.Success(t, err)
		a := c.addr.(*net.TCPAddr)
		assert.Equal(t, c.addr.String()+": the link's host", u.Hostname(), (&net.IPAddr{IP: a.IP, Zone: a.Zone}).String())
	}
}
