package transport_test

// The Web Push benchmark: run without -race for figures,
//
//	TMPDIR=/dev/shm go test -run '^$' -bench WebPush -benchtime 10x -timeout 10m ./transport/
//
// (10 rounds: a p99 of 10 000 posts a phase; on a shared machine 3 rounds
// swing too much to compare). CHATRELAY_PUSHTEST_NICE=0 runs the push
// service at the test's CPU priority rather than in SCHED_IDLE (=19: at
// nice 19, as the figures before 2026-12-05 had it).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

const (
	benchPushThreads = 200 // threads, each with benchPushSubs of its owner's subscriptions
	benchPushSubs    = 5
	benchPushPosters = 4    // clients posting at once
	benchPushPosts   = 1000 // posts per phase; an approval opens after every fifth
	// benchPushRate paces the posts (per second, all clients together), as
	// chatbench's S1 does: a latency is measured at a load the server
	// carries, not at saturation, where any other work (a push's
	// encryption) lengthens every queue. A phase lasts 2 s.
	benchPushRate = 500
)

// BenchmarkWebPush: 1 000 subscriptions across 200 threads (5 each, the
// owner's), on each store. The push service is internal/pushtest in a
// process of its own (this test binary run again: TestPushServiceProcess),
// on 127.0.0.1, HTTPS with HTTP/2 offered, as FCM or Mozilla's autopush
// run on machines of their own: it decrypts every push with its
// subscription's private keys and verifies its VAPID JWT, after each
// round's "on" phase (it keeps the pushes as received until asked: its
// checking is not to take the server's cores on the clock), and its CPU
// is not this process's. Each round runs two phases with the same load, push
// off and push on: 4 clients make 1 000 posts over HTTP, from a process
// of their own (TestPosterProcess: in this one their goroutines took the
// server's Ps; CHATRELAY_BENCH_POSTERS=inprocess puts them back), round
// robin across the threads, paced at 500 posts/s in all (as chatbench's S1:
// latency at a load the server carries; late-posts counts those that
// started more than a millisecond after their time), and after every fifth post the host opens an
// approval in the next thread (store.Append, as `chatrelay ask` does), so
// the 200 approvals — 1 000 pushes with push on — are spread across the
// posts. The "off" server is a second server on a store of the same kind,
// set up the same way, with no push config. It reports:
//
//   - p99-ms-off, p99-ms-on, p99-ratio: posts' round trip p99 in each phase;
//   - p99-ratio-aa: the off phases' p99 of the odd rounds over that of the
//     even rounds: the same condition twice, the noise p99-ratio is read
//     beside (a ratio within it is no change);
//   - sched-p99-us-off, -on, sched-p999-us-off, -on: the 99th and 99.9th
//     percentiles of the runtime's /sched/latencies:seconds over each
//     phase (how long a goroutine of this process, the server's (or the
//     clients', in this process), waited runnable for a P before it ran; the upper bound of
//     the histogram's bucket): a figure that the round trips' own noise
//     (the kernel's, the loopback's) does not move;
//   - pushes, lost, repeated, retried: per (subscription, approval), the
//     pushes the push service received, decrypted and verified; the
//     benchmark fails unless every one arrived exactly once;
//   - push-p50-ms, push-p99-ms: from the start of the approval's write
//     (the Append call) to the push service's receipt of each push;
//   - cpu-us/push: this process's CPU time (getrusage: user + system) of
//     the "on" phase, less the "off" phase's, per push: the server's
//     share of a push, the pusher's (the host's writes are the same in
//     both phases);
//   - B/push, allocs/push: this process's heap allocations (bytes, and
//     objects) of the "on" phase, less the "off" phase's, per push: the
//     garbage a push leaves, which the posts' time pays to collect;
//   - gc-cycles/kpost-off, -on, gc-ms/kpost-, gc-assist-ms/kpost-: the
//     collector's cycles, its CPU and, of that, its assists (the
//     runtime's estimates, runtime/metrics' /cpu/classes/gc/...), each
//     per 1 000 posts of the phase; gc-share-: the collector's CPU over
//     this process's in the phase; gc-pause-p50-us-, gc-pause-max-us-:
//     its stop-the-world pauses (/sched/pauses/total/gc); gc-us/push:
//     the collector's CPU of the "on" phase less the "off" phase's, per
//     push, the collector's part of cpu-us/push;
//   - svc-us/push: the push service process's CPU per push in the "on"
//     phase (its TLS and HTTP/2; it keeps each push as received), and
//     svc-check-us/push, its CPU after the phase, when the benchmark asks
//     for the pushes and it decrypts and verifies each (and encodes them
//     all for the answer): on this one machine a push service's checking
//     is not to run beside the server on the clock;
//   - conns: the connections the pusher opened to the push service, in
//     all (one HTTP/2 connection, kept alive, is what it should take);
//   - pusher-us/push: with CHATRELAY_BENCH_PUSHER=process, where another
//     process in SCHED_IDLE sends the pushes and the "on" server sends
//     none (webpush_sender_bench_test.go), that process's CPU per push
//     (cpu-us/push is then the serving process's alone).
//
// Nothing is warmed: the pusher's first TLS connection to the push
// service is made in the first round's "on" phase, on the clock.
func BenchmarkWebPush(b *testing.B) {
	for _, backend := range storetest.Backends() {
		b.Run(backend, func(b *testing.B) {
			svc := pushtest.StartRemote(b, "TestPushServiceProcess")
			var posters *poster // in this process with CHATRELAY_BENCH_POSTERS=inprocess (the figures before 2026-12-05)
			if os.Getenv("CHATRELAY_BENCH_POSTERS") != "inprocess" {
				posters = startPoster(b)
			}
			inProcess := os.Getenv(pusherModeEnv) != "process"
			on := startPush(b, pushOptions{backend: backend, config: withPushTo(svc.Certificate(), func(pc *transport.PushConfig) {
				pc.NoSend = !inProcess // another process sends
			})})
			off := startPush(b, pushOptions{backend: backend})
			for i := range benchPushThreads {
				tok := tokenN(i)
				on.mustPost(tok, "hello")
				off.mustPost(tok, "hello")
				for s := range benchPushSubs {
					if status, a := on.subscribe(tok, nil, svc.Subscribe(b, fmt.Sprintf("t%d-s%d", i, s))); status != http.StatusCreated {
						b.Fatalf("subscribe: %d %+v", status, a)
					}
				}
			}
			metrics := on.url("/metrics") // where the pushes sent are counted
			var sender *pushSender
			if !inProcess {
				sender = startPushSender(b, on, svc.Certificate())
				metrics = sender.url + "/metrics"
			}
			var pusherCPU time.Duration
			var offLat, onLat, pushLat []time.Duration
			var offHalves [2][]time.Duration // the off phases of even and of odd rounds
			var offCPU, onCPU, svcCPU, svcCheck time.Duration
			var offMem, onMem benchMem
			var offSched, onSched benchSched
			var offGC, onGC benchGC
			var pushes, lost, repeated, retried, received int
			var conns int64
			b.ResetTimer()
			for round := range b.N {
				mem0, sched0, gc0 := readBenchMem(), readBenchSched(), readBenchGC()
				lat, cpu, _ := benchPushPhase(b, off, posters, round, nil)
				offGC = offGC.add(readBenchGC().sub(gc0))
				offMem, offSched = offMem.add(readBenchMem().sub(mem0)), offSched.add(readBenchSched().sub(sched0))
				offLat, offCPU = append(offLat, lat...), offCPU+cpu
				offHalves[round%2] = append(offHalves[round%2], lat...)
				sentBefore := benchScrape(b, on.client, metrics, "sent")
				retriedBefore := benchScrape(b, on.client, metrics, "retried")
				svc0, _ := svc.CPU(b)
				var pusher0 time.Duration
				if sender != nil {
					pusher0 = sender.cpu(b)
				}
				target := received + benchPushThreads*benchPushSubs
				mem0, sched0, gc0 = readBenchMem(), readBenchSched(), readBenchGC()
				lat, cpu, opened := benchPushPhase(b, on, posters, round, func() bool {
					// Until the push service received this round's pushes
					// (it answers when it has them: no polling on the clock).
					return svc.Wait(b, target, 60*time.Second) >= target
				})
				onGC = onGC.add(readBenchGC().sub(gc0))
				onMem, onSched = onMem.add(readBenchMem().sub(mem0)), onSched.add(readBenchSched().sub(sched0))
				// None is still being tried: the pusher counted each sent
				// (a lost push fails here; a repeated one is counted below).
				deadline := time.Now().Add(10 * time.Second)
				for benchScrape(b, on.client, metrics, "sent")-sentBefore < benchPushThreads*benchPushSubs {
					if time.Now().After(deadline) {
						b.Fatalf("%v of %d pushes sent", benchScrape(b, on.client, metrics, "sent")-sentBefore, benchPushThreads*benchPushSubs)
					}
					time.Sleep(10 * time.Millisecond) // polls the condition
				}
				svc1, c := svc.CPU(b)
				if sender != nil {
					pusherCPU += sender.cpu(b) - pusher0
				}
				svcCPU, conns = svcCPU+svc1-svc0, c
				onLat, onCPU = append(onLat, lat...), onCPU+cpu
				// Every push of this round's approvals, once.
				got := map[string]int{}
				all := svc.Pushes(b) // decrypted and verified there now, off the clock
				svc2, _ := svc.CPU(b)
				svcCheck += svc2 - svc1
				received = len(all)
				for _, p := range all {
					if p.Err != nil {
						b.Fatalf("a push that does not decrypt or verify: %v", p.Err)
					}
					var pl payload
					if err := json.Unmarshal(p.Plain, &pl); err != nil {
						b.Fatal(err)
					}
					if pl.Type != chatrelay.PushTypeInteraction || pl.Message.Interaction == nil {
						continue
					}
					start, ok := opened[pl.Message.Interaction.ID]
					if !ok {
						continue // an earlier round's
					}
					got[p.Path+" "+pl.Message.Interaction.ID]++
					pushLat = append(pushLat, p.At.Sub(start))
				}
				want := benchPushThreads * benchPushSubs
				n := 0
				for _, c := range got {
					n += c
					if c > 1 {
						repeated += c - 1
					}
				}
				pushes += n
				lost += want - len(got)
				retried += int(benchScrape(b, on.client, metrics, "retried") - retriedBefore)
			}
			b.StopTimer()
			p99off, p99on := benchP(offLat, 99), benchP(onLat, 99)
			b.ReportMetric(benchMS(p99off), "p99-ms-off")
			b.ReportMetric(benchMS(p99on), "p99-ms-on")
			b.ReportMetric(float64(p99on)/float64(p99off), "p99-ratio")
			if b.N > 1 {
				// The same load twice, push off both times: how far two
				// halves of one condition differ here, beside which
				// p99-ratio is read.
				b.ReportMetric(float64(benchP(offHalves[1], 99))/float64(benchP(offHalves[0], 99)), "p99-ratio-aa")
			}
			b.ReportMetric(benchUS(offSched.quantile(0.99)), "sched-p99-us-off")
			b.ReportMetric(benchUS(onSched.quantile(0.99)), "sched-p99-us-on")
			b.ReportMetric(benchUS(offSched.quantile(0.999)), "sched-p999-us-off")
			b.ReportMetric(benchUS(onSched.quantile(0.999)), "sched-p999-us-on")
			b.ReportMetric(benchMS(benchP(offLat, 50)), "p50-ms-off")
			b.ReportMetric(benchMS(benchP(onLat, 50)), "p50-ms-on")
			b.ReportMetric(float64(pushes), "pushes")
			b.ReportMetric(float64(lost), "lost")
			b.ReportMetric(float64(repeated), "repeated")
			b.ReportMetric(float64(retried), "retried")
			b.ReportMetric(benchMS(benchP(pushLat, 50)), "push-p50-ms")
			b.ReportMetric(benchMS(benchP(pushLat, 99)), "push-p99-ms")
			b.ReportMetric(float64(onCPU-offCPU)/float64(time.Microsecond)/float64(max(pushes, 1)), "cpu-us/push")
			b.ReportMetric(float64(int64(onMem.bytes)-int64(offMem.bytes))/float64(max(pushes, 1)), "B/push")
			b.ReportMetric(float64(int64(onMem.objects)-int64(offMem.objects))/float64(max(pushes, 1)), "allocs/push")
			offGC.report(b.ReportMetric, "off", b.N*benchPushPosts)
			onGC.report(b.ReportMetric, "on", b.N*benchPushPosts)
			b.ReportMetric(float64(onGC.gc-offGC.gc)/float64(time.Microsecond)/float64(max(pushes, 1)), "gc-us/push")
			b.ReportMetric(float64(svcCPU)/float64(time.Microsecond)/float64(max(pushes, 1)), "svc-us/push")
			b.ReportMetric(float64(svcCheck)/float64(time.Microsecond)/float64(max(pushes, 1)), "svc-check-us/push")
			if sender != nil {
				b.ReportMetric(float64(pusherCPU)/float64(time.Microsecond)/float64(max(pushes, 1)), "pusher-us/push")
			}
			b.ReportMetric(float64(conns), "conns")
			b.ReportMetric(float64(benchLate.Swap(0)), "late-posts")
			b.ReportMetric(0, "ns/op")
			if lost != 0 || repeated != 0 {
				b.Fatalf("%d pushes lost, %d repeated (of %d)", lost, repeated, b.N*benchPushThreads*benchPushSubs)
			}
		})
	}
}

