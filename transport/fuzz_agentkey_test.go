package transport

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// FuzzAgentBearer: /mcp's Authorization header is anyone's. Reading it
// never panics; it resolves only "Bearer" (any case), spaces, and the
// very key issued, and refuses the rest as unauthorized, or a revoked
// key as token_revoked.
func FuzzAgentBearer(f *testing.F) {
	st, err := filestore.OpenFile(f.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	key, k, err := chatrelay.NewAgentKey("ci-bot", nil, now)
	if err != nil {
		f.Fatal(err)
	}
	gone, g, err := chatrelay.NewAgentKey("old-bot", nil, now)
	if err != nil {
		f.Fatal(err)
	}
	for _, a := range []chatrelay.AgentKey{k, g} {
		if err := st.AddAgent(f.Context(), a); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := st.RevokeAgent(f.Context(), g.ID); err != nil {
		f.Fatal(err)
	}
	srv := NewServer(Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	for _, s := range []string{"Bearer " + key, "bearer   " + key, "Bearer " + gone, "Bearer " + key + " ", "Bearer\t" + key, "Basic " + key, key,
		"Bearer " + strings.ToUpper(key), "Bearer " + key[:len(key)-1], "Bearer cha_" + strings.Repeat("A", 43), "Bearer chp_" + key[4:], ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest(http.MethodPost, chatrelay.PathMCP, nil)
		r.Header.Set("Authorization", h)
		got, err := srv.agentKey(r, st)
		scheme, rest, _ := strings.Cut(h, " ")
		exact := func(k string) bool { return strings.EqualFold(scheme, "Bearer") && strings.TrimLeft(rest, " ") == k }
		switch {
		case err == nil:
			if got.ID != k.ID || !exact(key) {
				t.Fatalf("Authorization %q resolved %+v", h, got)
			}
		case exact(key):
			t.Fatalf("Authorization %q (the key) refused: %v", h, err)
		case chatrelay.CodeOf(err) == chatrelay.TokenRevoked:
			if !exact(gone) {
				t.Fatalf("Authorization %q: %v", h, err)
			}
		case chatrelay.CodeOf(err) != chatrelay.Unauthorized:
			t.Fatalf("Authorization %q: %v", h, err)
		}
	})
}
