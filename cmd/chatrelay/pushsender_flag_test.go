package main

import (
	"errors"
	"io"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestPushSenderFlag: serve's --push-sender takes inprocess (the
// default: the server sends), process and external (the server serves
// the push routes and sends none), and refuses anything else as a usage
// error; with --push=false there is nothing to send.
func TestPushSenderFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		noSend bool
	}{
		{nil, false},
		{[]string{"--push-sender", "inprocess"}, false},
		{[]string{"--push-sender", "process"}, true},
		{[]string{"--push-sender", "external"}, true},
	} {
		f, err := parseServe(append([]string{"--data", t.TempDir()}, tc.args...), env(nil), io.Discard)
		assert.Success(t, err)
		assert.True(t, f.server.Push != nil && f.server.Push.NoSend == tc.noSend, "%q: push config %+v", tc.args, f.server.Push)
	}
	f, err := parseServe([]string{"--push=false", "--push-sender", "process"}, env(nil), io.Discard)
	assert.Success(t, err)
	assert.True(t, f.server.Push == nil, "--push=false: push config %+v", f.server.Push)
	_, err = parseServe([]string{"--push-sender", "elsewhere"}, env(nil), io.Discard)
	assert.True(t, errors.As(err, new(usageError)), "--push-sender elsewhere: %v", err)
}
