package main

import (
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestAnEmptyClientIDIsRefused: --client-id "" (a script's "$ID" with ID
// unset) is not an idempotency key: it is refused with invalid_client_id,
// as the API refuses "client_id": "", and stores nothing, instead of
// storing the message with no key, once more at every retry.
func TestAnEmptyClientIDIsRefused(t *testing.T) {
	data := seed(t)
	card := `{"fallback_text":"f","blocks":[{"type":"text","text":"t"}]}`
	for _, args := range [][]string{
		{"reply", threadOld, "retried", "--client-id", ""},
		{"reply", threadOld, "retried", "--client-id="},
		{"ask", threadOld, "--approval", "deploy?", "--client-id", ""},
		{"card", threadOld, "-", "--client-id", ""},
	} {
		for range 2 {
			r := runCLI(t, nil, card, append(args, "--data", data, "--fsync", "never")...)
			assert.Equal(t, strings.Join(args, " "), chatrelay.CodeOf(r.err), chatrelay.InvalidClientID)
		}
	}
	r := runCLI(t, nil, "", "show", threadOld, "--data", data)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "2 messages shown"), "nothing was stored: %s", r.stdout)
	r = runCLI(t, env(map[string]string{"CHATRELAY_CLIENT_ID": ""}), "", "reply", threadOld, "unkeyed", "--data", data, "--fsync", "never")
	assert.Success(t, r.err) // an empty variable counts as unset
}
