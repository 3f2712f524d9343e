package mcpserver_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// agentSession is an MCP server over HTTP on a file store, for one agent
// key allowed one call in flight, and a session made with it: rpc sends
// one JSON-RPC message on ctx and returns the answer's body. The server
// logs to log (nil: nowhere).
func agentSession(t *testing.T, log *slog.Logger) (h *mcpserver.HTTP, rpc func(ctx context.Context, msg string) (string, error), end func() int) {
	t.Helper()
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	h = mcpserver.NewHTTP(&host.Verbs{Store: st}, mcpserver.HTTPOptions{Options: mcpserver.Options{Log: log}, MCPBounds: chatrelay.MCPBounds{MaxCallsPerKey: 1}})
	t.Cleanup(h.Close)
	key := chatrelay.AgentKey{ID: "a_0123abcd", Name: "dropper"}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h.ServeAgent(w, r, key); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(ts.Close)

	session := ""
	rpc = func(ctx context.Context, msg string) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL, strings.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer cha_test")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if session == "" {
			session = resp.Header.Get("Mcp-Session-Id")
		}
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	end = func() int { // DELETE the session
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, ts.URL, nil)
		req.Header.Set("Authorization", "Bearer cha_test")
		req.Header.Set("Mcp-Session-Id", session)
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	_, err = rpc(t.Context(), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"dropper","version":"1"}}}`)
	assert.Success(t, err)
	assert.True(t, session != "", "no session made")
	_, err = rpc(t.Context(), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	assert.Success(t, err)
	return h, rpc, end
}

// TestHTTPWaitEndsWithItsRequest: a wait whose HTTP request is gone (the
// client dropped the connection without notifications/cancelled) ends
// with it, giving back its place among the key's calls in flight: the
// server keeps no events to resume a stream with, so its answer could
// reach no one, and it held the key's place until its timeout (up to
// 300 s; with 16 dropped, the key could call nothing).
func TestHTTPWaitEndsWithItsRequest(t *testing.T) {
	_, rpc, _ := agentSession(t, nil)
	list := func() string {
		body, err := rpc(t.Context(), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`)
		assert.Success(t, err)
		return body
	}

	waitCtx, drop := context.WithCancel(t.Context())
	waited := make(chan error, 1)
	go func() {
		for { // a probe below that came first holds the key's one call: the wait is refused, and sent again
			body, err := rpc(waitCtx, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"timeout":300}}}`)
			if err != nil || !strings.Contains(body, "too_many_streams") {
				waited <- err
				return
			}
		}
	}()
	assert.Eventually(t, 10*time.Second, "the wait in flight (another call refused)", func() bool {
		return strings.Contains(list(), "too_many_streams")
	})
	drop() // the client leaves, without a cancel
	<-waited
	assert.Eventually(t, 10*time.Second, "the key's place back once the wait's request is gone", func() bool {
		return !strings.Contains(list(), "too_many_streams")
	})
}

// TestHTTPCloseAnswersWaitsRetryable: a wait in flight when the server
// stops (Close, at serve's shutdown) answers store_unavailable, retryable,
// so that the agent calls again (on this node once it is back, or on
// another). It answered token_revoked, "this agent key was revoked", not
// retryable: an agent told so gives its key up.
func TestHTTPCloseAnswersWaitsRetryable(t *testing.T) {
	h, rpc, _ := agentSession(t, nil)
	waited := waitInFlight(t, rpc)
	h.Close()
	select {
	case w := <-waited:
		body := w.body
		assert.True(t, strings.Contains(body, `"code":"store_unavailable"`) && strings.Contains(body, `"retryable":true`),
			"the wait's answer when the server stops: %s", body)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait still runs 10 s after Close")
	}
}

// waitAnswer is a wait's answer: its body, or the error of its request.
type waitAnswer struct {
	body string
	err  error
}

// waitInFlight starts a wait of 300 s on rpc's session (whose key has one
// call in flight at most) and returns once it is in flight: another call
// is refused too_many_streams. The wait's answer comes on the channel.
func waitInFlight(t *testing.T, rpc func(context.Context, string) (string, error)) <-chan waitAnswer {
	t.Helper()
	waited := make(chan waitAnswer, 1)
	go func() {
		for { // a probe below that came first holds the key's one call: the wait is refused, and sent again
			body, err := rpc(t.Context(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"timeout":300}}}`)
			if err != nil || !strings.Contains(body, "too_many_streams") {
				waited <- waitAnswer{body, err}
				return
			}
		}
	}()
	assert.Eventually(t, 10*time.Second, "the wait in flight (another call refused)", func() bool {
		body, err := rpc(t.Context(), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`)
		assert.Success(t, err)
		return strings.Contains(body, "too_many_streams")
	})
	return waited
}

// audits is a slog handler that keeps the outcome of each "mcp tool call"
// line (the audit), by tool.
type audits struct {
	mu       *sync.Mutex
	outcomes map[string][]string
}

func (h audits) Enabled(context.Context, slog.Level) bool { return true }
func (h audits) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h audits) WithGroup(string) slog.Handler            { return h }
func (h audits) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "mcp tool call" {
		return nil
	}
	var tool, outcome string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "tool":
			tool = a.Value.String()
		case "outcome":
			outcome = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outcomes[tool] = append(h.outcomes[tool], outcome)
	return nil
}

func (h audits) of(tool string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.outcomes[tool])
}

// TestHTTPAuditSaysACallTheClientEnded: a wait that ends because its
// client left (or sent notifications/cancelled, after its own timeout) is
// audited with the outcome "canceled". It was "internal", the code of a
// failure of the server's own, so that every agent whose client gives up
// on a long wait (the TypeScript SDK after 60 s by default) raised the
// alarms an operator keeps on internal errors, and the audit did not
// tell what happened.
func TestHTTPAuditSaysACallTheClientEnded(t *testing.T) {
	log := audits{mu: new(sync.Mutex), outcomes: map[string][]string{}}
	_, rpc, _ := agentSession(t, slog.New(log))
	waitCtx, drop := context.WithCancel(t.Context())
	waited := make(chan error, 1)
	go func() {
		for { // a probe below that came first holds the key's one call: the wait is refused, and sent again
			body, err := rpc(waitCtx, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"timeout":300}}}`)
			if err != nil || !strings.Contains(body, "too_many_streams") {
				waited <- err
				return
			}
		}
	}()
	assert.Eventually(t, 10*time.Second, "the wait in flight (another call refused)", func() bool {
		body, err := rpc(t.Context(), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`)
		assert.Success(t, err)
		return strings.Contains(body, "too_many_streams")
	})
	drop() // the client leaves
	<-waited
	ended := func() []string { // the wait's outcomes but those of the tries refused
		return slices.DeleteFunc(log.of("chatrelay_wait_messages"), func(o string) bool { return o == string(chatrelay.TooManyStreams) })
	}
	assert.Eventually(t, 10*time.Second, "the wait's audit line", func() bool { return len(ended()) > 0 })
	assert.Equal(t, "the audited outcome of the wait its client left", ended(), []string{"canceled"})

	// A client that gives up on its own timeout says so (the TypeScript
	// SDK sends notifications/cancelled): the same outcome.
	go func() {
		for {
			body, err := rpc(t.Context(), `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"timeout":300}}}`)
			if err != nil || !strings.Contains(body, "too_many_streams") {
				waited <- err
				return
			}
		}
	}()
	assert.Eventually(t, 10*time.Second, "the second wait in flight (another call refused)", func() bool {
		body, err := rpc(t.Context(), `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`)
		assert.Success(t, err)
		return strings.Contains(body, "too_many_streams")
	})
	_, err := rpc(t.Context(), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4,"reason":"timed out"}}`)
	assert.Success(t, err)
	<-waited
	assert.Eventually(t, 10*time.Second, "the second wait's audit line", func() bool { return len(ended()) > 1 })
	assert.Equal(t, "the audited outcomes of the waits", ended(), []string{"canceled", "canceled"})
}

