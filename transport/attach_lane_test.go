package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// countingWriter counts the bytes written to it.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return len(b), nil
}

// TestUploadChunksWaitForTheLane: an upload's bytes are hashed and stored
// only under a turn of the background lane that pushes also take: while
// other work holds every turn, an upload's first chunk, read, waits, and
// nothing of it is stored; once a turn is free, the upload goes through
// whole, with its SHA-256.
func TestUploadChunksWaitForTheLane(t *testing.T) {
	for range background.Turns() {
		assert.Success(t, background.Enter(context.Background()))
	}
	held := true
	leaveAll := func() {
		if held {
			held = false
			for range background.Turns() {
				background.Leave()
			}
		}
	}
	defer leaveAll()
	data := bytes.Repeat([]byte("chunked upload "), 20000) // 300 000 bytes: several chunks
	var dst countingWriter
	type result struct {
		rec store.Received
		err error
	}
	done := make(chan result, 1)
	go func() {
		body := &laneBody{ctx: context.Background(), r: bytes.NewReader(data)}
		rec, err := store.Receive(&dst, store.Upload{Body: body, Max: int64(len(data))})
		body.release()
		done <- result{rec, err}
	}()
	assert.Eventually(t, 10*time.Second, "the upload waits for a turn", func() bool { return background.Waiting() == 1 })
	assert.Equal(t, "bytes stored while the lane is busy", dst.n.Load(), int64(0))
	leaveAll()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the upload did not finish once the lane was free")
	}
	assert.Success(t, r.err)
	sum := sha256.Sum256(data)
	assert.Equal(t, "stored", dst.n.Load(), int64(len(data)))
	assert.Equal(t, "size", r.rec.Size, int64(len(data)))
	assert.Equal(t, "sha256", r.rec.SHA256, hex.EncodeToString(sum[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range background.Turns() { // every turn given back
		assert.Success(t, background.Enter(ctx))
	}
	for range background.Turns() {
		background.Leave()
	}
}
