package transport_test

// BenchmarkPostStreams drives posts as chatbench's S2 pays them: 32
// closed-loop posters, each on its own thread with one SSE and one
// WebSocket subscriber; each post is POST /api/chat/post on a keep-alive
// connection, the store's append, the feed, the hub, and the frames
// written to the thread's two subscribers, waited for. Run without -race
// for figures:
//
//	go test -run '^$' -bench PostStreams -benchmem ./transport/
//
// allocs/op and cpu-ns/op (the process's user and system CPU time per
// post, from getrusage) count the whole process: the server's and the test
// client's (the post and the SSE read are plain socket I/O, to keep the
// client's share small and the same for every build).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/internal/storetest"
)

const benchPosters = 32

func BenchmarkPostStreams(b *testing.B) {
	for _, backend := range storetest.Backends() {
		b.Run(backend, func(b *testing.B) {
			e := startPush(b, pushOptions{backend: backend, streamsThread: 4, streamsIP: 4 * benchPosters})
			host := strings.TrimPrefix(e.ts.URL, "http://")
			var wg sync.WaitGroup
			posters := make([]func() error, benchPosters)
			var closers []func()
			for i := range posters {
				posters[i] = benchPoster(b, e, host, tokenN(100+i), &wg, &closers)
			}
			var next atomic.Int64
			b.ReportAllocs()
			// RunParallel starts parallelism × GOMAXPROCS goroutines: at
			// least one for each poster, whatever GOMAXPROCS (-cpu) is;
			// those past benchPosters leave at once, the posters being
			// not for concurrent use.
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((benchPosters + procs - 1) / procs)
			// S2's shape: the threads and their subscribers exist (their
			// creation is S1's, and BenchmarkCreateThreads's); only the
			// posts and their deliveries are on the clock.
			b.ResetTimer()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1) - 1)
				if i >= benchPosters {
					return
				}
				post := posters[i]
				for pb.Next() {
					if err := post(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			for _, c := range closers {
				c()
			}
			wg.Wait()
		})
	}
}

// benchPoster opens thread tok's SSE and WebSocket subscribers and returns
// a post that returns once both have the message. Not for concurrent use.
func benchPoster(b *testing.B, e *pushEnv, host, tok string, wg *sync.WaitGroup, closers *[]func()) func() error {
	e.mustPost(tok, "first")
	sc, err := net.Dial("tcp", host)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(sc, "GET /api/chat/stream HTTP/1.1\r\nHost: %s\r\nX-Chat-Token: %s\r\nAccept: text/event-stream\r\n\r\n", host, tok)
	sr := bufio.NewReader(sc)
	readData := func() error { // up to the next frame's data line
		for {
			line, err := sr.ReadSlice('\n')
			if err != nil {
				return err
			}
			if bytes.HasPrefix(line, []byte("data: ")) {
				return nil
			}
		}
	}
	for range 2 { // ready, then "first"
		if err := readData(); err != nil {
			b.Fatal(err)
		}
	}
	ws := e.mustWS("/api/chat/ws", tok)
	for range 2 {
		nextWS(b, ws)
	}
	arrived := make(chan struct{}, 64)
	wg.Go(func() {
		for readData() == nil {
			arrived <- struct{}{}
		}
	})
	wg.Go(func() {
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
			arrived <- struct{}{}
		}
	})
	pc, err := net.Dial("tcp", host)
	if err != nil {
		b.Fatal(err)
	}
	*closers = append(*closers, func() { pc.Close(); sc.Close(); ws.Close(websocket.StatusNormalClosure, "") })
	body := `{"text":"a message of a typical length, about sixty characters long."}`
	req := fmt.Appendf(nil, "POST /api/chat/post HTTP/1.1\r\nHost: %s\r\nX-Chat-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, tok, len(body), body)
	pr := bufio.NewReader(pc)
	return func() error {
		if _, err := pc.Write(req); err != nil {
			return err
		}
		n := -1
		for { // the answer's head
			line, err := pr.ReadSlice('\n')
			if err != nil {
				return err
			}
			if len(line) == 2 {
				break
			}
			if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
				n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
			} else if bytes.HasPrefix(line, []byte("HTTP/1.1 ")) && !bytes.HasPrefix(line, []byte("HTTP/1.1 201")) {
				return fmt.Errorf("post: %s", line)
			}
		}
		if _, err := pr.Discard(n); err != nil {
			return err
		}
		<-arrived
		<-arrived
		return nil
	}
}
