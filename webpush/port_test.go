package webpush

import (
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
)

// TestCheckEndpointPort: an endpoint whose port is not 1 … 65535 is not
// a subscription's shape (no push could ever be dialled to it), on a
// public host and on an allowed one alike; a port in range passes.
func TestCheckEndpointPort(t *testing.T) {
	t.Parallel()
	f := pushtest.NewFakeNet(map[string][][]string{"push.example.com": {{"203.0.114.9"}}})
	g := &Guard{Resolver: f, Dial: f.Dial, Allow: []string{"127.0.0.1"}}
	ctx := t.Context()
	for _, ep := range []string{"https://push.example.com:0/x", "https://push.example.com:65536/x",
		"https://push.example.com:99999/x", "https://127.0.0.1:0/x", "https://127.0.0.1:99999/x"} {
		_, err := g.CheckEndpoint(ctx, ep)
		assert.True(t, err != nil, "%s passed the check", ep)
	}
	for _, ep := range []string{"https://push.example.com:443/x", "https://push.example.com:8443/x", "https://127.0.0.1:9/x"} {
		_, err := g.CheckEndpoint(ctx, ep)
		assert.True(t, err == nil, "%s refused: %v", ep, err)
	}
}
