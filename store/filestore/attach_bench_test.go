package filestore

import (
	"context"
	"fmt"
	"log/slog"
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
			s, err := OpenFile(b.TempDir(), FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if _, err := s.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Text: "hello"}); err != nil {
				b.Fatal(err)
			}
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
				_, f, err := s.OpenAttachment(ctx, threadA, id)
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
