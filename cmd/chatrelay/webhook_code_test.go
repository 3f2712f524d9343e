package main

import (
	"net"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/webhooktest"
)

// TestWebhookTestUndeliveredHasACode: a webhook test ping that reaches no
// receiver (connection refused), or that the receiver refuses, exits 1
// with a machine code, webhook_undelivered; both printed "ping evt_… to
// URL: …" with no code, the one CLI failure of its kind.
func TestWebhookTestUndeliveredHasACode(t *testing.T) {
	t.Parallel()
	// A loopback port nothing listens on: one that was just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.Success(t, err)
	closed := "http://" + ln.Addr().String() + "/hook"
	ln.Close()
	rcv := webhooktest.Start(t, webhooktest.NewSecret())
	for _, c := range []struct{ name, url, why string }{
		{"no receiver", closed, "connection refused"},
		{"refused by the receiver", rcv.URL, "answered 4"},
	} {
		r := runCLI(t, nil, "", "webhook", "test", c.url, "--secret", webhooktest.NewSecret())
		assert.Equal(t, c.name+": exit status", exitCode(r.err), 1)
		assert.Equal(t, c.name+": code", chatrelay.CodeOf(r.err), codeWebhookUndelivered)
		var line strings.Builder
		report(&line, r.err)
		assert.True(t, strings.HasPrefix(line.String(), "chatrelay: webhook_undelivered: ping evt_"), "%s: the error line %q does not start with its code", c.name, line.String())
		assert.True(t, strings.Contains(line.String(), c.why), "%s: the error line %q does not say %q", c.name, line.String(), c.why)
	}
}
