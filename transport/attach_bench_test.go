package transport_test

// The attachments benchmark: run without -race for figures,
//
//	go test -run '^$' -bench 'UploadHeap|PostsWhileUploading' -benchtime 40x ./transport/

import (
	"io"
	"net/http"
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

// BenchmarkUploadHeap: concurrent 10 MiB uploads over HTTP into the file
// store and into Redis. It reports the server's (and the in-process
// client's) peak heap above the idle heap, per concurrent upload
// (heap-B/upload: a file read whole into memory would cost 10 MiB here),
// and uploads/s. Each worker uploads the same bytes into a thread of its
// own, so the stores keep one copy per thread however long it runs.
func BenchmarkUploadHeap(b *testing.B) {
	const concurrent = 8
	size := int64(chatrelay.LimitAttachmentBytes.Max)
	for _, backend := range storetest.Backends() {
		b.Run(backend, func(b *testing.B) {
			e := startPush(b, pushOptions{backend: backend})
			upload := func(tok string) {
				req, _ := http.NewRequest(http.MethodPost, e.url(chatrelay.PathAttachments), &patternReader{left: size})
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
			for w := range concurrent { // the bytes are stored once per thread before the clock starts
				upload(tokenN(1000 + w))
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
					tok := tokenN(1000 + w)
					for next.Add(1) <= int64(b.N) {
						upload(tok)
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

// BenchmarkPostsWhileUploading: the p99 of a post's round trip, alone and
// then (in the same run) while 4 clients upload 10 MiB files without a
// pause, on each store: uploads must not hold posts up (they take the
// thread's lock only to commit, never while the bytes arrive).
func BenchmarkPostsWhileUploading(b *testing.B) {
	const uploaders = 4
	size := int64(chatrelay.LimitAttachmentBytes.Max)
	for _, backend := range storetest.Backends() {
		b.Run(backend, func(b *testing.B) {
			e := startPush(b, pushOptions{backend: backend})
			tok := tokenN(1)
			post := func() time.Duration {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, e.url(chatrelay.PathPost), strings.NewReader(`{"text":"a message of a typical length, about sixty characters long."}`))
				req.Header.Set("X-Chat-Token", tok)
				req.Header.Set("Content-Type", "application/json")
				resp, err := e.client.Do(req)
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
			p99 := func(n int) float64 {
				d := make([]time.Duration, n)
				for i := range d {
					d[i] = post()
				}
				slices.Sort(d)
				return float64(d[len(d)*99/100]) / float64(time.Millisecond)
			}
			n := max(b.N, 100)
			b.ResetTimer()
			alone := p99(n)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var uploads atomic.Int64
			for w := range uploaders {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						// The same thread as the posts: one copy of the bytes, however many uploads.
						req, _ := http.NewRequest(http.MethodPost, e.url(chatrelay.PathAttachments), &patternReader{left: size})
						req.ContentLength = size
						req.Header.Set("X-Chat-Token", tok)
						req.Header.Set("X-Filename", "big"+string(rune('a'+w))+".bin")
						resp, err := e.client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						uploads.Add(1)
					}
				})
			}
			busy := p99(n)
			close(stop)
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(alone, "p99-ms-alone")
			b.ReportMetric(busy, "p99-ms-uploading")
			b.ReportMetric(float64(uploads.Load()), "uploads")
			b.ReportMetric(0, "ns/op")
		})
	}
}
