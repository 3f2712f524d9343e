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

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// countingWriter counts the bytes written to it.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return len(b), nil
}

// holdEveryTurn takes every turn of the background lane, as other work
// would, and returns what gives them back (once, however often it is
// called; at the test's end if not before).
func holdEveryTurn(t *testing.T) (leaveAll func()) {
	t.Helper()
	for range background.Turns() {
		assert.Success(t, background.Enter(context.Background()))
	}
	leaveAll = sync.OnceFunc(func() {
		for range background.Turns() {
			background.Leave()
		}
	})
	t.Cleanup(leaveAll)
	return leaveAll
}

// TestUploadChunksWaitForTheLane: an upload's bytes are hashed and stored
// only under a turn of the background lane that pushes also take: while
// other work holds every turn, an upload's first chunk, read, waits, and
// nothing of it is stored; once a turn is free, the upload goes through
// whole, with its SHA-256, and gives every turn back.
func TestUploadChunksWaitForTheLane(t *testing.T) {
	leaveAll := holdEveryTurn(t)
	data := bytes.Repeat([]byte("chunked upload "), 20000) // 300 000 bytes: two chunks of 256 KiB at most
	var dst countingWriter
	type result struct {
		rec store.Received
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := store.Receive(&dst, store.Upload{Body: bytes.NewReader(data), Max: int64(len(data)), Work: uploadWork(context.Background())})
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

// TestUploadReadsWithoutATurn: an upload's body is read without a turn
// of the lane: while other work holds every turn, a slow client's bytes
// are still taken as they come (the client is not held back, and the
// upload holds no turn while it waits for them), and wait for a turn
// only to be hashed and stored; the upload finishes whole once a turn is
// free.
func TestUploadReadsWithoutATurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leaveAll := holdEveryTurn(t)
	pr, pw := io.Pipe()
	defer pw.CloseWithError(errors.New("the test is over"))
	var dst countingWriter
	done := make(chan error, 1)
	go func() {
		_, err := store.Receive(&dst, store.Upload{Body: pr, Max: 1 << 20, Work: uploadWork(ctx)})
		done <- err
	}()
	piece := bytes.Repeat([]byte("p"), 1000)
	for i := range 3 {
		wrote := make(chan error, 1)
		go func() { _, err := pw.Write(piece); wrote <- err }()
		select {
		case err := <-wrote: // taken, every turn held
			assert.Success(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("piece %d: the slow client's bytes waited for a turn before they were read", i)
		}
	}
	assert.Equal(t, "turns waited for before the chunk is whole", background.Waiting(), 0)
	pw.Close()
	assert.Eventually(t, 10*time.Second, "the chunk waits for a turn to be stored", func() bool { return background.Waiting() == 1 })
	assert.Equal(t, "bytes stored while the lane is busy", dst.n.Load(), int64(0))
	leaveAll()
	select {
	case err := <-done:
		assert.Success(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the upload did not finish once the lane was free")
	}
	assert.Equal(t, "stored", dst.n.Load(), int64(3*len(piece)))
}

// TestUploadEndsWhileWaitingForATurn: an upload whose request ends while
// its chunk waits for a turn is refused (the upload broke off), and
// nothing of it is stored.
func TestUploadEndsWhileWaitingForATurn(t *testing.T) {
	holdEveryTurn(t)
	ctx, cancel := context.WithCancel(context.Background())
	var dst countingWriter
	done := make(chan error, 1)
	go func() {
		_, err := store.Receive(&dst, store.Upload{Body: bytes.NewReader([]byte("a file")), Max: 1 << 20, Work: uploadWork(ctx)})
		done <- err
	}()
	assert.Eventually(t, 10*time.Second, "the chunk waits for a turn", func() bool { return background.Waiting() == 1 })
	cancel()
	select {
	case err := <-done:
		assert.Equal(t, "code", chatrelay.CodeOf(err), chatrelay.InvalidAttachment)
		assert.True(t, errors.Is(err, context.Canceled), "the cause: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the upload went on waiting after its request ended")
	}
	assert.Equal(t, "bytes stored", dst.n.Load(), int64(0))
}