// TestPushServiceProcess is the push service process of BenchmarkWebPush
// (pushtest.StartRemote runs this binary again with only this test, and
// pushtest.ServeEnv set); without it, it does nothing.
func TestPushServiceProcess(t *testing.T) {
	if os.Getenv(pushtest.ServeEnv) == "" {
		t.Skip("the push service process of BenchmarkWebPush")
	}
	pushtest.ServeProcess()
}

// benchPushPhase makes benchPushPosts posts from benchPushPosters clients
// on e, opening an approval after every fifth, then waits for done (if
// any: until every push arrived). It returns the posts' round trips, the
// process CPU time of the phase (to done), and when each approval's write
// started, by interaction id. The clients are the poster process's, p
// (the approvals are this process's, at the time of every fifth post), or
// this process's goroutines if p is nil.
func benchPushPhase(b *testing.B, e *pushEnv, p *poster, round int, done func() bool) ([]time.Duration, time.Duration, map[string]time.Time) {
	if p != nil {
		cpu0 := processCPU()
		opened := map[string]time.Time{}
		p.phase(b, posterPhase{URL: e.url(""), Posts: benchPushPosts, Threads: benchPushThreads, Workers: benchPushPosters, Rate: benchPushRate})
		begin := time.Now()
		for i := range benchPushPosts / 5 {
			if wait := time.Until(begin.Add(time.Duration(5*i+4) * time.Second / benchPushRate)); wait > 0 {
				time.Sleep(wait) // the approval's time: pacing, not a condition
			}
			start := time.Now()
			m, err := e.store.Append(context.Background(), threadN(i), store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
				Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: fmt.Sprintf("Deploy build %d of round %d?", i, round), Timeout: time.Hour}})
			if err != nil {
				b.Fatal(err)
			}
			opened[m.Interaction.ID] = start
		}
		lat := p.result(b)
		if done != nil && !done() {
			b.Fatalf("the pushes did not all arrive within 60s")
		}
		return lat, processCPU() - cpu0, opened
	}
	var mu sync.Mutex
	var lat []time.Duration
	opened := map[string]time.Time{}
	var next atomic.Int64
	cpu0 := processCPU()
	begin := time.Now()
	var wg sync.WaitGroup
	for range benchPushPosters {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for {
				n := int(next.Add(1)) - 1
				if n >= benchPushPosts {
					return
				}
				at := begin.Add(time.Duration(n) * time.Second / benchPushRate)
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait) // the post's time: pacing, not a condition
				} else if -wait > time.Millisecond {
					benchLate.Add(1)
				}
				d, err := benchPostURL(e.client, e.url(""), tokenN(n%benchPushThreads))
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, d)
				if n%5 != 4 {
					continue
				}
				i := n / 5
				start := time.Now()
				m, err := e.store.Append(context.Background(), threadN(i), store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
					Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: fmt.Sprintf("Deploy build %d of round %d?", i, round), Timeout: time.Hour}})
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				opened[m.Interaction.ID] = start
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	if done != nil && !done() {
		b.Fatalf("the pushes did not all arrive within 60s")
	}
	return lat, processCPU() - cpu0, opened
}

