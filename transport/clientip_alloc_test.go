package transport

import (
	"net/http/httptest"
	"testing"
)

// TestClientIPOfAPeerAllocatesNothing: the address of a peer that is no
// trusted proxy is its address in canonical form, and when RemoteAddr
// writes it so already (the usual case), finding it allocates nothing.
func TestClientIPOfAPeerAllocatesNothing(t *testing.T) {
	r := httptest.NewRequest("POST", "/api/chat/post", nil)
	for remote, want := range map[string]string{
		"192.0.2.1:4711":          "192.0.2.1",
		"[2001:db8::1]:4711":      "2001:db8::1",
		"[2001:DB8:0::1]:4711":    "2001:db8::1",
		"[::ffff:192.0.2.1]:4711": "192.0.2.1",
		"not an address":          "not an address",
	} {
		r.RemoteAddr = remote
		if got := clientIP(r, nil); got != want {
			t.Errorf("clientIP with RemoteAddr %q = %q, want %q", remote, got, want)
		}
	}
	r.RemoteAddr = "192.0.2.1:4711"
	if n := testing.AllocsPerRun(100, func() { clientIP(r, nil) }); n != 0 {
		t.Errorf("clientIP allocates %v times a request, want 0", n)
	}
}
