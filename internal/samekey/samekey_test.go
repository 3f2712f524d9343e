package samekey_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/samekey"
)

// TestOneAtATime: of the holders of one key, one is in at a time (a
// holder of another key is not held up), and a holder whose context ends
// while it waits goes on beside it.
func TestOneAtATime(t *testing.T) {
	var k samekey.Keys
	var mu sync.Mutex
	in, most := 0, 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			leave := k.Enter(context.Background(), samekey.Key{"a"})
			mu.Lock()
			in++
			most = max(most, in)
			mu.Unlock()
			for range 10 {
				runtime.Gosched() // others run meanwhile: none of key "a" may come in
			}
			mu.Lock()
			in--
			mu.Unlock()
			leave()
		})
	}
	wg.Wait()
	assert.Equal(t, "most holders of one key in at once", most, 1)

	leaveA := k.Enter(context.Background(), samekey.Key{"a"})
	k.Enter(context.Background(), samekey.Key{"b"})() // another key: in at once
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k.Enter(ctx, samekey.Key{"a"})() // its context ended: goes on beside the holder
	assert.Equal(t, "waiting for key a after a caller whose context ended", k.Waiting(samekey.Key{"a"}), 0)

	entered := make(chan struct{})
	go func() {
		k.Enter(context.Background(), samekey.Key{"a"})() // waits for leaveA
		close(entered)
	}()
	assert.Eventually(t, 10*time.Second, "a second holder of key a waiting", func() bool { return k.Waiting(samekey.Key{"a"}) == 1 })
	select {
	case <-entered:
		t.Fatal("a second holder of key a came in while the first was in")
	default:
	}
	leaveA()
	select { // left: the waiting one comes in
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting holder of key a did not come in within 10 s of the first's leaving")
	}
	assert.Equal(t, "waiting for key a once its holder left", k.Waiting(samekey.Key{"a"}), 0)
}

// BenchmarkEnter is what a post with a client_id pays when no other post
// of its key runs (the usual case): go test -bench Enter -benchmem.
func BenchmarkEnter(b *testing.B) {
	var k samekey.Keys
	ctx := context.Background()
	key := samekey.Key{"52b6419d27bd7f54", "tab-7f3:41"}
	b.ReportAllocs()
	for b.Loop() {
		k.Enter(ctx, key)()
	}
}
