package main

import (
	"bytes"
	"flag"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestReportSaysNoExitStatus: an outcome in the exit status (ask and
// check --wait: 10 denied, 11 expired, 12 canceled) is the answer, not an
// error; main wrote "chatrelay: exit status 10" to standard error under
// the outcome's JSON, as if the command had failed.
func TestReportSaysNoExitStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"success", nil, ""},
		{"help", flag.ErrHelp, ""},
		{"denied", exitStatus(10), ""},
		{"an error", usageError("reply takes THREAD and TEXT"), "chatrelay: reply takes THREAD and TEXT\n"},
	} {
		var b bytes.Buffer
		report(&b, tc.err)
		assert.Equal(t, tc.name, b.String(), tc.want)
	}
}
