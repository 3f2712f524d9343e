package transport

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/store/filestore"
)

// TestRequestInfoAllocations counts what observe, methods and cutAtAbort
// cost a request with a body: its reqInfo (which is its context, holds its
// recorder, its abortable body and its place in the abort's list) and the
// request's copy with that context. Each of these used to be an
// allocation of its own: a context.WithValue, a recorder, an
// abortableBody, the abort's hook (context.AfterFunc: its closure, its
// context and its stop), and methods' deferred call in a loop.
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
	if n > 2 {
		t.Errorf("observe, methods and cutAtAbort cost a request %v allocations, want at most 2 (its reqInfo, the request's copy)", n)
	}
}

// TestAbortListCutsWhatIsHooked: the abort cuts every request hooked on
// it and not unhooked yet, and one hooked after it comes is told so (its
// caller cuts it at once).
func TestAbortListCutsWhatIsHooked(t *testing.T) {
	var l abortList
	ris := make([]*reqInfo, 4)
	for i := range ris {
		ris[i] = &reqInfo{}
		ris[i].cut.w = httptest.NewRecorder()
		if l.add(ris[i]) {
			t.Fatalf("request %d hooked before the abort is told it came", i)
		}
	}
	l.remove(ris[0])
	l.remove(ris[2])
	l.remove(ris[2]) // twice: still out
	l.fire()
	l.remove(ris[1]) // after the abort took it: nothing to do
	if !l.add(&reqInfo{}) {
		t.Error("a request hooked after the abort is not told it came")
	}
	// fire cuts each in its own goroutine: wait for the two it took.
	for _, i := range []int{1, 3} {
		for {
			ris[i].abort.mu.Lock()
			done := ris[i].abort.aborted
			ris[i].abort.mu.Unlock()
			if done {
				break
			}
			runtime.Gosched()
		}
	}
	for _, i := range []int{0, 2} {
		if ris[i].abort.aborted {
			t.Errorf("request %d, unhooked before the abort, was cut", i)
		}
	}
}
