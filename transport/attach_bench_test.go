package transport_test

// The attachments benchmark: run without -race for figures, with TMPDIR
// on the disk the file store would use (docs/performance.md),
//
//	go test -run '^$' -bench 'PostsWhileUploading' -benchtime 200x ./transport/
//	go test -run '^$' -bench 'UploadHeap' -benchtime 40x ./transport/
//
// (UploadHeap's fresh uploads store 10 MiB each: 40 take 400 MiB.)

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// patternReader yields n bytes of a repeating pattern without holding
// them: the client costs no 10 MiB per upload either.
type patternReader struct{ left int64 }

// pattern is what patternReader repeats.
var pattern = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i * 31)
	}
	return b
}()

func (r *patternReader) Read(b []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(int64(len(b)), r.left)], pattern)
	r.left -= int64(n)
	return n, nil
}

// freshReader yields n bytes that no other upload of the run has: the
// pattern, after the upload's number k.
func freshReader(k int64, n int64) io.Reader {
	return io.MultiReader(strings.NewReader(fmt.Sprintf("%016d", k)), &patternReader{left: n - 16})
}

// benchStore is the store of the benchmarks: the file store fsyncs as in
// production (--fsync=always), not as the tests do.
var benchStore = storetest.Options{Fsync: true}

// BenchmarkUploadHeap: concurrent 10 MiB uploads over HTTP into the file
// store and into Redis. It reports the server's (and the in-process
// client's) peak heap above the idle heap, per concurrent upload
// (heap-B/upload: a file read whole into memory would cost 10 MiB here),
// and uploads/s, for two kinds of upload: "duplicate", each worker
// uploading the same bytes into a thread of its own (stored once there
// before the clock starts: each upload is received, hashed and dropped),
// and "fresh", bytes no upload had before, each into a thread of its own
// (received, hashed and stored). No post names the uploads: a duplicate
// worker's thread takes attachment.pending of them, so -benchtime stays
// under 8×99 (uploads past it would be refused).
func BenchmarkUploadHeap(b *testing.B) {
	const concurrent = 8
	size := int64(chatrelay.LimitAttachmentBytes.Max)
	for _, backend := range storetest.Backends() {
		for _, kind := range []string{"duplicate", "fresh"} {
			b.Run(backend+"/"+kind, func(b *testing.B) {
				e := startPush(b, pushOptions{backend: backend, store: benchStore})
				upload := func(tok string, body io.Reader) {
					req, _ := http.NewRequest(http.MethodPost, e.url(chatrelay.PathAttachments), body)
					req.ContentLength = size
					req.Header.Set("X-Chat-Token", tok)
					req.Header.Set("X-Filename", "big.bin")
					resp, err := e.client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						b.Errorf("upload: %d", resp.StatusCode)
					}
				}
				if kind == "duplicate" {
					for w := range concurrent { // the bytes are stored once per thread before the clock starts
						upload(tokenN(1000+w), &patternReader{left: size})
					}
				}
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				base := ms.HeapInuse
				var peak atomic.Uint64
				stop := make(chan struct{})
				sampled := make(chan struct{})
				go func() {
					defer close(sampled)
					t := time.NewTicker(2 * time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-stop:
							return
						case <-t.C:
							var m runtime.MemStats
							runtime.ReadMemStats(&m)
							if m.HeapInuse > peak.Load() {
								peak.Store(m.HeapInuse)
							}
						}
					}
				}()
				var next atomic.Int64
				start := time.Now()
				b.ResetTimer()
				var wg sync.WaitGroup
				for w := range concurrent {
					wg.Go(func() {
						for {
							k := next.Add(1)
							if k > int64(b.N) {
								return
							}
							if kind == "duplicate" {
								upload(tokenN(1000+w), &patternReader{left: size})
							} else {
								upload(tokenN(int(100000+k)), freshReader(k, size))
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				elapsed := time.Since(start)
				close(stop)
				<-sampled
				over := int64(peak.Load()) - int64(base)
				b.ReportMetric(float64(max(over, 0))/concurrent, "heap-B/upload")
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "uploads/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkPostsWhileUploading: the p99 of a post's round trip, alone and
// then (in the same run) while 4 clients upload 10 MiB files without a
// pause, on each store: uploads must not hold posts up. The uploading
// clients run in a process of their own in SCHED_IDLE (startUploaders), as
// on machines of their own; the server's side of every upload (reading,
// hashing, storing) is this process's, at the posts' priority. The busy phase
// starts once every uploader has finished an upload and lasts until 8
// more have gone through. Both phases pay
// the same: each posts into a thread of its own that its first post
// creates, through a client of its own that its first post connects.
// The uploads go to the busy phase's thread (its lock is the posts'),
// the same bytes each time (a thread holds 100 MiB at most): each is
// received, hashed, fsynced and dropped at the commit, and then named in
// a post by its uploader, as a real client does (a thread holds at most
// attachment.pending uploads no post names: uploads never named would be
// refused past it); those posts go to the busy thread too. After the uploads
// stop, posts alone again into a third new thread: p99-ratio-aa, its p99
// over the first's, is the noise of the same condition measured twice,
// beside which p99-ratio (uploading over alone) is read. sched-p99-us-*
// and sched-p999-us-* are the percentiles of the runtime's
// /sched/latencies:seconds in each phase (alone, uploading, again): how
// long the process's goroutines waited runnable for a P. gc-*-alone,
// -uploading, -again are the collector's figures of each phase (as
// BenchmarkWebPush's: cycles, CPU and assists per 1 000 posts, share of
// the process's CPU, pauses); B/upload, gc-ms/upload and cpu-ms/upload
// are the uploading phase's heap allocations, collector's CPU and process
// CPU less its posts' (the alone phase's per post), per upload.
func BenchmarkPostsWhileUploading(b *testing.B) {
	const uploaders = 4
	size := int64(chatrelay.LimitAttachmentBytes.Max)
	for _, backend := range storetest.Backends() {
		b.Run(backend, func(b *testing.B) {
			e := startPush(b, pushOptions{backend: backend, store: benchStore})
			post := func(c *http.Client, tok string) time.Duration {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, e.url(chatrelay.PathPost), strings.NewReader(`{"text":"a message of a typical length, about sixty characters long."}`))
				req.Header.Set("X-Chat-Token", tok)
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("post: %d", resp.StatusCode)
				}
				return time.Since(start)
			}
			// p99 posts into the new thread of tok through a new client,
			// while more(i) (i posts made) holds.
			// sched is the /sched/latencies of the last phase p99 measured.
			var sched benchSched
			var gc benchGC // and the collector's work in it, and its posts
			var posts int
			p99 := func(tok string, more func(i int) bool) float64 {
				sched0, gc0 := readBenchSched(), readBenchGC()
				defer func() { sched, gc = readBenchSched().sub(sched0), readBenchGC().sub(gc0) }()
				tr := &http.Transport{}
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr}
				var d []time.Duration
				for i := 0; more(i); i++ {
					d = append(d, post(c, tok))
				}
				slices.Sort(d)
				posts = len(d)
				return float64(d[len(d)*99/100]) / float64(time.Millisecond)
			}
			n := max(b.N, 100)
			// The posting client is the poster process's (as the people
			// posting are on machines of their own: in this process its
			// goroutines took the server's Ps), or this process's with
			// CHATRELAY_BENCH_POSTERS=inprocess (the figures before
			// 2026-12-05). Its phases are n posts each (and, while more
			// holds, 100 more at a time), closed loop, through a client of
			// their own.
			if os.Getenv("CHATRELAY_BENCH_POSTERS") != "inprocess" {
				pst := startPoster(b)
				p99 = func(tok string, more func(i int) bool) float64 {
					sched0, gc0 := readBenchSched(), readBenchGC()
					defer func() { sched, gc = readBenchSched().sub(sched0), readBenchGC().sub(gc0) }()
					first := map[string]int{tokenN(1): 1, tokenN(2): 2, tokenN(3): 3}[tok]
					pst.phase(b, posterPhase{URL: e.url(""), Posts: n, First: first, Threads: 1, Workers: 1, NewClient: true})
					d := pst.result(b)
					for more(len(d)) { // the busy phase's uploads not all through yet: 100 posts more, on the same client
						pst.phase(b, posterPhase{URL: e.url(""), Posts: 100, First: first, Threads: 1, Workers: 1})
						d = append(d, pst.result(b)...)
					}
					slices.Sort(d)
					posts = len(d)
					return float64(d[len(d)*99/100]) / float64(time.Millisecond)
				}
			}
			b.ResetTimer()
			alone := p99(tokenN(1), func(i int) bool { return i < n })
			aloneSched, aloneGC, alonePosts := sched, gc, posts
			busyTok := tokenN(2)
			var uploads atomic.Int64
			stop := startUploaders(b, uploaderJob{URL: e.url(chatrelay.PathAttachments), Post: e.url(chatrelay.PathPost), Token: busyTok, Size: size, Workers: uploaders}, &uploads)
			// Posts once every uploader is under way (an upload done each),
			// n at least, and until the uploads of the phase have gone
			// through every step (received, fsynced, committed) twice each.
			waitUnderWay(b, &uploads, uploaders)
			start, before := time.Now(), uploads.Load()
			busy := p99(busyTok, func(i int) bool { return i < n || uploads.Load()-before < 2*uploaders && !b.Failed() })
			elapsed, done := time.Since(start), uploads.Load()-before
			busySched, busyGC, busyPosts := sched, gc, posts
			stop()
			// Alone again, once the uploads stopped: the same condition
			// twice, the noise p99-ratio is read beside.
			again := p99(tokenN(3), func(i int) bool { return i < n })
			b.StopTimer()
			b.ReportMetric(alone, "p99-ms-alone")
			b.ReportMetric(busy, "p99-ms-uploading")
			b.ReportMetric(busy/alone, "p99-ratio")
			b.ReportMetric(again/alone, "p99-ratio-aa")
			b.ReportMetric(float64(done)/elapsed.Seconds(), "uploads/s")
			b.ReportMetric(benchUS(aloneSched.quantile(0.99)), "sched-p99-us-alone")
			b.ReportMetric(benchUS(busySched.quantile(0.99)), "sched-p99-us-uploading")
			b.ReportMetric(benchUS(sched.quantile(0.99)), "sched-p99-us-again")
			b.ReportMetric(benchUS(aloneSched.quantile(0.999)), "sched-p999-us-alone")
			b.ReportMetric(benchUS(busySched.quantile(0.999)), "sched-p999-us-uploading")
			b.ReportMetric(benchUS(sched.quantile(0.999)), "sched-p999-us-again")
			aloneGC.report(b.ReportMetric, "alone", alonePosts)
			busyGC.report(b.ReportMetric, "uploading", busyPosts)
			gc.report(b.ReportMetric, "again", posts)
			// The uploads' share of the busy phase: less its posts', at
			// the alone phase's cost per post.
			k := float64(busyPosts) / float64(max(alonePosts, 1))
			perUpload := func(busy, alone float64) float64 { return (busy - alone*k) / float64(max(done, 1)) }
			b.ReportMetric(perUpload(float64(busyGC.bytes), float64(aloneGC.bytes)), "B/upload")
			b.ReportMetric(perUpload(benchMS(busyGC.gc), benchMS(aloneGC.gc)), "gc-ms/upload")
			b.ReportMetric(perUpload(benchMS(busyGC.cpu), benchMS(aloneGC.cpu)), "cpu-ms/upload")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// lastByteReader is a body that notes when its last byte was read.
type lastByteReader struct {
	r    io.Reader
	last time.Time
}

func (r *lastByteReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if err == io.EOF {
		r.last = time.Now()
	}
	return n, err
}

// BenchmarkDuplicateAnswerWhileUploading: the time from a duplicate
// upload's last byte (256 KiB, one chunk, bytes its thread holds) to its
// answer, while 4 uploaders keep the background lane busy with 10 MiB
// uploads, on the file store (the store with temp files). Its p50 and
// p99 in ms; -benchtime at most 90x (the thread's pending uploads).
func BenchmarkDuplicateAnswerWhileUploading(b *testing.B) {
	const uploaders = 4
	e := startPush(b, pushOptions{backend: storetest.File, store: benchStore})
	tok := tokenN(1)
	const size = 256 << 10
	body := func() io.Reader { return &patternReader{left: size} }
	data, _ := io.ReadAll(body())
	e.mustUpload(tok, "dup.bin", "application/octet-stream", data)
	var uploads atomic.Int64
	stop := startUploaders(b, uploaderJob{URL: e.url(chatrelay.PathAttachments), Post: e.url(chatrelay.PathPost), Token: tokenN(2), Size: int64(chatrelay.LimitAttachmentBytes.Max), Workers: uploaders}, &uploads)
	defer stop()
	waitUnderWay(b, &uploads, uploaders)
	var d []time.Duration
	b.ResetTimer()
	for range b.N {
		r := &lastByteReader{r: body()}
		req, _ := http.NewRequest(http.MethodPost, e.url(chatrelay.PathAttachments), r)
		req.ContentLength = size
		req.Header.Set("X-Filename", "dup.bin")
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("X-Chat-Token", tok)
		resp, err := e.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		answered := time.Now()
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("duplicate: %d", resp.StatusCode)
		}
		d = append(d, answered.Sub(r.last))
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100])/float64(time.Millisecond), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// waitUnderWay returns once every one of the uploaders has finished an
// upload (uploads counts them), or b has failed: the uploads are under
// way. It polls the count, which startUploaders' workers only add to.
func waitUnderWay(b *testing.B, uploads *atomic.Int64, uploaders int64) {
	for uploads.Load() < uploaders && !b.Failed() {
		time.Sleep(time.Millisecond)
	}
}
