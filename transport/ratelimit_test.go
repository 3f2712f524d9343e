package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/transport"
)

// TestMemoryLimiterTakeAllocatesOnlyItsUndo: a post the limiter lets in
// costs one allocation (the undo it returns), not keys built from the
// thread and the address; and the limits still hold per thread and per
// address.
func TestMemoryLimiterTakeAllocatesOnlyItsUndo(t *testing.T) {
	l := transport.NewMemoryLimiter(chatrelay.Windows{PerThread: 1 << 30, PerIP: 1 << 30}, nil)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := l.Take(ctx, "thread-a", "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("Take allocates %v times a post, want 1", n)
	}

	l = transport.NewMemoryLimiter(chatrelay.Windows{PerThread: 1, PerIP: 2}, nil)
	undo, err := l.Take(ctx, "a", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(ctx, "a", "192.0.2.2"); chatrelay.CodeOf(err) != chatrelay.RateLimited {
		t.Errorf("a second post to thread a: %v, want rate_limited", err)
	}
	if _, err := l.Take(ctx, "b", "192.0.2.1"); err != nil {
		t.Errorf("a post to thread b from the same address: %v", err)
	}
	if _, err := l.Take(ctx, "c", "192.0.2.1"); chatrelay.CodeOf(err) != chatrelay.RateLimited {
		t.Errorf("a third post from 192.0.2.1: %v, want rate_limited", err)
	}
	undo(false) // the first post was not stored: thread a and the address have room again
	if _, err := l.Take(ctx, "a", "192.0.2.1"); err != nil {
		t.Errorf("a post to thread a after the undo: %v", err)
	}
}

// TestMemoryLimiterHeldPlaceRetriesSoon: a post refused over a full window
// in which another post is still in flight (taken, its store's answer not
// yet in) is told to retry in a second, since that place comes back if
// the store refuses the post; once every post of the window is settled
// stored, a refusal's wait is the window's (until its oldest post leaves).
// Before, it was the window's in both cases: a client honouring
// Retry-After waited up to 10 minutes for a place that came back at once.
func TestMemoryLimiterHeldPlaceRetriesSoon(t *testing.T) {
	clk := testclock.New(time.UnixMilli(1792778400000))
	l := transport.NewMemoryLimiter(chatrelay.Windows{PerThread: 2, PerIP: 100, Window: 10 * time.Minute}, clk.Now)
	ctx := context.Background()
	retry := func(ip string) time.Duration {
		t.Helper()
		_, err := l.Take(ctx, "a", ip)
		var he *chatrelay.Error
		if !errors.As(err, &he) || he.Code != chatrelay.RateLimited {
			t.Fatalf("a post over thread a's full window: %v, want rate_limited", err)
		}
		return he.Retry
	}
	first, err := l.Take(ctx, "a", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	first(true)
	clk.Advance(time.Minute)
	inFlight, err := l.Take(ctx, "a", "192.0.2.2")
	if err != nil {
		t.Fatal(err)
	}
	if got := retry("192.0.2.3"); got != time.Second {
		t.Errorf("refused while a post holds a place in flight: retry in %v, want 1s", got)
	}
	inFlight(false) // the store refused it: its place is back
	again, err := l.Take(ctx, "a", "192.0.2.3")
	if err != nil {
		t.Fatalf("a post to thread a after the post in flight was refused: %v", err)
	}
	again(true)
	if got := retry("192.0.2.4"); got != 9*time.Minute {
		t.Errorf("refused with every post of the window stored: retry in %v, want 9m (the first post leaves the window then)", got)
	}
}
