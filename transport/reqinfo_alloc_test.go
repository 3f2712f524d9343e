package transport

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/store/filestore"
)

// TestRequestInfoAllocations counts what observe, methods and cutAtAbort
// cost a request with a body: its reqInfo (which is its context, holds its
// recorder and its abortable body), the request's copy with that context,
// and the abort's hook (context.AfterFunc: its closure, its context and
// its stop). The reqInfo's parts, and methods' deferred call in a loop,
// used to be allocations of their own.
func TestRequestInfoAllocations(t *testing.T) {
	if raceOn {
		t.Skip("the race detector moves more values to the heap")
	}
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := NewServer(Config{Store: st, TicketKey: []byte(strings.Repeat("k", 32)), Log: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	var read int64
	mux.Handle("POST /api/x", s.methods([]route{{method: "POST", serve: func(w http.ResponseWriter, r *http.Request) {
		noteThread(r, "0123456789abcdef")
		if infoOf(r) == nil {
			t.Error("the handler sees no reqInfo")
		}
		read, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}}}))
	s.mux = mux
	w := httptest.NewRecorder()
	body := strings.NewReader(`{"text":"hi"}`)
	r := httptest.NewRequest("POST", "/api/x", nil)
	r.Body = io.NopCloser(body)
	s.observe(w, r)
	if read != int64(body.Size()) || w.Code != http.StatusNoContent {
		t.Fatalf("the handler read %d bytes and answered %d; want %d and 204", read, w.Code, body.Size())
	}
	n := testing.AllocsPerRun(200, func() {
		body.Seek(0, io.SeekStart)
		s.observe(w, r)
	})
	if n > 5 {
		t.Errorf("observe, methods and cutAtAbort cost a request %v allocations, want at most 5 (its reqInfo, the request's copy, the abort's hook)", n)
	}
}
