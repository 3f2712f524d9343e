package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// BenchmarkPollCached is one poll of an unchanged thread through the HTTP
// handler (no network): authenticate, stat the file, take the cached page,
// write the answer from pre-encoded messages.
func BenchmarkPollCached(b *testing.B) {
	for _, size := range []int{1, 50, 200} {
		b.Run(fmt.Sprintf("messages=%d", size), func(b *testing.B) {
			quiet := slog.New(slog.DiscardHandler)
			st, err := filestore.OpenFile(b.TempDir(), filestore.FileOptions{NoFsync: true, Log: quiet})
			if err != nil {
				b.Fatal(err)
			}
			tok := token(1)
			for i := range size {
				if _, err := st.Append(context.Background(), chatrelay.ThreadOf(tok), store.NewMessage{Text: fmt.Sprint("message number ", i)}); err != nil {
					b.Fatal(err)
				}
			}
			srv := NewServer(Config{Store: st, Log: quiet})
			req := httptest.NewRequest("GET", "/api/chat/poll", nil)
			req.Header.Set("X-Chat-Token", tok)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
