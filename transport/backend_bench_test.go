package transport_test

// Benchmarks that compare the backends: run without -race for figures,
//
//	go test -run '^$' -bench 'AppendFanout|PostFanout|CrossNode' ./transport/

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// benchBackend is a store set-up to compare: each backend as the tests
// run it (the file store without fsync, Redis without persistence) and as
// production runs it (fsync on; Redis with every write in its append-only
// file before it answers).
type benchBackend struct {
	name string
	open func(b *testing.B, opt storetest.Options) *storetest.Backend
}

var benchBackends = []benchBackend{
	{"file", func(b *testing.B, opt storetest.Options) *storetest.Backend {
		return storetest.Open(b, storetest.File, opt)
	}},
	{"file-fsync", func(b *testing.B, opt storetest.Options) *storetest.Backend {
		opt.Fsync = true
		return storetest.Open(b, storetest.File, opt)
	}},
	{"redis", func(b *testing.B, opt storetest.Options) *storetest.Backend {
		return storetest.Open(b, storetest.Redis, opt)
	}},
	{"redis-aof-always", func(b *testing.B, opt storetest.Options) *storetest.Backend {
		srv := storetest.StartServer(b, storetest.ServerOptions{Persist: true})
		return storetest.OpenRedis(b, srv, storetest.NewPrefix(), opt)
	}},
}

// BenchmarkAppendFanout: one Append on a thread at its 200-message
// retention, and the wait until the store's feed (Follow, as a node's Run
// uses it) hands the message on. One at a time, so ns/op is the whole
// round trip: store, announce, deliver.
func BenchmarkAppendFanout(b *testing.B) {
	for _, bb := range benchBackends {
		b.Run(bb.name, func(b *testing.B) {
			be := bb.open(b, storetest.Options{})
			const thread = "a1b2c3d4e5f60718"
			m := store.NewMessage{Author: chatrelay.Operator, Text: "a message of a typical length, about sixty characters long."}
			ctx := context.Background()
			for range 200 {
				if _, err := be.Store.Append(ctx, thread, m); err != nil {
					b.Fatal(err)
				}
			}
			got := make(chan int64, 1024)
			ready := make(chan struct{})
			fctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- be.Store.Follow(fctx, func(bt store.Batch) {
					if bt.Ready {
						close(ready)
					}
					for _, e := range bt.Messages {
						select {
						case got <- e.Epoch:
						default: // fn must not block; the benchmark reads every one
						}
					}
				})
			}()
			b.Cleanup(func() {
				cancel()
				<-done
			})
			<-ready
			b.ReportAllocs()
			for b.Loop() {
				e, err := be.Store.Append(ctx, thread, m)
				if err != nil {
					b.Fatal(err)
				}
				for epoch := range got {
					if epoch == e.Epoch {
						break
					}
				}
			}
		})
	}
}

// BenchmarkPostFanout: one HTTP post to a node, and the wait until each of
// n SSE subscribers of the thread on that node has it.
func BenchmarkPostFanout(b *testing.B) {
	for _, backend := range storetest.Backends() {
		for _, n := range []int{1, 100} {
			b.Run(backend+"/subscribers="+strconv.Itoa(n), func(b *testing.B) {
				e := startPush(b, pushOptions{backend: backend, streamsThread: n + 1, streamsIP: n + 1})
				tok := tokenN(1)
				e.mustPost(tok, "first")
				arrived := make(chan int64, 64*n)
				var wg sync.WaitGroup
				for range n {
					s := e.mustSSE("/api/chat/stream", tok, nil)
					if f := s.nextEvent(b); f.Event != "ready" {
						b.Fatalf("first event %q", f.Event)
					}
					s.nextEvent(b) // "first"
					wg.Go(func() {
						for {
							f, err := s.NextEvent()
							if err != nil {
								return
							}
							epoch, _ := strconv.ParseInt(f.ID, 10, 64)
							arrived <- epoch
						}
					})
				}
				b.ReportAllocs()
				for b.Loop() {
					a := e.mustPost(tok, "a message of a typical length, about sixty characters long.")
					for left := n; left > 0; {
						if <-arrived == a.Epoch {
							left--
						}
					}
				}
				b.StopTimer()
				e.stop() // ends the streams, and with them the readers
				wg.Wait()
			})
		}
	}
}

// BenchmarkCrossNodeLatency: a post on node A, timed until it arrives on a
// WebSocket on node B (both nodes on one Redis). Reports p50 and p99.
func BenchmarkCrossNodeLatency(b *testing.B) {
	_, nodes := startNodes(b, 2, pushOptions{})
	lat := crossNodeLatency(b, nodes[0], nodes[1], b.N)
	b.ReportMetric(float64(percentile(lat, 50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(lat, 99).Microseconds()), "p99-µs")
}
