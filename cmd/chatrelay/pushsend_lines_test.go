package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestCopyLinesPastALongLine: the push sender child's log reaches
// serve's standard error whole, a line at a time, even past a line longer
// than the copy's buffer (written in pieces) and with no newline at its
// end. Before, a line over 1 MiB stopped the copy, and every later line
// of the child's was thrown away.
func TestCopyLinesPastALongLine(t *testing.T) {
	long := strings.Repeat("x", 1<<20+1)
	in := "first\n" + long + "\nhello\nno newline at the end"
	var out bytes.Buffer
	copyLines(&out, strings.NewReader(in))
	assert.Equal(t, "what serve's standard error got", out.String(), in+"\n")
}
