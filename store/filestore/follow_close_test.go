package filestore

import (
	"context"
	"errors"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestFollowEndsWhenClosed: a Follow still running when its store closes
// returns ErrClosed, as Redis's does, rather than rescan a closed store's
// folder and hand on what it reads until its caller's context ends.
func TestFollowEndsWhenClosed(t *testing.T) {
	s := openFile(t, "", FileOptions{})
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(context.Background(), func(b store.Batch) {
			if b.Ready {
				close(ready)
			}
		})
	}()
	assert.Receive(t, ready, "the feed's Ready batch")
	assert.Success(t, s.Close())
	if err := assert.Receive(t, done, "Follow's return after Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Follow after Close returned %v, want ErrClosed", err)
	}
}
