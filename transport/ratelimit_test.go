package transport_test

import (
	"context"
	"testing"

	"github.com/chatrelay/chatrelay"
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
	undo() // the first post was not stored: thread a and the address have room again
	if _, err := l.Take(ctx, "a", "192.0.2.1"); err != nil {
		t.Errorf("a post to thread a after the undo: %v", err)
	}
}
