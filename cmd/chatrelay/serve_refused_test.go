package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestServeThatCannotListenLeavesTheFolderAlone: a serve whose address
// (or --metrics-addr) is taken exits before it opens the store, so it
// neither makes a data folder nor records its flags in the folder's
// settings.json, which the host CLI's writes follow (a failed start with
// --retention-messages 5 would have the next reply trim every thread to
// five messages). It fails with exit 1 and a machine code,
// address_unavailable, naming the flag: it printed net.Listen's words
// alone ("chatrelay: listen tcp …: bind: address already in use"), the one
// serve failure with no code.
func TestServeThatCannotListenLeavesTheFolderAlone(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	assert.Success(t, err)
	t.Cleanup(func() { busy.Close() }) // the subtests run after this function returns
	taken := busy.Addr().String()

	for _, tc := range []struct {
		name, flag string
		args       []string
	}{
		{"address taken", "--addr", []string{"--addr", taken}},
		{"metrics address taken", "--metrics-addr", []string{"--addr", "127.0.0.1:0", "--metrics-addr", taken}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fresh := filepath.Join(t.TempDir(), "data")
			args := append([]string{"serve", "--data", fresh, "--retention-messages", "5"}, tc.args...)
			r := runCLI(t, nil, "", args...)
			assert.True(t, r.err != nil, "serve started on a taken address")
			assert.True(t, strings.Contains(r.err.Error(), "address already in use"), "error: %v", r.err)
			assert.Equal(t, "exit status", exitCode(r.err), 1)
			assert.Equal(t, "code", chatrelay.CodeOf(r.err), codeAddressUnavailable)
			var line strings.Builder
			report(&line, r.err)
			assert.True(t, strings.HasPrefix(line.String(), "chatrelay: address_unavailable: "+tc.flag+" "+taken+" "),
				"the error line %q does not start with its code and flag", line.String())
			assert.True(t, strings.Contains(line.String(), "address already in use"), "the error line %q does not say why", line.String())
			_, statErr := os.Stat(fresh)
			assert.True(t, os.IsNotExist(statErr), "a serve that did not start made its data folder: %v", statErr)

			kept := seed(t)
			settings := filepath.Join(kept, "settings.json")
			before, _ := os.ReadFile(settings)
			args = append([]string{"serve", "--data", kept, "--retention-messages", "5"}, tc.args...)
			r = runCLI(t, nil, "", args...)
			assert.True(t, r.err != nil, "serve started on a taken address")
			after, _ := os.ReadFile(settings)
			assert.Equal(t, "settings.json after a serve that did not start", string(after), string(before))
			r = runCLI(t, nil, "", "reply", "--data", kept, "--retention-messages", "200", threadOld, "still kept")
			assert.Success(t, r.err)
		})
	}
}
