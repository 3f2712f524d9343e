package filestore

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// BenchmarkOpenAttachment is what a download costs the file store before
// its bytes are read: the thread's index read and parsed, the file
// opened; with a thread of 10, 100 and 1000 uploads, named by its posts.
func BenchmarkOpenAttachment(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("uploads=%d", n), func(b *testing.B) {
			s, ctx := benchThread(b)
			var id string
			var pending []string
			for i := range n {
				a, err := s.PutAttachment(ctx, threadA, store.Upload{Name: fmt.Sprintf("file-%d.txt", i), Body: strings.NewReader(fmt.Sprintf("file %d", i))})
				if err != nil {
					b.Fatal(err)
				}
				id = a.ID
				// Named in posts (a message's most at a time), as a
				// client does: a thread holds at most attachment.pending
				// uploads no message names.
				if pending = append(pending, a.ID); len(pending) == chatrelay.LimitAttachments.Max || i == n-1 {
					if _, err := s.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Attachments: pending}); err != nil {
						b.Fatal(err)
					}
					pending = nil
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, f, err := s.OpenAttachment(ctx, threadA, id, "")
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

// BenchmarkPutAttachment is what an upload's store work costs beside its
// bytes (a few bytes here, the same each time: received, hashed, dropped
// at the commit): the index read before the bytes are taken in, the
// commit under the thread's lock (the index read, checked and written),
// and a post naming every tenth upload, as a client does. The thread
// holds n uploads at the start and one more each op, so a long run
// measures a larger index.
func BenchmarkPutAttachment(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("uploads=%d", n), func(b *testing.B) {
			s, ctx := benchThread(b)
			var pending []string
			put := func(i int) {
				a, err := s.PutAttachment(ctx, threadA, store.Upload{Name: fmt.Sprintf("file-%d.txt", i), Body: strings.NewReader("the same bytes")})
				if err != nil {
					b.Fatal(err)
				}
				if pending = append(pending, a.ID); len(pending) == chatrelay.LimitAttachments.Max {
					if _, err := s.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Attachments: pending}); err != nil {
						b.Fatal(err)
					}
					pending = nil
				}
			}
			for i := range n {
				put(i)
			}
			b.ReportAllocs()
			i := n
			for b.Loop() {
				put(i)
				i++
			}
		})
	}
}

// BenchmarkPutDuplicate: a 10 MiB upload of bytes the thread holds
// already (received, hashed, dropped at the commit), its Work run on a
// thread of its own, as the server's lane runs it. It reports the CPU
// time (user and system, getrusage) of the calling thread per upload,
// caller-cpu-us: what an upload costs the request's thread, which runs at
// the posts' priority, beside the work handed to the low-priority lane.
//
//	TMPDIR=/dev/shm go test -run '^$' -bench PutDuplicate -benchtime 40x ./store/filestore/
func BenchmarkPutDuplicate(b *testing.B) {
	s, ctx := benchThread(b)
	const size = 10 << 20
	jobs := make(chan func())
	defer close(jobs)
	go func() {
		runtime.LockOSThread()
		for j := range jobs {
			j()
		}
	}()
	work := func(w func()) error {
		done := make(chan struct{})
		jobs <- func() { w(); close(done) }
		<-done
		return nil
	}
	body := bytes.Repeat([]byte("the same bytes, 16"), size/16)[:size]
	var pending []string
	put := func() {
		a, err := s.PutAttachment(ctx, threadA, store.Upload{Name: "f.bin", Body: bytes.NewReader(body), Work: work})
		if err != nil {
			b.Fatal(err)
		}
		if pending = append(pending, a.ID); len(pending) == chatrelay.LimitAttachments.Max { // a thread holds attachment.pending unnamed
			if _, err := s.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Attachments: pending}); err != nil {
				b.Fatal(err)
			}
			pending = nil
		}
	}
	put() // held from now on
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &before)
	for b.Loop() {
		put()
	}
	syscall.Getrusage(syscall.RUSAGE_THREAD, &after)
	cpu := time.Duration(syscall.TimevalToNsec(after.Utime) - syscall.TimevalToNsec(before.Utime) + syscall.TimevalToNsec(after.Stime) - syscall.TimevalToNsec(before.Stime))
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "caller-cpu-us/op")
}
