package main

import (
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestAZeroExpiryIsRefused: a link that would live 0 (`--expires 0`, a
// typo or an empty computation) is outside 1 hour … 30 days (a device's
// 365 days) and refused with invalid_expiry, as --cap 0 is refused, never
// read as "the default" and made a 7-day (90-day) link; nothing is made.
func TestAZeroExpiryIsRefused(t *testing.T) {
	data := seed(t)
	for _, args := range [][]string{
		{"share", threadOld, "--name", "Alex", "--expires", "0"},
		{"share", threadOld, "--name", "Alex", "--expires", "0d"},
		{"device", threadOld, "--name", "Phone", "--expires-in", "0"},
		{"device", threadOld, "--name", "Phone", "--expires-in", "0h"},
	} {
		r := runCLI(t, nil, "", append(args, "--data", data, "--fsync", "never")...)
		assert.Equal(t, strings.Join(args, " "), chatrelay.CodeOf(r.err), chatrelay.InvalidExpiry)
		assert.Equal(t, "exit status of "+strings.Join(args, " "), exitCode(r.err), 1)
	}
	r := runCLI(t, nil, "", "share", "list", threadOld, "--json", "--data", data)
	assert.Success(t, r.err)
	assert.True(t, !strings.Contains(r.stdout, `"p_`), "no link was made: %s", r.stdout)
	r = runCLI(t, nil, "", "device", "list", threadOld, "--json", "--data", data)
	assert.Success(t, r.err)
	assert.True(t, !strings.Contains(r.stdout, `"d_`), "no device was made: %s", r.stdout)
}
