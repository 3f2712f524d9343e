package mcpserver_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/mcpserver"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// onMessage is a slog handler that calls f (once) when a record with the
// message msg is logged.
type onMessage struct {
	msg  string
	once *sync.Once
	f    func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h onMessage) WithGroup(string) slog.Handler            { return h }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(h.f)
	}
	return nil
}

// TestHTTPCloseEndsASessionMadeMeanwhile: a session that the SDK makes
// while Close runs (the key's server was handed to it just before) is
// ended too: its standalone GET is refused (404) instead of held open
// until the idle timeout, which held the server's shutdown past its 5 s.
// Close runs exactly there: when the SDK logs "server connecting", between
// the server's lookup and the session's start.
func TestHTTPCloseEndsASessionMadeMeanwhile(t *testing.T) {
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	var h *mcpserver.HTTP
	closed := make(chan struct{})
	log := slog.New(onMessage{msg: "server connecting", once: new(sync.Once), f: func() {
		h.Close()
		close(closed)
	}})
	h = mcpserver.NewHTTP(&host.Verbs{Store: st}, mcpserver.HTTPOptions{Options: mcpserver.Options{Log: log}})
	key := chatrelay.AgentKey{ID: "a_0123abcd", Name: "late"}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h.ServeAgent(w, r, key); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(ts.Close)

	req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"late","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer cha_test") // ServeAgent's caller checked the key
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	assert.True(t, resp.StatusCode == http.StatusOK && id != "", "initialize: %d %q %s", resp.StatusCode, id, body)
	<-closed // Close ran during this request, as the session was being made

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel() // ends the stream if it was opened
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Authorization", "Bearer cha_test")
	resp, err = http.DefaultClient.Do(req)
	assert.Success(t, err)
	resp.Body.Close()
	assert.Equal(t, "the standalone GET of the session made during Close", resp.StatusCode, http.StatusNotFound)
}
