package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestSubscribeRefusesAServerURLItCannotExtend: --server is the base the
// stream's path is put after, so one with a query or a fragment (a page's
// address pasted whole, a claim link's #t=…) or no host is a malformed
// command line (exit 2) before any connection; subscribe dialed the page
// (200, not a WebSocket) and retried it forever, or sent the path inside
// the query.
func TestSubscribeRefusesAServerURLItCannotExtend(t *testing.T) {
	t.Parallel()
	token := strings.Repeat("ab", 32)
	for _, server := range []string{
		"http://127.0.0.1:1/#t=" + token,
		"http://127.0.0.1:1/?a=b",
		"http://127.0.0.1:1?",
		"http://",
		"https:///x",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a bound, not an assertion: a dial loop ends here
		var out, errb strings.Builder
		err := run(ctx, []string{"subscribe", "--server", server, "--token", token}, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
		cancel()
		assert.Equal(t, server+" exit code", exitCode(err), 2)
		assert.True(t, !strings.Contains(errb.String(), "stream ended"), "%s: subscribe dialed: %s", server, errb.String())
	}
}
