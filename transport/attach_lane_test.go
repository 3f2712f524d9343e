package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sync"
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

// TestSlowUploadReadsWithoutATurn: an upload whose client sends nothing
// for a while lets its turn go, and from then on waits for its client
// without one: while other work holds every turn of the lane (and more
// waits for one), its client's bytes are still taken (the client is not
// held back), then wait for a turn to be stored; the upload finishes
// whole once turns are free.
func TestSlowUploadReadsWithoutATurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held := false
	enterAll := func() {
		for range background.Turns() {
			assert.Success(t, background.Enter(ctx))
		}
		held = true
	}
	leaveAll := func() {
		if held {
			held = false
			for range background.Turns() {
				background.Leave()
			}
		}
	}
	defer leaveAll()
	pr, pw := io.Pipe()
	defer pw.CloseWithError(errors.New("the test is over"))
	var dst countingWriter
	done := make(chan error, 1)
	enterAll()
	go func() {
		body := &laneBody{ctx: context.Background(), r: pr}
		_, err := store.Receive(&dst, store.Upload{Body: body, Max: 1 << 20})
		body.release()
		done <- err
	}()
	assert.Eventually(t, 10*time.Second, "the upload waits for a turn to read", func() bool { return background.Waiting() == 1 })
	leaveAll() // the upload takes a turn, and waits for its client under it
	enterAll() // every turn: the stalled upload's is let go
	piece := bytes.Repeat([]byte("p"), 1000)
	write := func(what string) {
		t.Helper()
		wrote := make(chan error, 1)
		go func() { _, err := pw.Write(piece); wrote <- err }()
		select {
		case err := <-wrote: // taken without a turn
			assert.Success(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the slow upload's bytes waited for a turn before they were read", what)
		}
	}
	write("the read that stalled")
	assert.Eventually(t, 10*time.Second, "the bytes wait for a turn to be stored", func() bool { return background.Waiting() == 1 })
	// Other work: every turn, and one more waiting, once the upload's
	// first bytes are stored.
	others := background.Turns() + 1
	free := make(chan struct{})
	var wg sync.WaitGroup
	for range others {
		wg.Go(func() {
			if background.Enter(ctx) == nil {
				<-free
				background.Leave()
			}
		})
	}
	letGo := sync.OnceFunc(func() { close(free) })
	defer wg.Wait()
	defer letGo()
	assert.Eventually(t, 10*time.Second, "the other work waits", func() bool { return background.Waiting() == 1+others })
	leaveAll()
	assert.Eventually(t, 10*time.Second, "the first bytes stored", func() bool { return dst.n.Load() == int64(len(piece)) })
	write("the next read, the lane busy")
	assert.Eventually(t, 10*time.Second, "the bytes wait for a turn to be stored", func() bool { return background.Waiting() == 2 })
	assert.Equal(t, "bytes stored while the lane is busy", dst.n.Load(), int64(len(piece)))
	letGo()
	pw.Close()
	select {
	case err := <-done:
		assert.Success(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the upload did not finish once the lane was free")
	}
	assert.Equal(t, "stored", dst.n.Load(), int64(2*len(piece)))
}
