package transport

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads what io.ReadAll reads, whatever the declared length says:
// the body's own length, less (a body longer than declared) or more (one
// that ended early), in one read or a byte at a time, and passes a read's
// error on.
func TestReadAllAsIoReadAll(t *testing.T) {
	for _, body := range []string{
		strings.Repeat("a message of a typical length. ", 40),    // 1 240 bytes
		strings.Repeat("a message past the first buffer. ", 300), // 9 900 bytes: readAllFirst is 4 096
	} {
		readAllLengths(t, body)
	}
}

func readAllLengths(t *testing.T, body string) {
	t.Helper()
	for _, declared := range []int64{-1, 0, 1, 70, int64(len(body)) - 1, int64(len(body)), int64(len(body)) + 1, 4096} {
		for _, one := range []bool{false, true} {
			var r io.Reader = strings.NewReader(body)
			if one {
				r = iotest.OneByteReader(r)
			}
			got, err := readAll(r, declared)
			if err != nil || string(got) != body {
				t.Errorf("declared %d, a byte a read %v: %d bytes, %v; want the body's %d", declared, one, len(got), err, len(body))
			}
		}
	}
	boom := errors.New("boom")
	if _, err := readAll(io.MultiReader(bytes.NewReader([]byte("abc")), iotest.ErrReader(boom)), 10); !errors.Is(err, boom) {
		t.Errorf("a failed read: %v, want boom", err)
	}
}
