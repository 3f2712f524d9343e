package lane_test

import (
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/lane"
)

// TestRunPanics: a panic in the work Run runs is raised again in Run's
// caller, and the lane goes on running work.
func TestRunPanics(t *testing.T) {
	l := lane.New(1)
	func() {
		defer func() {
			assert.Equal(t, "the panic", recover(), any("the work's"))
		}()
		l.Run(func() { panic("the work's") })
		t.Fatal("Run returned after its work panicked")
	}()
	ran := false
	l.Run(func() { ran = true })
	assert.True(t, ran, "work after a panic did not run")
}

// TestLowThreadsEnd: Run keeps as many low threads as pieces run at
// once, and a thread left without work ends.
func TestLowThreadsEnd(t *testing.T) {
	l := lane.New(1)
	release := make(chan struct{})
	var started, wg sync.WaitGroup
	started.Add(3)
	for range 3 {
		wg.Go(func() {
			l.Run(func() {
				started.Done()
				<-release
			})
		})
	}
	started.Wait()
	assert.Equal(t, "low threads, three pieces at once", l.Lows(), 3)
	close(release)
	wg.Wait()
	for range 20 {
		l.Run(func() {}) // one at a time: the threads waiting take them
	}
	assert.True(t, l.Lows() <= 3, "%d low threads after pieces one at a time", l.Lows())
	assert.Eventually(t, 10*time.Second, "the idle low threads end", func() bool { return l.Lows() == 0 })
}

// BenchmarkRun: what handing a piece to a low thread costs beside the
// piece itself: an empty piece, and a 256 KiB chunk's SHA-256 (an
// upload's piece) in place and through Run. Read ns/op beside the CPU the
// run took (time's user + sys): the hand-off is mostly the kernel's.
func BenchmarkRun(b *testing.B) {
	chunk := make([]byte, 256<<10)
	h := sha256.New()
	hash := func() { h.Write(chunk) }
	b.Run("empty", func(b *testing.B) {
		l := lane.New(1)
		for b.Loop() {
			l.Run(func() {})
		}
	})
	b.Run("chunk-in-place", func(b *testing.B) {
		b.SetBytes(int64(len(chunk)))
		for b.Loop() {
			hash()
		}
	})
	b.Run("chunk-run", func(b *testing.B) {
		l := lane.New(1)
		b.SetBytes(int64(len(chunk)))
		for b.Loop() {
			l.Run(hash)
		}
	})
}
