package transport

import (
	"log/slog"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// TestRouteBindings: every row of the route table (chatrelay.Routes) has a
// handler of its kind (behind the gate for a gated row), and every handler
// has a row, so the mux, the gate and the bundle's x-routes cannot drift.
func TestRouteBindings(t *testing.T) {
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := NewServer(Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	hs := srv.handlers()
	rows := map[string]bool{}
	for _, row := range chatrelay.Routes() {
		if rows[row.Key()] {
			t.Errorf("route %s: two rows", row.Key())
		}
		rows[row.Key()] = true
		h, ok := hs[row.Key()]
		switch {
		case !ok:
			t.Errorf("route %s: no handler", row.Key())
		case row.Gated() && h.handle == nil:
			t.Errorf("route %s takes credentials through the gate, but its handler is not a gated one", row.Key())
		case !row.Gated() && h.serve == nil:
			t.Errorf("route %s is served as it is, but its handler is a gated one", row.Key())
		}
	}
	for key := range hs {
		if !rows[key] {
			t.Errorf("handler %s: no row in the route table", key)
		}
	}
}
