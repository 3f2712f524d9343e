package filestore

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// BenchmarkPostS2 is chatbench's S2 in the store alone, with the default
// layout (no append log) and --fsync never: 32 closed-loop posters
// append to random threads among 1 000 that already hold 30 messages
// each (S1 made them), with a feed following the store as the server's
// does (its folder watch reads every event of every write, and its
// rescan stats every thread). Put its folder on a tmpfs
// (CHATRELAY_BENCH_DIR=/dev/shm/x) for the tmpfs figures:
//
//	CHATRELAY_BENCH_DIR=/dev/shm go test -run '^$' -bench PostS2 -benchmem ./store/filestore/
//
// cpu-ns/op is the process's user and system CPU time per post
// (getrusage), which counts the feed's work and the kernel's as the
// server's CPU per post does.
func BenchmarkPostS2(b *testing.B) {
	const threads, stored, posters = 1000, 30, 32
	dir := benchDir(b)
	s, err := OpenFile(dir, FileOptions{NoFsync: true, MaxThreads: 1 << 30, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	defer followed(s, nil)() // the feed's work is the server's, counted in cpu-ns/op
	ctx := context.Background()
	// 100-byte texts, as chatbench's.
	text := strings.Repeat("x", 100)
	names := make([]string, threads)
	for i := range names {
		names[i] = fmt.Sprintf("%016x", 1<<52+i)
		for range stored {
			if _, err := s.Append(ctx, names[i], store.NewMessage{Author: chatrelay.Operator, Text: text}); err != nil {
				b.Fatal(err)
			}
		}
	}
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((posters + procs - 1) / procs)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		if next.Add(1) > posters {
			return
		}
		r := rand.New(rand.NewPCG(uint64(next.Load()), 1))
		for pb.Next() {
			m := store.NewMessage{Author: chatrelay.Operator, Text: text}
			if _, err := s.Append(ctx, names[r.IntN(threads)], m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
