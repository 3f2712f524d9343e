package filestore

import (
	"fmt"
	"strings"
	"testing"

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
