package filestore

import (
	"regexp"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// TestNewIDIsOneAllocation: a message id names its second and six hex
// digits, and costs a post one allocation (its string), not one for each
// of its parts.
func TestNewIDIsOneAllocation(t *testing.T) {
	at := time.Date(2026, 10, 23, 18, 40, 0, 123e6, time.UTC)
	taken := []store.Entry{{Message: chatrelay.Message{ID: "MSG-20261023-184000-a1b2c3", Epoch: at.UnixMilli()}}}
	id := newID(taken, at)
	if !regexp.MustCompile(`^MSG-20261023-184000-[0-9a-f]{6}$`).MatchString(id) || id == taken[0].ID {
		t.Fatalf("newID = %q, want MSG-20261023-184000- and six hex digits, not %s", id, taken[0].ID)
	}
	if raceOn {
		return // the race detector moves the random bytes to the heap
	}
	if n := testing.AllocsPerRun(100, func() { newID(taken, at) }); n != 1 {
		t.Errorf("newID allocates %v times, want 1", n)
	}
}
