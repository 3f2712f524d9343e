package redisstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

func benchStore(b *testing.B, srv *redistest.Server) *Store {
	return benchStoreOpt(b, srv, Options{})
}

func benchStoreOpt(b *testing.B, srv *redistest.Server, o Options) *Store {
	b.Helper()
	o.Log, o.MaxThreads = slog.New(slog.NewTextHandler(io.Discard, nil)), 1<<20
	s, err := Open(b.Context(), srv.URL(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkAppend: one append (the script: store, trim, publish) through
// a loopback Redis, on a thread at its 200-message retention.
func BenchmarkAppend(b *testing.B) {
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	s := benchStore(b, srv)
	ctx := b.Context()
	const th = "a1b2c3d4e5f60718"
	m := store.NewMessage{Text: "a message of a typical length, about sixty characters long."}
	for range 200 {
		if _, err := s.Append(ctx, th, m); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		s.rdb.ConfigResetStat(ctx)
		for b.Loop() {
			if _, err := s.Append(ctx, th, m); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(scriptMicros(b, s), "redis-µs/append")
	})
	b.Run("parallel-threads", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			th := fmt.Sprintf("%016x", n.Add(1))
			for pb.Next() {
				if _, err := s.Append(ctx, th, m); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkV2: what the v2 paths cost through a loopback Redis, on a
// thread at its 200-message retention: a post with a client_id (stored
// with its v2 object and index entry, and trimming one such post), a
// reaction added or removed (a change: a read, then the compare-and-set
// script), and the v2 poll without a cursor (newest 50).
func BenchmarkV2(b *testing.B) {
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	s := benchStore(b, srv)
	ctx := b.Context()
	const th = "a1b2c3d4e5f60718"
	text := "a message of a typical length, about sixty characters long."
	var n atomic.Int64
	post := func() store.Entry {
		e, err := s.Append(ctx, th, store.NewMessage{Text: text, ClientID: "tab-1:" + strconv.FormatInt(n.Add(1), 10)})
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	var last store.Entry
	for range 200 {
		last = post()
	}
	b.Run("post-client-id", func(b *testing.B) {
		b.ReportAllocs()
		s.rdb.ConfigResetStat(ctx)
		for b.Loop() {
			last = post()
		}
		b.ReportMetric(scriptMicros(b, s), "redis-µs/append")
	})
	b.Run("react", func(b *testing.B) {
		b.ReportAllocs()
		op := store.React
		for b.Loop() {
			if _, err := s.Change(ctx, th, store.Change{Op: op, MessageID: last.ID, Emoji: "👍", By: "hermes"}); err != nil {
				b.Fatal(err)
			}
			op = map[store.ChangeOp]store.ChangeOp{store.React: store.Unreact, store.Unreact: store.React}[op]
		}
	})
	b.Run("changes", func(b *testing.B) {
		b.ReportAllocs()
		cpu := redisCPU(b, s)
		for b.Loop() {
			if p, err := s.Changes(ctx, th, 0, 50); err != nil || len(p.Messages) != 50 {
				b.Fatal(p, err)
			}
		}
		b.ReportMetric((redisCPU(b, s)-cpu)*1e6/float64(b.N), "redis-cpu-µs/poll")
	})
}

// BenchmarkSince: the poll without a cursor (newest 50 of 200). It
// reports Redis's own CPU per poll (INFO cpu, with the I/O of the call).
func BenchmarkSince(b *testing.B) {
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	s := benchStore(b, srv)
	ctx := b.Context()
	const th = "a1b2c3d4e5f60718"
	for range 200 {
		if _, err := s.Append(ctx, th, store.NewMessage{Text: "a message of a typical length, about sixty characters long."}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	cpu := redisCPU(b, s)
	for b.Loop() {
		if p, err := s.Since(ctx, th, 0, 50); err != nil || len(p.Messages) != 50 {
			b.Fatal(p, err)
		}
	}
	b.ReportMetric((redisCPU(b, s)-cpu)*1e6/float64(b.N), "redis-cpu-µs/poll")
}

// BenchmarkCrossNode: an append on node A until node B's Follow hands it
// on; reports the latency percentiles.
func BenchmarkCrossNode(b *testing.B) {
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	a, n2 := benchStore(b, srv), benchStore(b, srv)
	got := make(chan int64, 1)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n2.Follow(ctx, func(bt store.Batch) {
			if bt.Ready {
				close(ready)
			}
			for _, e := range bt.Messages {
				got <- e.Epoch
			}
		})
	}()
	defer func() { cancel(); <-done }()
	<-ready
	const th = "a1b2c3d4e5f60718"
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		e, err := a.Append(b.Context(), th, store.NewMessage{Text: "ping"})
		if err != nil {
			b.Fatal(err)
		}
		if ep := <-got; ep != e.Epoch {
			b.Fatalf("delivered %d, appended %d", ep, e.Epoch)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// scriptMicros is Redis's own time per script call (FCALL, or EVALSHA on
// a Redis without functions) since the last CONFIG RESETSTAT: the
// script's cost without the round trip.
func scriptMicros(b *testing.B, s *Store) float64 {
	cmd := "evalsha"
	if s.fcall.Load() {
		cmd = "fcall"
	}
	f := callMicros(s, cmd)
	if f == 0 {
		b.Logf("no %s in commandstats", cmd)
	}
	return f
}

// BenchmarkPost: what chatbench S2 asks of Redis per post, without the
// HTTP server: 32 posters, each post a rate window check (RateLimiter.Take,
// the limits raised as run.sh raises them) and an append to one of 1 000
// threads holding a few dozen messages (no retention trim). It reports
// Redis's own CPU per post (INFO cpu: user + system, with the I/O of the
// calls), the figure the target is about, and Redis's time per
// script call (INFO commandstats, without the I/O). "post" is the two
// calls, "limited" the one script the HTTP server runs on one Redis
// (AppendLimited). Each runs as the library's functions (fcall) and as
// scripts (evalsha, as on a Redis without functions), one after the
// other on the same Redis, so that -count alternates them.
func BenchmarkPost(b *testing.B) {
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	stores := map[string]*Store{"fcall": benchStore(b, srv), "evalsha": benchStoreOpt(b, srv, Options{evalOnly: true})}
	ctx := b.Context()
	const threads = 1000
	m := store.NewMessage{Text: strings.Repeat("x", 100)}
	for i := range threads {
		if _, err := stores["fcall"].Append(ctx, fmt.Sprintf("%016x", i), m); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	for _, c := range []struct {
		name                  string
		take, append, limited bool
	}{{"post", true, true, false}, {"take", true, false, false}, {"append", false, true, false}, {"limited", false, false, true}} {
		for _, call := range []string{"evalsha", "fcall"} {
			s := stores[call]
			rl := NewRateLimiter(s, chatrelay.Windows{PerThread: 1e9, PerIP: 1e9, Window: 10 * time.Minute})
			b.Run(c.name+"/"+call, func(b *testing.B) {
				n.Store(0)
				b.SetParallelism(16) // 16 per GOMAXPROCS: 32 posters on 2 cores
				s.rdb.ConfigResetStat(ctx)
				cpu0 := redisCPU(b, s)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						th := fmt.Sprintf("%016x", i*7919%threads)
						if c.take {
							if _, err := rl.Take(ctx, th, fmt.Sprintf("127.0.0.%d", i%8+1)); err != nil {
								b.Error(err)
								return
							}
						}
						if c.append {
							if _, err := s.Append(ctx, th, m); err != nil {
								b.Error(err)
								return
							}
						}
						if c.limited {
							if _, _, err := s.AppendLimited(ctx, rl, th, fmt.Sprintf("127.0.0.%d", i%8+1), m); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
				b.ReportMetric((redisCPU(b, s)-cpu0)*1e6/float64(n.Load()), "redis-cpu-µs/post")
				b.ReportMetric(callMicros(s, call), "redis-µs/call")
			})
		}
	}
}

// callMicros is Redis's own time per call of cmd (evalsha, fcall) since
// the last CONFIG RESETSTAT (INFO commandstats): the scripts' cost without
// the I/O.
func callMicros(s *Store, cmd string) float64 {
	info := s.rdb.Info(context.Background(), "commandstats").Val()
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
			for _, kv := range strings.Split(strings.TrimSpace(rest), ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f
				}
			}
		}
	}
	return 0
}

// redisCPU is Redis's own CPU time so far, in seconds (INFO cpu).
func redisCPU(b *testing.B, s *Store) float64 {
	info := s.rdb.Info(context.Background(), "cpu").Val()
	var sum float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// BenchmarkAppendWaitReplicas: the cost of wait-replicas=1 (replicas.go):
// appends to a Redis with one replica, without and with WAIT, serial
// (each append's latency) and from 8 goroutines per GOMAXPROCS (the batcher's
// pipelines, one WAIT each).
func BenchmarkAppendWaitReplicas(b *testing.B) {
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	srv.StartReplica(b)
	m := store.NewMessage{Text: "a message of a typical length, about sixty characters long."}
	for _, wait := range []int{0, 1} {
		s := benchStoreOpt(b, srv, Options{WaitReplicas: wait, WaitTimeout: time.Second})
		ctx := b.Context()
		b.Run(fmt.Sprintf("replicas=%d/serial", wait), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Append(ctx, "a1b2c3d4e5f60718", m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("replicas=%d/parallel", wait), func(b *testing.B) {
			var n atomic.Int64
			b.SetParallelism(8) // 8 goroutines per GOMAXPROCS: 16 on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				th := fmt.Sprintf("a1b2c3d4e5f6%04x", n.Add(1))
				for pb.Next() {
					if _, err := s.Append(ctx, th, m); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "posts/s")
		})
	}
}
