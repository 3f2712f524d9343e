package filestore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// BenchmarkCreateThreads is S1's creating post in the store alone: each
// op is the post that creates a new thread, and the threads stay (as in
// S1, where 1 000 are created among the posts), with a feed following
// the store as the server's does (its folder watch reads every event of
// the creation). It reports the creations' latency p50 and p99.
//
// The folder is a new one under $CHATRELAY_BENCH_DIR if set (e.g. a
// journaled ext4 mounted there: the figures are the file system's), else
// the test's temp folder.
func BenchmarkCreateThreads(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			dir := benchDir(b)
			s, err := OpenFile(dir, FileOptions{NoFsync: !fsync, MaxThreads: 1 << 30, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			defer followed(s, nil)()
			ctx := context.Background()
			m := store.NewMessage{Author: chatrelay.Operator, Text: "the first message of a new tab"}
			lat := make([]time.Duration, 0, 4096)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				thread := fmt.Sprintf("%016x", 1<<50+i)
				start := time.Now()
				if _, err := s.Append(ctx, thread, m); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
			b.ReportMetric(q(0.50), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
		})
	}
}

// followed starts a feed following s, as the server's does (its folder
// watch and rescan), and returns once it is ready, with the call that
// stops it and waits for its end; fn, if not nil, gets every batch.
func followed(s *File, fn func(store.Batch)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(done)
		s.Follow(ctx, func(bt store.Batch) {
			if bt.Ready {
				close(ready)
			}
			if fn != nil {
				fn(bt)
			}
		})
	}()
	select {
	case <-ready:
	case <-done: // Follow ended before it was ready (a closed store)
	}
	return func() { cancel(); <-done }
}

// benchDir is a new folder under $CHATRELAY_BENCH_DIR, removed after the
// benchmark, or the benchmark's temp folder.
func benchDir(b *testing.B) string {
	root := os.Getenv("CHATRELAY_BENCH_DIR")
	if root == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(root, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