// TestHTTPDeleteEndsTheSessionsWaits: a DELETE of a session with a wait in
// flight (an agent that closes its client) ends the wait and is answered
// at once. The SDK's close waited for the session's calls, so the DELETE
// was answered only when the wait returned (up to its 300 s), and the wait
// held one of the key's calls in flight all along. The wait answers the
// tool error not_found, as a revoke answers token_revoked: its stream
// ended with no answer, and the TypeScript SDK's call (1.32.2) then waited
// for its own request timeout (60 s by default) after its session's
// DELETE (pushe2e probe: a wait in flight while another request DELETEs
// its session).
func TestHTTPDeleteEndsTheSessionsWaits(t *testing.T) {
	log := audits{mu: new(sync.Mutex), outcomes: map[string][]string{}}
	_, rpc, end := agentSession(t, slog.New(log))
	waited := waitInFlight(t, rpc)
	deleted := make(chan int, 1)
	go func() { deleted <- end() }()
	select {
	case status := <-deleted:
		assert.Equal(t, "the DELETE's status", status, http.StatusNoContent)
	case <-time.After(10 * time.Second):
		t.Fatal("the DELETE of a session with a wait of 300 s in flight is not answered after 10 s")
	}
	select {
	case w := <-waited:
		assert.True(t, strings.Contains(w.body, `"id":2`) && strings.Contains(w.body, `"isError":true`) &&
			strings.Contains(w.body, `"code":"not_found"`) && strings.Contains(w.body, "this session was ended"),
			"the answer of the wait whose session was deleted: %q (%v)", w.body, w.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait's request still runs 10 s after its session was deleted")
	}
	ended := func() []string {
		return slices.DeleteFunc(log.of("chatrelay_wait_messages"), func(o string) bool { return o == string(chatrelay.TooManyStreams) })
	}
	assert.Eventually(t, 10*time.Second, "the wait's audit line", func() bool { return len(ended()) > 0 })
	assert.Equal(t, "the audited outcome of the wait whose session was deleted", ended(), []string{string(chatrelay.NotFound)})
}

// TestHTTPCanceledCallGetsNoAnswer: a call the client cancels
// (notifications/cancelled, as the TypeScript SDK sends when a call is
// aborted or times out) ends at once and gets no answer on its stream, as
// MCP asks and as on stdio; the session goes on. The SDK answered it with
// a JSON-RPC error of code 0, "context canceled", which the TypeScript
// SDK's client reports through onerror as "Received a response for an
// unknown message ID" at every wait an agent gave up on.
func TestHTTPCanceledCallGetsNoAnswer(t *testing.T) {
	for _, params := range []string{
		`{"requestId":2,"reason":"the agent gave up"}`,
		// The SDK matches keys in their own case: it cancels call 2,
		// and the bookkeeping must mark 2, not the "REQUESTID" after it
		// (encoding/json's case-insensitive match took the last).
		`{"requestId":2,"REQUESTID":5}`,
	} {
		t.Run(params, func(t *testing.T) {
			_, rpc, _ := agentSession(t, nil)
			waited := waitInFlight(t, rpc)
			_, err := rpc(t.Context(), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":`+params+`}`)
			assert.Success(t, err)
			select {
			case w := <-waited:
				assert.Success(t, w.err)
				assert.True(t, !strings.Contains(w.body, `"id":2`), "the canceled call's stream holds an answer: %q", w.body)
			case <-time.After(10 * time.Second):
				t.Fatal("the canceled wait still runs 10 s after its cancel")
			}
			body, err := rpc(t.Context(), `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`)
			assert.Success(t, err)
			assert.True(t, strings.Contains(body, `"id":4`) && !strings.Contains(body, `"isError":true`), "a call after the cancel: %s", body)
		})
	}
}

// TestHTTPInitializeKeysMCPDoesNotName: an initialize request whose params
// are MCP's and also hold keys MCP does not name, spelled like its own in
// other cases ("CAPABILITIES", a clientInfo's "NAME"), makes a session, as
// the SDK, which matches keys case-sensitively and ignores unknown ones,
// would. The check of its params (initializeParamsOK) matched keys in any
// case, took them for MCP's, and refused it 400 invalid_json.
func TestHTTPInitializeKeysMCPDoesNotName(t *testing.T) {
	h := mcpserver.NewHTTP(&host.Verbs{Store: nil}, mcpserver.HTTPOptions{})
	t.Cleanup(h.Close)
	key := chatrelay.AgentKey{ID: "a_0123abcd", Name: "cased"}
	for _, params := range []string{
		`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"},"CAPABILITIES":5}`,
		`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1","NAME":5}}`,
		`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"},"ProtocolVersion":5,"clientinfo":"x"}`,
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + params + `}`
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer cha_test")
		w := httptest.NewRecorder()
		err := h.ServeAgent(w, req, key)
		assert.Success(t, err)
		assert.Equal(t, params+": status", w.Code, http.StatusOK)
		assert.True(t, w.Header().Get("Mcp-Session-Id") != "", "%s: no session made: %s", params, w.Body)
	}
}

// TestHTTPDeleteRefusesACallMeanwhile: a tool call that reaches a session
// while its DELETE ends it (after the DELETE ended the calls in flight,
// before the SDK closed the session) is refused at once with the tool
// error not_found, as the calls in flight were, and starts no wait. It
// started: a wait that ran on, uncanceled, past the DELETE's 500 ms for
// its session's answers, on a session being closed. The call is sent
// exactly there: when the DELETE logs that the session's calls were ended.
func TestHTTPDeleteRefusesACallMeanwhile(t *testing.T) {
	log := audits{mu: new(sync.Mutex), outcomes: map[string][]string{}}
	var rpc func(context.Context, string) (string, error)
	meanwhile := make(chan waitAnswer, 1)
	hook := onMessage{msg: "mcp: a session ends: its calls in flight were ended", once: new(sync.Once), f: func() {
		// The DELETE waits here for the call's answer, at most 10 s.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		body, err := rpc(ctx, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"timeout":300}}}`)
		meanwhile <- waitAnswer{body, err}
	}}
	_, rpc, end := agentSession(t, slog.New(both{log, hook}))
	deleted := make(chan int, 1)
	go func() { deleted <- end() }()
	w := <-meanwhile
	assert.True(t, w.err == nil && strings.Contains(w.body, `"id":7`) && strings.Contains(w.body, `"isError":true`) &&
		strings.Contains(w.body, `"code":"not_found"`) && strings.Contains(w.body, "this session was ended"),
		"the answer of a wait sent while its session's DELETE ran: %q (%v)", w.body, w.err)
	select {
	case status := <-deleted:
		assert.Equal(t, "the DELETE's status", status, http.StatusNoContent)
	case <-time.After(10 * time.Second):
		t.Fatal("the DELETE is not answered after 10 s")
	}
	assert.Eventually(t, 10*time.Second, "the call's audit line", func() bool { return len(log.of("chatrelay_wait_messages")) > 0 })
	assert.Equal(t, "the audited outcome of the call refused", log.of("chatrelay_wait_messages"), []string{string(chatrelay.NotFound)})
}

// both is a slog handler that hands each record to a and b.
type both struct{ a, b slog.Handler }

func (h both) Enabled(context.Context, slog.Level) bool { return true }
func (h both) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h both) WithGroup(string) slog.Handler            { return h }
func (h both) Handle(ctx context.Context, r slog.Record) error {
	h.a.Handle(ctx, r)
	return h.b.Handle(ctx, r)
}
