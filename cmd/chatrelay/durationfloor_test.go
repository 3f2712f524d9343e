package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestDurationFlagsHaveAFloor: a duration flag under which the server is
// useless (a ticket that expires as it is made, a rate window that counts
// nothing, messages dropped as they arrive, an MCP session that ends at
// once) or busy for nothing (a ping, a sweep or a progress notification in
// a loop) is a usage error naming the flag and its least value (exit 2);
// --ticket-ttl 1ns was taken, and its tickets were refused invalid_ticket
// by the stream they were made for.
func TestDurationFlagsHaveAFloor(t *testing.T) {
	t.Parallel()
	data := seed(t)
	for _, c := range []struct {
		args []string
		min  string
	}{
		{[]string{"serve", "--addr", "127.0.0.1:0", "--ticket-ttl", "1ns"}, "1s"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--ticket-ttl", "999ms"}, "1s"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--heartbeat", "1ns"}, "1s"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--rate-window", "1ns"}, "1s"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--sweep-every", "1ns"}, "100ms"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--retention-age", "1ns"}, "1s"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--mcp-idle", "1ns"}, "100ms"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--progress-every", "1ns"}, "100ms"},
		{[]string{"mcp", "--progress-every", "1ns"}, "100ms"},
		{[]string{"reply", threadOld, "hi", "--retention-age", "1ns"}, "1s"},
	} {
		// A flag taken starts the server: it ends with the context, and
		// the exit status says it was taken.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var stdout, stderr bytes.Buffer
		err := run(ctx, append(c.args, "--data", data, "--fsync", "never"), env(nil), strings.NewReader(""), &stdout, &stderr)
		cancel()
		r := cliResult{err: err}
		name := strings.Join(c.args, " ")
		flag := c.args[len(c.args)-2] // named --flag, or -flag by the flag package's "invalid value"
		assert.Equal(t, name+": exit status ("+errString(r.err)+")", exitCode(r.err), 2)
		assert.True(t, strings.Contains(errString(r.err), flag[1:]) && strings.Contains(errString(r.err), "at least "+c.min),
			"%s: error %q does not name %s and its least value %s", name, errString(r.err), flag, c.min)
	}
}
