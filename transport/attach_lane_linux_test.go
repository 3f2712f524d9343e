package transport

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// niceWriter records the nice value of the thread each Write runs on.
type niceWriter struct{ nices []int }

func (w *niceWriter) Write(b []byte) (int, error) {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		return 0, err
	}
	w.nices = append(w.nices, 20-p) // getpriority(2) answers 20 less the nice value
	return len(b), nil
}

// TestUploadChunksRunLow: an upload's chunks are written (and hashed) on
// the background lane's low-priority threads, at nice 19, each chunk.
func TestUploadChunksRunLow(t *testing.T) {
	data := bytes.Repeat([]byte("low "), 200_000) // 800 000 bytes: four chunks
	var dst niceWriter
	_, err := store.Receive(&dst, store.Upload{Body: bytes.NewReader(data), Max: int64(len(data)), Work: uploadWork(context.Background())})
	assert.Success(t, err)
	assert.Equal(t, "chunks written", len(dst.nices), 4)
	for _, n := range dst.nices {
		assert.Equal(t, "chunk's thread's nice value", n, 19)
	}
}
