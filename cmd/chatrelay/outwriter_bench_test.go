package main

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// BenchmarkOutWriterLine is the cost of one line written through a
// command's standard output (outWriter: a copy and a hand-over to its
// writer goroutine), as watch writes each message.
func BenchmarkOutWriterLine(b *testing.B) {
	line := append(bytes.Repeat([]byte("x"), 300), '\n')
	o := newOutWriter(context.Background(), io.Discard)
	defer o.close()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := o.Write(line); err != nil {
			b.Fatal(err)
		}
	}
}
