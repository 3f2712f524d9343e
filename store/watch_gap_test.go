package store

import (
	"context"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// droppedStore is a store whose thread "t" lost to retention every
// message after what a watch handed on, and holds none newer: its pages
// are Reset and empty. Only Since and Changes are called (the embedded
// Store is nil).
type droppedStore struct{ Store }

func (droppedStore) Since(context.Context, string, int64, int) (Page, error) {
	return Page{Thread: "t", Reset: true}, nil
}

func (droppedStore) Changes(context.Context, string, int64, int) (Page, error) {
	return Page{Thread: "t", Reset: true}, nil
}

// TestWatchSaysAGapOnce: a catch-up that finds a thread's messages after
// what was handed on dropped, and nothing newer, reports the gap; a later
// catch-up of the same thread (the feed reset again) finds the same state
// and must not report it again, as if more were lost.
func TestWatchSaysAGapOnce(t *testing.T) {
	for _, updates := range []bool{false, true} {
		gaps := 0
		w := &watcher{st: droppedStore{}, updates: updates,
			fn:      func(string, Entry, bool) error { t.Fatal("no message to hand on"); return nil },
			gap:     func(string) error { gaps++; return nil },
			last:    map[string]int64{"t": 5},
			lastRev: map[string]int64{"t": 5},
		}
		infos := []ThreadInfo{{Thread: "t", LastEpoch: 9, Rev: 9}}
		for range 3 {
			assert.Success(t, w.catchUpThreads(t.Context(), infos, 0, "t"))
		}
		assert.Equal(t, "gaps reported (updates "+map[bool]string{false: "off", true: "on"}[updates]+")", gaps, 1)
	}
}
