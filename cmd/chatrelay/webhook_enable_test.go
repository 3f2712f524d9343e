package main

import (
	"context"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// TestWebhookEnable: "chatrelay webhook enable URL" enables a destination
// a 410 Gone disabled in the store, on either store, and says whether it
// was disabled (that it stays disabled across a restart:
// TestConformanceWebhookGoneSurvivesRestart).
func TestWebhookEnable(t *testing.T) {
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testWebhookEnable(t, backend)
		})
	}
}

func testWebhookEnable(t *testing.T, backend string) {
	var b *storetest.Backend
	if storetest.IsRedis(backend) {
		b = storetest.OpenRedis(t, storetest.StartServer(t, storetest.ServerOptions{}), storetest.NewPrefix(), storetest.Options{})
	} else {
		b = storetest.Open(t, backend, storetest.Options{})
	}
	const url = "https://hooks.example.com/chatrelay"
	dis := b.Store.(interface{ Outbox() store.Outbox }).Outbox().(store.Disabler)
	ctx := context.Background()
	assert.Success(t, dis.Disable(ctx, store.DestinationID(url)))

	r := runCLI(t, nil, "", append([]string{"webhook", "enable", url}, b.CLIArgs()...)...)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, store.DestinationID(url)+" enabled"), "stdout: %q", r.stdout)
	gone, err := dis.Disabled(ctx, store.DestinationID(url))
	assert.Success(t, err)
	assert.True(t, !gone, "still disabled after webhook enable")

	r = runCLI(t, nil, "", append([]string{"webhook", "enable", url}, b.CLIArgs()...)...)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "was not disabled"), "stdout: %q", r.stdout)

	r = runCLI(t, nil, "", append([]string{"webhook", "enable", "ftp://x"}, b.CLIArgs()...)...)
	assert.Equal(t, "exit status of a malformed URL", exitCode(r.err), 2)
}
