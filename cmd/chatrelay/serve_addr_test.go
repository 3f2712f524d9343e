package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestServeRefusesAMalformedAddress: an --addr or --metrics-addr that is
// no address (no port, a port past 65535) is a bad flag value, a usage
// error (exit 2) naming the flag, as docs/cli.md says of every bad flag
// value; it was net.Listen's error, exit 1 ("listen tcp: address 99999:
// invalid port"), as if the address were taken.
func TestServeRefusesAMalformedAddress(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--addr", "bogus"},
		{"--addr", "127.0.0.1:99999"},
		{"--addr", "127.0.0.1:-1"},
		{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:99999"},
		{"--addr", "127.0.0.1:0", "--metrics-addr", "nohost"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		var out, errb strings.Builder
		err := run(context.Background(), append([]string{"serve", "--data", data}, args...), func(string) string { return "" }, strings.NewReader(""), &out, &errb)
		assert.Equal(t, strings.Join(args, " ")+" exit code", exitCode(err), 2)
		flag := args[len(args)-2]
		assert.True(t, err != nil && strings.Contains(err.Error(), flag), "%v: the error does not name %s: %v", args, flag, err)
		_, serr := os.Stat(data)
		assert.True(t, os.IsNotExist(serr), "%v: the data folder was made", args)
	}
}
