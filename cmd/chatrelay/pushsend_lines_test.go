package main

import (
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
	var out writes
	copyLines(&out, strings.NewReader(in))
	assert.Equal(t, "what serve's standard error got", strings.Join(out, ""), in+"\n")
	// Each write a whole line, or a buffer's worth of a longer one: the
	// child's lines never interleave with serve's own within a line.
	for i, w := range out {
		assert.True(t, strings.HasSuffix(w, "\n") || len(w) == 64<<10, "write %d of %d: %d bytes, not ending a line", i, len(out), len(w))
	}
	assert.Equal(t, "writes", len(out), 3+(len(long)+1+64<<10-1)/(64<<10))
}

// writes records each Write it is given.
type writes []string

func (w *writes) Write(p []byte) (int, error) {
	*w = append(*w, string(p))
	return len(p), nil
}