// benchLate counts the posts of a run that started late (past their
// time by more than a millisecond): the clients could not keep the pace.
var benchLate atomic.Int64

// benchPostURL posts a message of a typical length through c to the
// server at base (its URL) as token's owner and returns the round trip.
func benchPostURL(c *http.Client, base, token string) (time.Duration, error) {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, base+chatrelay.PathPost, strings.NewReader(`{"text":"a message of a typical length, about sixty characters long."}`))
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("post: %d", resp.StatusCode)
	}
	return time.Since(start), nil
}

// benchScrape reads chatrelay_push_total{result} from metrics (a
// server's /metrics URL) through c.
func benchScrape(b *testing.B, c *http.Client, metrics, result string) float64 {
	resp, err := c.Get(metrics)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	want := `chatrelay_push_total{result="` + result + `"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("no %s on /metrics", strings.TrimSpace(want))
	return 0
}

// benchMem is heap allocations: bytes and objects.
type benchMem struct{ bytes, objects uint64 }

// readBenchMem is this process's heap allocations so far.
func readBenchMem() benchMem {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return benchMem{m.TotalAlloc, m.Mallocs}
}

func (m benchMem) add(o benchMem) benchMem { return benchMem{m.bytes + o.bytes, m.objects + o.objects} }
func (m benchMem) sub(o benchMem) benchMem { return benchMem{m.bytes - o.bytes, m.objects - o.objects} }

// processCPU is this process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchP is the p-th percentile of d.
func benchP(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)*p/100, len(s)-1)]
}

func benchMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
