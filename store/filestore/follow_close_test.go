package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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

// TestFollowReadyWatchesRemovals: a thread another process removes (its
// sweep) as soon as a feed is ready is announced to it (a participants
// change: waits on its interactions look again). The feed was told ready
// before its folder watch began, and a removal between the two was never
// announced: the rescans look only at the documents there are (review11b:
// TestWaitEndsWhenTheSweepRemovesTheThread failed 3 runs in 20).
func TestFollowReadyWatchesRemovals(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "one") // seen by this process
	removed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(ctx, func(b store.Batch) {
			switch {
			case b.Ready:
				// Another process's sweep removes the thread now.
				if err := os.Remove(filepath.Join(dir, "chat", threadA+".json")); err != nil {
					t.Errorf("removing the document: %v", err)
				}
			case b.Thread == threadA && b.Participants:
				select {
				case removed <- struct{}{}:
				default:
				}
			}
		})
	}()
	assert.Receive(t, removed, "the removal's announcement")
	cancel()
	assert.Receive(t, done, "Follow's return")
}
