package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/mcpserver"
	"github.com/chatrelay/chatrelay/store"
)

// mcpNode is a `chatrelay serve --mcp` running in this process.
type mcpNode struct {
	base string
	log  *opsBuffer
	stop func() error
}

// serveMCP runs `chatrelay serve --mcp` on a loopback port over the store
// storeArgs name, with a short progress interval; args come last.
func serveMCP(t *testing.T, storeArgs []string, args ...string) *mcpNode {
	t.Helper()
	n := &mcpNode{log: new(opsBuffer)}
	full := append(append([]string{"serve", "--addr", "127.0.0.1:0", "--fsync", "never", "--mcp", "--progress-every", "200ms"}, storeArgs...), args...)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, full, func(string) string { return "" }, strings.NewReader(""), pw, n.log)
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	for n.base == "" && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
			n.base = strings.TrimSuffix(v, "/")
		}
	}
	go io.Copy(io.Discard, pr)
	var once sync.Once
	var err error
	n.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				err = fmt.Errorf("serve did not return 20s after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := n.stop(); err != nil {
			t.Errorf("serve: %v\nlog:\n%s", err, n.log)
		}
	})
	if n.base == "" {
		t.Fatalf("serve printed no address; log:\n%s", n.log)
	}
	return n
}

// addAgent runs `chatrelay agent add NAME [--threads …]` and returns the
// key it printed and the key's id.
func addAgent(t *testing.T, storeArgs []string, name string, threads ...string) (key, id string) {
	t.Helper()
	args := append([]string{"agent", "add", name, "--fsync", "never"}, storeArgs...)
	if len(threads) > 0 {
		args = append(args, "--threads", strings.Join(threads, ","))
	}
	r := runCLI(t, nil, "", args...)
	assert.Success(t, r.err)
	key = strings.TrimSpace(r.stdout)
	assert.True(t, chatrelay.ValidAgentKey(key), "agent add printed %q", r.stdout)
	_, rest, _ := strings.Cut(r.stderr, "agent key ")
	id, _, _ = strings.Cut(rest, " ")
	assert.True(t, chatrelay.ValidAgentID(id), "agent add said %q", r.stderr)
	return key, id
}

// bearer adds an Authorization header to every request.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpClient connects the official Go SDK's Streamable HTTP client to a
// node with key; progress receives every progress notification.
func mcpClient(t *testing.T, base, key string, progress chan<- *mcp.ProgressNotificationParams) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "chatrelay-go-http-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				select {
				case progress <- r.Params:
				default:
				}
			}
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: base + chatrelay.PathMCP,
		HTTPClient: &http.Client{Transport: bearerTransport{key}}, MaxRetries: -1}, nil)
	assert.Success(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// personPost posts as the thread's owner over the API.
func personPost(t *testing.T, base, token, path, body string) int {
	t.Helper()
	status, _, err := personPostAnswer(base, token, path, body)
	assert.Success(t, err)
	return status
}

// personPostAnswer is personPost's request, answered with its status and
// body; it asserts nothing, so that a test's goroutines may call it.
func personPostAnswer(base, token, path, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// sendTool calls the send tool: its answer is the tool's error (Code ""
// when it stored or replayed the message) and whether it was a replay;
// err is the call's own failure. It asserts nothing, so that a test's
// goroutines may call it.
func sendTool(ctx context.Context, cs *mcp.ClientSession, thread, text, clientID string) (te mcpserver.ToolError, replayed bool, err error) {
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: chatrelay.ToolName("send"),
		Arguments: map[string]any{"thread": thread, "text": text, "client_id": clientID}})
	if err != nil {
		return te, false, err
	}
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		return te, false, err
	}
	if r.IsError {
		return te, false, json.Unmarshal(b, &te)
	}
	var out struct {
		Replayed bool `json:"replayed"`
	}
	return te, out.Replayed, json.Unmarshal(b, &out)
}

func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: chatrelay.ToolName(tool), Arguments: args})
	assert.Success(t, err)
	return r
}

func structured(t *testing.T, r *mcp.CallToolResult, v any) {
	t.Helper()
	b, err := json.Marshal(r.StructuredContent)
	assert.Success(t, err)
	assert.Success(t, json.Unmarshal(b, v))
}

// revokedAt is when agent key id was revoked, as the store has it
// (revoked_at), so that a test counts a revoke's second from its write:
// counting from the start of the CLI that revokes it put the process's
// start and its store's open on the clock, over a second on a loaded CI
// machine (a run of 6e7ab5d).
func revokedAt(t *testing.T, b *storetest.Backend, id string) time.Time {
	t.Helper()
	keys, err := b.Store.(store.Agents).AgentKeys(t.Context())
	assert.Success(t, err)
	for _, k := range keys {
		if k.ID == id && k.RevokedAt > 0 {
			return time.UnixMilli(k.RevokedAt)
		}
	}
	t.Fatalf("the key %s has no revoked_at in the store", id)
	return time.Time{}
}

// mcpStoreArgs is a fresh store of backend for the chatrelay command.
func mcpStoreArgs(t *testing.T, backend string) []string {
	if backend == storetest.Redis {
		return storetest.OpenRedis(t, storetest.StartServer(t, storetest.ServerOptions{}), storetest.NewPrefix(), storetest.Options{}).CLIArgs()
	}
	return []string{"--data", t.TempDir()}
}

// TestMCPOverHTTPFromTheGoSDK: the official Go SDK's Streamable HTTP
// client, with an agent key, on both stores: it lists the tools with the
// bundle's input and output schemas, sends (hermes's message with the
// key's name as author_name in v2, the v1 poll unchanged), opens an
// approval and waits on progress notifications until the person approves
// over HTTP; a key for one thread is refused every other thread
// (not_found) and lists only its own; every call is in the audit log
// line, which holds neither the key nor a message's text.
func TestMCPOverHTTPFromTheGoSDK(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		sa := mcpStoreArgs(t, backend)
		n := serveMCP(t, sa)
		owner := opsToken("mcp owner")
		thread := chatrelay.ThreadOf(owner)
		assert.Equal(t, "the person's post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"can you deploy build 412?"}`), 201)
		key, _ := addAgent(t, sa, "builder")
		progress := make(chan *mcp.ProgressNotificationParams, 64)
		cs := mcpClient(t, n.base, key, progress)

		tools, err := cs.ListTools(t.Context(), nil)
		assert.Success(t, err)
		assert.Equal(t, "tools", len(tools.Tools), len(chatrelay.Verbs()))
		for _, tl := range tools.Tools {
			verb := strings.TrimPrefix(tl.Name, "chatrelay_")
			in, _ := json.Marshal(tl.InputSchema)
			out, _ := json.Marshal(tl.OutputSchema)
			def, ok := chatrelay.SchemaDef(verb + ".input")
			assert.True(t, ok && schematest.SameJSON(in, def), "%s's input schema: %s", tl.Name, in)
			assert.True(t, schematest.SameJSON(out, mcpserver.OutputSchema(verb)), "%s's output schema: %s", tl.Name, out)
		}

		r := callTool(t, cs, "send", map[string]any{"thread": thread, "text": "Yes, once you approve."})
		assert.True(t, !r.IsError, "send: %+v", r)
		var sent struct{ Message chatrelay.Message }
		structured(t, r, &sent)
		assert.True(t, sent.Message.Author == chatrelay.Hermes && sent.Message.AuthorName == "builder", "sent %+v", sent.Message)
		req, _ := http.NewRequest(http.MethodGet, n.base+chatrelay.PathPoll, nil)
		req.Header.Set("X-Chat-Token", owner)
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		v1, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.True(t, strings.Contains(string(v1), `"author":"hermes","text":"Yes, once you approve."}`) && !strings.Contains(string(v1), "author_name"), "v1 poll: %s", v1)

		r = callTool(t, cs, "request_approval", map[string]any{"thread": thread, "summary": "Deploy build 412?"})
		assert.True(t, !r.IsError, "request_approval: %+v", r)
		var asked host_InteractionResult
		structured(t, r, &asked)
		waited := make(chan *mcp.CallToolResult, 1)
		go func() {
			p := &mcp.CallToolParams{Name: chatrelay.ToolName("wait_interaction"), Arguments: map[string]any{"thread": thread, "interaction_id": asked.Interaction.ID}}
			p.SetProgressToken("wait-1")
			r, err := cs.CallTool(t.Context(), p)
			if err != nil {
				t.Error(err)
			}
			waited <- r
		}()
		for range 3 { // the wait is under way, and reports it
			select {
			case p := <-progress:
				assert.True(t, p.ProgressToken == "wait-1" && p.Total == 300, "progress %+v", p)
			case <-time.After(10 * time.Second):
				t.Fatal("no progress notification")
			}
		}
		assert.Equal(t, "the person's answer", personPost(t, n.base, owner, chatrelay.PathRespond, fmt.Sprintf(`{"interaction_id":%q,"decision":"approve"}`, asked.Interaction.ID)), 200)
		var w *mcp.CallToolResult
		select {
		case w = <-waited:
		case <-time.After(10 * time.Second):
			t.Fatal("the wait did not return after the answer")
		}
		var done host_InteractionResult
		structured(t, w, &done)
		assert.Equal(t, "the wait's outcome", done.Interaction.State, chatrelay.Approved)

		// A key for another thread: not_found here, and lists only its own.
		otherThread := chatrelay.ThreadOf(opsToken("mcp other"))
		assert.Equal(t, "the other thread's post", personPost(t, n.base, opsToken("mcp other"), chatrelay.PathPost, `{"text":"hi"}`), 201)
		scopedKey, _ := addAgent(t, sa, "reviewer", otherThread)
		scoped := mcpClient(t, n.base, scopedKey, nil)
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"read_thread", map[string]any{"thread": thread}},
			{"send", map[string]any{"thread": thread, "text": "hello"}},
			{"wait_messages", map[string]any{"thread": thread, "timeout": 1}},
		} {
			r := callTool(t, scoped, c.tool, c.args)
			var te mcpserver.ToolError
			structured(t, r, &te)
			assert.True(t, r.IsError && te.Code == chatrelay.NotFound, "%s outside the scope: %+v", c.tool, te)
		}
		var listed struct {
			Threads []struct{ Thread string }
		}
		structured(t, callTool(t, scoped, "list_threads", map[string]any{}), &listed)
		assert.True(t, len(listed.Threads) == 1 && listed.Threads[0].Thread == otherThread, "listed %+v", listed)

		log := n.log.String()
		assert.True(t, strings.Contains(log, `msg="mcp tool call" agent=a_`) && strings.Contains(log, "agent_name=builder tool=chatrelay_send thread="+thread+" outcome=ok"), "no audit line of the send:\n%s", log)
		assert.True(t, strings.Contains(log, "agent_name=reviewer tool=chatrelay_read_thread thread="+thread+" outcome=not_found"), "no audit line of the refusal:\n%s", log)
		assert.True(t, !strings.Contains(log, key) && !strings.Contains(log, scopedKey) && !strings.Contains(log, "once you approve"), "the log holds a key or a text:\n%s", log)
	})
}

type host_InteractionResult struct {
	Interaction chatrelay.Interaction
}

// TestMCPRefusals: /mcp without a key, with a key of the wrong shape, an
// unknown key or a revoked one is 401 with WWW-Authenticate: Bearer (a GET
// or a DELETE without a key too); a
// page of an origin not allowed is 403 (an allowed one passes); a server
// without --mcp answers 404.
func TestMCPRefusals(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--allowed-origin", "https://app.example.com")
	key, id := addAgent(t, sa, "builder")
	assert.Success(t, runCLI(t, nil, "", append([]string{"agent", "revoke", id, "--fsync", "never"}, sa...)...).err)
	live, _ := addAgent(t, sa, "live")
	post := func(auth, origin string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, n.base+chatrelay.PathMCP, strings.NewReader(mcpInitialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, c := range []struct{ name, auth, code string }{
		{"no key", "", "unauthorized"},
		{"not a key", "Bearer chp_" + strings.Repeat("A", 43), "unauthorized"},
		{"an unknown key", "Bearer cha_" + strings.Repeat("A", 43), "unauthorized"},
		{"a revoked key", "Bearer " + key, "token_revoked"},
	} {
		resp, body := post(c.auth, "")
		assert.True(t, resp.StatusCode == 401 && strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") && strings.Contains(body, `"code":"`+c.code+`"`),
			"%s: %d %q %s", c.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} { // the other two routes of /mcp
		req, _ := http.NewRequest(method, n.base+chatrelay.PathMCP, nil)
		req.Header.Set("Mcp-Session-Id", "not-a-session")
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.True(t, resp.StatusCode == 401 && strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") && strings.Contains(string(b), `"code":"unauthorized"`),
			"%s without a key: %d %q %s", method, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
	}
	resp, body := post("Bearer "+live, "https://evil.example")
	assert.True(t, resp.StatusCode == 403 && strings.Contains(body, `"code":"origin_not_allowed"`), "a foreign origin: %d %s", resp.StatusCode, body)
	resp, body = post("Bearer "+live, strings.TrimSuffix(n.base, "/")) // the Host's own origin: a DNS rebinding page
	assert.Equal(t, "the Host's own origin "+body, resp.StatusCode, 403)
	resp, body = post("Bearer "+live, "https://app.example.com")
	assert.Equal(t, "an allowed origin "+body, resp.StatusCode, 200)
	resp, body = post("Bearer "+live, "")
	assert.Equal(t, "no origin "+body, resp.StatusCode, 200)

	// A store that cannot say whether the key is good is 503, not a
	// challenge to send another key.
	agents := filepath.Join(sa[1], "chat", "agents.json")
	assert.Success(t, os.Remove(agents))
	assert.Success(t, os.Mkdir(agents, 0o700))
	resp, body = post("Bearer "+live, "")
	assert.True(t, resp.StatusCode == 503 && resp.Header.Get("WWW-Authenticate") == "", "an unreadable key store: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)

	plain := opsServe(t)
	req, _ := http.NewRequest(http.MethodPost, plain.base+chatrelay.PathMCP, strings.NewReader("{}"))
	r, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	r.Body.Close()
	assert.Equal(t, "without --mcp", r.StatusCode, 404)
}

// TestMCPRevokeEndsSessionsWithinASecond: `chatrelay agent revoke` in
// another process ends the key's MCP sessions within a second (measured
// from when the command started): a wait in flight returns an error, and
// the session's next call fails; on Redis with two nodes, sessions on
// both end. Another key's session goes on.
func TestMCPRevokeEndsSessionsWithinASecond(t *testing.T) {
	t.Parallel()
	bin := chatrelayBinary(t)
	storetest.Run(t, func(t *testing.T, backend string) {
		b := ownBackend(t, backend)
		sa := b.CLIArgs()
		nodes := []*mcpNode{serveMCP(t, sa)}
		if backend == storetest.Redis {
			nodes = append(nodes, serveMCP(t, sa))
		}
		owner := opsToken("mcp revoke")
		thread := chatrelay.ThreadOf(owner)
		assert.Equal(t, "post", personPost(t, nodes[0].base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
		key, id := addAgent(t, sa, "doomed")
		otherKey, _ := addAgent(t, sa, "kept")
		type call struct {
			err error
			r   *mcp.CallToolResult
			at  time.Time
		}
		var waits []chan call
		var sessions []*mcp.ClientSession
		for i, n := range nodes {
			progress := make(chan *mcp.ProgressNotificationParams, 64)
			cs := mcpClient(t, n.base, key, progress)
			sessions = append(sessions, cs)
			ch := make(chan call, 1)
			go func() {
				p := &mcp.CallToolParams{Name: chatrelay.ToolName("wait_messages"), Arguments: map[string]any{"thread": thread, "since": 1 << 50, "timeout": 60}}
				p.SetProgressToken(fmt.Sprint("wait-", i))
				r, err := cs.CallTool(context.WithoutCancel(t.Context()), p)
				ch <- call{err, r, time.Now()}
			}()
			waits = append(waits, ch)
			select { // the wait is in flight: it reports its progress
			case <-progress:
			case <-time.After(10 * time.Second):
				t.Fatalf("node %d: the wait reports no progress", i)
			}
		}
		kept := mcpClient(t, nodes[len(nodes)-1].base, otherKey, nil)

		cmd := exec.CommandContext(t.Context(), bin, append([]string{"agent", "revoke", id, "--fsync", "never"}, sa...)...)
		cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
		out, err := cmd.CombinedOutput()
		assert.True(t, err == nil && strings.Contains(string(out), "revoked "+id), "chatrelay agent revoke: %v %s", err, out)
		// The second counts from the revoke's write, not from the CLI's
		// start (revokedAt).
		revoked := revokedAt(t, b, id)
		for i, ch := range waits {
			var c call
			select {
			case c = <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("node %d: the wait in flight went on after the revoke", i)
			}
			// revoked_at is in whole milliseconds: a millisecond more.
			took := c.at.Sub(revoked) - time.Millisecond
			assert.True(t, c.err != nil || (c.r != nil && c.r.IsError), "node %d: the wait answered %+v", i, c.r)
			assert.True(t, took <= time.Second, "node %d: the session's wait ended %v after the revoke was stored", i, took)
			t.Logf("node %d: the wait ended %v after the revoke was stored", i, took.Round(time.Millisecond))
			_, err := sessions[i].CallTool(t.Context(), &mcp.CallToolParams{Name: chatrelay.ToolName("list_threads"), Arguments: map[string]any{}})
			assert.True(t, err != nil, "node %d: a call after the revoke went through", i)
		}
		r := callTool(t, kept, "list_threads", map[string]any{})
		assert.True(t, !r.IsError, "the other key's session: %+v", r)
	})
}

// TestMCPWaitOutlivesTheServerTimeouts: a tool call's answer comes on its
// POST's own event stream, so a wait holds its request open for as long
// as it waits: past the listener's read and write timeouts (30 s), which
// /mcp lifts (without that, the request is cut at 30 s and the call gets
// no answer). It waits the timeouts and 5 s more, really.
func TestMCPWaitOutlivesTheServerTimeouts(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	owner := opsToken("mcp long wait")
	thread := chatrelay.ThreadOf(owner)
	assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
	key, _ := addAgent(t, sa, "patient")
	cs := mcpClient(t, n.base, key, nil)
	wait := max(chatrelay.DefaultHTTPWriteTimeout, chatrelay.DefaultReadTimeout) + 5*time.Second
	p := &mcp.CallToolParams{Name: chatrelay.ToolName("wait_messages"),
		Arguments: map[string]any{"thread": thread, "since": 1 << 50, "timeout": int(wait.Seconds())}}
	p.SetProgressToken("long")
	r, err := cs.CallTool(t.Context(), p)
	assert.Success(t, err)
	var w struct {
		TimedOut bool `json:"timed_out"`
	}
	structured(t, r, &w)
	assert.True(t, !r.IsError && w.TimedOut, "the long wait's answer: %+v", r)
}

// TestMCPOverHTTPFromTheTypeScriptSDK: the official TypeScript SDK's
// StreamableHTTPClientTransport (testdata/mcpjs, pinned by its lock file),
// in Node, with an agent key: a wrong key is refused 401; it lists the
// tools with the bundle's input and output schemas, sends, opens an
// approval and waits, with a request timeout (3 s, standing in for its
// default 60 s) that progress notifications reset
// (resetTimeoutOnProgress), longer than that timeout, until the person
// approves; the answer is approved.
func TestMCPOverHTTPFromTheTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node := lookPath(t, "node")
	dir := installMCPClient(t, lookPath(t, "npm"))
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--progress-every", mcpserver.DefaultProgressEvery.String()) // the default, not serveMCP's 200ms
	owner := opsToken("mcp ts")
	thread := chatrelay.ThreadOf(owner)
	key, _ := addAgent(t, sa, "ts-agent")

	// The case as a user meets it: the SDK's default request
	// timeout (60 s), the server's default progress (every 10 s), and a
	// person who answers after 90 s.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, dir+"/httpclient.mjs", n.base+chatrelay.PathMCP, key, n.base, owner, thread, "90000")
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node httpclient.mjs: %v\n%s\nserver log:\n%s", err, stderr.String(), n.log)
	}
	type toolResult struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	var out struct {
		WrongKey struct {
			Code    int
			Message string
		}
		Server struct{ Name string }
		Tools  []struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		}
		Post, Respond              int
		Send, Ask, Wait            toolResult
		Progress                   []struct{ Progress, Total float64 }
		WaitedMs, RequestTimeoutMs float64
	}
	assert.Success(t, json.Unmarshal(stdout, &out))
	assert.True(t, out.WrongKey.Code == 401, "a wrong key: %+v", out.WrongKey)
	assert.Equal(t, "server", out.Server.Name, "chatrelay")
	assert.Equal(t, "tools", len(out.Tools), len(chatrelay.Verbs()))
	for _, tl := range out.Tools {
		verb := strings.TrimPrefix(tl.Name, "chatrelay_")
		def, ok := chatrelay.SchemaDef(verb + ".input")
		assert.True(t, ok && schematest.SameJSON(tl.InputSchema, def), "%s's input schema: %s", tl.Name, tl.InputSchema)
		assert.True(t, schematest.SameJSON(tl.OutputSchema, mcpserver.OutputSchema(verb)), "%s's output schema: %s", tl.Name, tl.OutputSchema)
	}
	assert.Equal(t, "the person's post", out.Post, 201)
	for verb, r := range map[string]toolResult{"send": out.Send, "request_approval": out.Ask, "wait_interaction": out.Wait} {
		assert.True(t, !r.IsError, "chatrelay_%s: %+v", verb, r)
		schematest.Valid(t, verb+".result", r.StructuredContent)
	}
	var sent struct{ Message chatrelay.Message }
	assert.Success(t, json.Unmarshal(out.Send.StructuredContent, &sent))
	assert.Equal(t, "author_name", sent.Message.AuthorName, "ts-agent")
	assert.Equal(t, "the person's answer", out.Respond, 200)
	var waited host_InteractionResult
	assert.Success(t, json.Unmarshal(out.Wait.StructuredContent, &waited))
	assert.Equal(t, "the wait's outcome", waited.Interaction.State, chatrelay.Approved)
	assert.True(t, out.WaitedMs > out.RequestTimeoutMs, "the wait (%v ms) did not outlive the request timeout (%v ms)", out.WaitedMs, out.RequestTimeoutMs)
	assert.Equal(t, "the SDK's default request timeout (ms)", out.RequestTimeoutMs, 60000.0)
	assert.True(t, out.WaitedMs >= 90000, "the wait lasted %v ms, want 90 s", out.WaitedMs)
	assert.True(t, len(out.Progress) >= 8, "progress notifications: %d", len(out.Progress))
}

// TestMCPBounds: past --mcp-sessions-per-key, a new session of the key
// ends the key's least recently used session with no tool call in flight
// (an agent that restarted without ending its session gets in at once);
// with every session of the key in a call it is refused 429
// too_many_streams, and another key still connects. A key's writes past
// its window (--rate-ip: the key counts as one client address) are the
// tool's error rate_limited, which stores nothing.
func TestMCPBounds(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--mcp-sessions-per-key", "1", "--rate-ip", "1")
	owner := opsToken("mcp bounds")
	thread := chatrelay.ThreadOf(owner)
	assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
	key, _ := addAgent(t, sa, "busy")
	crashed := mcpClient(t, n.base, key, nil) // never ended: its agent crashed
	progress := make(chan *mcp.ProgressNotificationParams, 64)
	cs := mcpClient(t, n.base, key, progress) // the agent again
	_, err := crashed.CallTool(t.Context(), &mcp.CallToolParams{Name: chatrelay.ToolName("list_threads"), Arguments: map[string]any{}})
	assert.True(t, err != nil, "the session that made room still answers")
	assert.True(t, strings.Contains(n.log.String(), "least recently used session ended"), "the room made is not logged: %s", n.log.String())

	ctx, cancel := context.WithCancel(t.Context())
	waited := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: chatrelay.ToolName("wait_messages"), Arguments: map[string]any{"thread": thread, "since": 1 << 50, "timeout": 60}}
		p.SetProgressToken("busy")
		_, err := cs.CallTool(ctx, p)
		waited <- err
	}()
	select { // the wait is in flight: it reports its progress
	case <-progress:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait reports no progress")
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "second", Version: "1"}, nil)
	_, err = c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: n.base + chatrelay.PathMCP,
		HTTPClient: &http.Client{Transport: bearerTransport{key}}, MaxRetries: -1}, nil)
	assert.True(t, err != nil && strings.Contains(err.Error(), "Too Many Requests"), "a second session of the key while its one is in a call: %v", err) // 429
	cancel()
	<-waited
	other, _ := addAgent(t, sa, "other")
	mcpClient(t, n.base, other, nil)

	r := callTool(t, cs, "send", map[string]any{"thread": thread, "text": "one"})
	assert.True(t, !r.IsError, "the first send: %+v", r)
	r = callTool(t, cs, "send", map[string]any{"thread": thread, "text": "two"})
	var te mcpserver.ToolError
	structured(t, r, &te)
	assert.True(t, r.IsError && te.Code == chatrelay.RateLimited, "the second send: %+v", te)
	rd := runCLI(t, nil, "", append([]string{"show", thread, "--json"}, sa...)...)
	assert.Success(t, rd.err)
	assert.True(t, !strings.Contains(rd.stdout, `"two"`), "the refused send was stored: %s", rd.stdout)
}

// TestMCPIdleSessionEnds: a session with no request for --mcp-idle ends
// (the SDK's session timeout); a call on it then fails, and a new session
// of the same key works. (The SDK's line of the end is at debug.)
func TestMCPIdleSessionEnds(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--mcp-idle", "300ms", "--log-level", "debug")
	key, _ := addAgent(t, sa, "sleepy")
	cs := mcpClient(t, n.base, key, nil)
	assert.Eventually(t, 10*time.Second, "the idle session's end", func() bool {
		return strings.Contains(n.log.String(), `msg="server session disconnected" session_id=`+cs.ID())
	})
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: chatrelay.ToolName("list_threads"), Arguments: map[string]any{}})
	assert.True(t, err != nil, "a call on the ended session went through")
	r := callTool(t, mcpClient(t, n.base, key, nil), "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "a new session: %+v", r)
}

// TestMCPAttachmentHonoursMaxAttachmentBytes: a tool call's file over MCP
// HTTP is bounded by the server's --max-attachment-bytes, as an upload
// over the API is: at the limit it is stored, one byte past it is the
// tool's error attachment_too_large and nothing is stored. The tools'
// input schemas state that limit, not the default (they said 10485760).
func TestMCPAttachmentHonoursMaxAttachmentBytes(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--max-attachment-bytes", "1000")
	owner := opsToken("mcp attachment limit")
	thread := chatrelay.ThreadOf(owner)
	assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
	key, _ := addAgent(t, sa, "limited")
	cs := mcpClient(t, n.base, key, nil)
	file := func(size int) map[string]any {
		return map[string]any{"name": "f.bin", "type": "application/octet-stream", "data": make([]byte, size)}
	}

	tools, err := cs.ListTools(t.Context(), nil)
	assert.Success(t, err)
	stated := 0
	for _, tool := range tools.Tools {
		in, err := json.Marshal(tool.InputSchema)
		assert.Success(t, err)
		if strings.Contains(string(in), `"attachments"`) {
			stated++
			assert.True(t, strings.Contains(string(in), "at most 1000 bytes once decoded") && !strings.Contains(string(in), strconv.Itoa(chatrelay.LimitAttachmentBytes.Max)),
				"%s's input schema states another limit of a file than --max-attachment-bytes 1000: %s", tool.Name, in)
		}
	}
	assert.True(t, stated > 0, "no tool takes attachments")

	r := callTool(t, cs, "send", map[string]any{"thread": thread, "text": "at", "attachments": []any{file(1000)}})
	assert.True(t, !r.IsError, "a file of --max-attachment-bytes: %+v", r)
	r = callTool(t, cs, "send", map[string]any{"thread": thread, "text": "past", "attachments": []any{file(1001)}})
	var te mcpserver.ToolError
	structured(t, r, &te)
	assert.True(t, r.IsError && te.Code == chatrelay.AttachmentTooLarge, "a file one byte past --max-attachment-bytes: %+v", te)
	rd := runCLI(t, nil, "", append([]string{"show", thread, "--json"}, sa...)...)
	assert.Success(t, rd.err)
	assert.True(t, !strings.Contains(rd.stdout, `"past"`), "the refused send was stored: %s", rd.stdout)
}

// TestMCPFromAnAllowedOriginsPage: a page of an origin listed with
// --allowed-origin can use MCP over HTTP, as the refusal of another
// origin tells (name it with --allowed-origin): the browser's preflight
// (Authorization and MCP's own headers) is answered 204 with CORS, and
// each answer lets the page read it and its Mcp-Session-Id. The preflight
// was 405 and no answer had CORS headers, so no browser let a page of any
// origin make one request. Another origin still gets none.
func TestMCPFromAnAllowedOriginsPage(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	const app = "https://app.example.com"
	n := serveMCP(t, sa, "--allowed-origin", app)
	key, _ := addAgent(t, sa, "page")
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, n.base+chatrelay.PathMCP, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,mcp-protocol-version,mcp-session-id")
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		resp.Body.Close()
		return resp
	}
	resp := preflight(app)
	assert.Equal(t, "the preflight's status", resp.StatusCode, http.StatusNoContent)
	assert.Equal(t, "the preflight's Access-Control-Allow-Origin", resp.Header.Get("Access-Control-Allow-Origin"), app)
	allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
	for _, h := range []string{"authorization", "content-type", "mcp-protocol-version", "mcp-session-id", "last-event-id"} {
		assert.True(t, strings.Contains(allowed, h), "the preflight allows the headers %q, not %s", allowed, h)
	}
	for _, m := range []string{"POST", "GET", "DELETE"} {
		assert.True(t, strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), m), "the preflight allows %q, not %s", resp.Header.Get("Access-Control-Allow-Methods"), m)
	}

	req, _ := http.NewRequest(http.MethodPost, n.base+chatrelay.PathMCP, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"page","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Origin", app)
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	resp.Body.Close()
	assert.True(t, resp.StatusCode == 200 && resp.Header.Get("Mcp-Session-Id") != "", "initialize from the page: %d", resp.StatusCode)
	assert.Equal(t, "the answer's Access-Control-Allow-Origin", resp.Header.Get("Access-Control-Allow-Origin"), app)
	exposed := strings.ToLower(resp.Header.Get("Access-Control-Expose-Headers"))
	for _, h := range []string{"mcp-session-id", "www-authenticate", "retry-after"} {
		assert.True(t, strings.Contains(exposed, h), "the answer exposes %q, not %s", exposed, h)
	}

	resp = preflight("https://evil.example")
	assert.Equal(t, "another origin's preflight: Access-Control-Allow-Origin", resp.Header.Get("Access-Control-Allow-Origin"), "")
}

// TestMCPRefusesTwoKeys: a request with two Authorization headers is
// refused 401 unauthorized, as every route of the API refuses a
// credential sent twice: a proxy or a client library may read the other
// one. It was served with the first, even with a second key's beside it.
func TestMCPRefusesTwoKeys(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "first")
	other, _ := addAgent(t, sa, "second")
	for _, second := range []string{other, key, "cha_" + strings.Repeat("A", 43)} {
		req, _ := http.NewRequest(http.MethodPost, n.base+chatrelay.PathMCP, strings.NewReader(mcpInitialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Add("Authorization", "Bearer "+key)
		req.Header.Add("Authorization", "Bearer "+second)
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.True(t, resp.StatusCode == 401 && resp.Header.Get("Mcp-Session-Id") == "" && strings.Contains(string(b), `"code":"unauthorized"`),
			"two Authorization headers: %d %s", resp.StatusCode, b)
	}
}

// TestMCPNoSessionButInitialize: a POST without Mcp-Session-Id that is
// not an initialize request (a tool call, a notification, a response, or a
// batch of them: a JSON array, MCP 2025-03-26) is 400 invalid_json saying
// what to do, makes no session and logs no error. The SDK answered it 200
// with a JSON-RPC error of code 0, made and dropped a session, and logged
// it at error level: any key holder could fill the log. An initialize,
// alone or in a batch, still makes a session.
func TestMCPNoSessionButInitialize(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "sessionless")
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`,
		` [{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"result":{}}]`,
		// The SDK matches keys in their own case: to it these hold no
		// method (a response), whatever "METHOD" says.
		`{"jsonrpc":"2.0","id":1,"METHOD":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"initialize"}`,
	} {
		resp := mcpPost(t, n.base, key, "", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, body+": status", resp.StatusCode, http.StatusBadRequest)
		assert.True(t, strings.Contains(string(b), `"code":"invalid_json"`) && strings.Contains(string(b), "initialize"), "%s: %s", body, b)
	}
	log := n.log.String()
	assert.True(t, !strings.Contains(log, "level=ERROR") && !strings.Contains(log, "server session connected"), "the log: %s", log)
	cs := mcpClient(t, n.base, key, nil) // an initialize still makes a session
	r := callTool(t, cs, "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "list_threads: %+v", r)
	resp := mcpPost(t, n.base, key, "", `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"batch","version":"1"}}}]`)
	resp.Body.Close()
	assert.Equal(t, "a batch's initialize: status", resp.StatusCode, http.StatusOK)
	assert.True(t, resp.Header.Get("Mcp-Session-Id") != "", "a batch's initialize made no session")
}

// TestMCPBoundsAnyRequestIsUse: the session a new one ends to make room is
// the one whose last request of any kind (a ping, tools/list) is the
// oldest, not the one whose last tool call is: the idle timeout counts
// every request, and an agent that pings to keep its session was ended
// before a crashed agent's session that made one more tool call.
func TestMCPBoundsAnyRequestIsUse(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--mcp-sessions-per-key", "2")
	key, _ := addAgent(t, sa, "pinger")
	pinger := mcpClient(t, n.base, key, nil)
	crashed := mcpClient(t, n.base, key, nil)
	assert.Success(t, pinger.Ping(t.Context(), nil))
	_, err := pinger.ListTools(t.Context(), nil)
	assert.Success(t, err)
	mcpClient(t, n.base, key, nil) // one more: room is made
	assert.Success(t, pinger.Ping(t.Context(), nil))
	assert.True(t, crashed.Ping(t.Context(), nil) != nil, "the session used longest ago still answers")
}

// TestMCPNodeFullOtherKeys: past --mcp-sessions, a key with no session of
// its own is refused 429 (another key's sessions are never ended for it),
// in words that say the node is full, not that each of its sessions is in
// a call: it has none.
func TestMCPNodeFullOtherKeys(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--mcp-sessions", "1")
	first, _ := addAgent(t, sa, "first")
	second, _ := addAgent(t, sa, "second")
	mcpClient(t, n.base, first, nil)
	resp := mcpPost(t, n.base, second, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"second","version":"1"}}}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "status", resp.StatusCode, http.StatusTooManyRequests)
	assert.True(t, strings.Contains(string(b), `"code":"too_many_streams"`) && strings.Contains(string(b), "--mcp-sessions") && !strings.Contains(string(b), "each of this key's"), "%s", b)
}

// TestMCPReplayCountsInNoWindow: a write repeated with its client_id (an
// agent's retry after its answer was lost: a client timeout, a dropped
// connection) stores nothing, counts in no rate window and, over a full
// window, still answers the first message (or client_id_conflict for
// another text), as a repeated POST /api/chat/post does. Over MCP HTTP
// every repeat was counted against the thread's and the key's windows,
// and once they were full the retry was the tool's error rate_limited
// (agentprobe, with the TypeScript SDK: one stored message repeated 25
// times was answered 18 times, then rate_limited).
func TestMCPReplayCountsInNoWindow(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		sa := mcpStoreArgs(t, backend)
		n := serveMCP(t, sa, "--rate-ip", "2")
		owner := opsToken("mcp replay")
		thread := chatrelay.ThreadOf(owner)
		assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
		key, _ := addAgent(t, sa, "retrier")
		cs := mcpClient(t, n.base, key, nil)
		send := func(text, clientID string) (mcpserver.ToolError, bool) {
			t.Helper()
			te, replayed, err := sendTool(t.Context(), cs, thread, text, clientID)
			assert.Success(t, err)
			return te, replayed
		}
		_, replayed := send("one", "c1")
		assert.True(t, !replayed, "the first send was a replay")
		for i := range 3 {
			te, replayed := send("one", "c1")
			assert.True(t, replayed, "repeat %d: %+v", i, te)
		}
		te, replayed := send("two", "c2") // the key's window (2) holds one post: "one"
		assert.True(t, te.Code == "" && !replayed, "a second message after repeats of the first: %+v", te)
		te, _ = send("three", "c3")
		assert.Equal(t, "a third message", te.Code, chatrelay.RateLimited)
		te, replayed = send("one", "c1") // over a full window
		assert.True(t, replayed, "a repeat over a full window: %+v", te)
		te, _ = send("not two", "c2")
		assert.Equal(t, "another text under a stored client_id, over a full window", te.Code, chatrelay.ClientIDConflict)
	})
}

// TestMCPSessionInitializedOnce: an initialize request sent again in a
// session (with its Mcp-Session-Id), alone or in a batch, is 400
// invalid_json saying that a new session starts without the header, and
// logs no error; the session goes on. The SDK answered it 200 with a
// JSON-RPC error of code 0 (no JSON-RPC code) and logged it at error
// level, one line a request: any key holder could fill the log, as
// without a session (TestMCPNoSessionButInitialize). The exchange
// (agentprobe, curl):
//
//	→ POST /mcp  Mcp-Session-Id: F5PI…  {"jsonrpc":"2.0","id":3,"method":"initialize","params":{…}}
//	← 200 text/event-stream  data: {"jsonrpc":"2.0","id":3,"error":{"code":0,"message":"duplicate \"initialize\" received"}}
//	  log: level=ERROR msg="duplicate initialize request"
func TestMCPSessionInitializedOnce(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "twice")
	cs := mcpClient(t, n.base, key, nil)
	const initialize = `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"again","version":"1"}}}`
	for _, body := range []string{initialize, `[{"jsonrpc":"2.0","id":8,"method":"ping"},` + initialize + `]`} {
		resp := mcpPost(t, n.base, key, cs.ID(), body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, body+": status", resp.StatusCode, http.StatusBadRequest)
		assert.True(t, strings.Contains(string(b), `"code":"invalid_json"`) && strings.Contains(string(b), "Mcp-Session-Id"), "%s: %s", body, b)
	}
	assert.True(t, !strings.Contains(n.log.String(), "level=ERROR"), "the log: %s", n.log.String())
	r := callTool(t, cs, "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "the session after: %+v", r)
}

// TestMCPInitializeParamsMalformed: an initialize request whose params
// are not MCP's (a protocolVersion that is no string, clientInfo that is
// no object) is 400 invalid_json, and makes no session. The SDK answered
// 200 with a JSON-RPC error of code 0 (no JSON-RPC code), which echoed the
// params, and an Mcp-Session-Id header naming a session that the next
// request found gone (404):
//
//	→ POST /mcp  {"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5,…}}
//	← 200 Mcp-Session-Id: ERK5…  data: {"jsonrpc":"2.0","id":1,"error":{"code":0,"message":"handling 'initialize': unmarshaling \"{\\\"protocolVersion\\\":5,…"}}
func TestMCPInitializeParamsMalformed(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "malformed")
	for _, params := range []string{
		`{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}`,
		`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":"t"}`,
		`{"protocolVersion":"2025-06-18","capabilities":[],"clientInfo":{"name":"t","version":"1"}}`,
		`"2025-06-18"`,
	} {
		resp := mcpPost(t, n.base, key, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":`+params+`}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, params+": status", resp.StatusCode, http.StatusBadRequest)
		assert.True(t, strings.Contains(string(b), `"code":"invalid_json"`), "%s: %s", params, b)
		assert.Equal(t, params+": the session made", resp.Header.Get("Mcp-Session-Id"), "")
	}
	cs := mcpClient(t, n.base, key, nil) // a good one
	r := callTool(t, cs, "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "a session after: %+v", r)
}

// TestMCPBodyIsOneJSONValue: a POST body that holds more than one JSON
// value (a message and anything after it) is 400 invalid_mcp_request, as
// on stdio a line with two values is -32700: the SDK answered the first
// message and dropped the rest unsaid (a client that wrote two messages
// in one body saw one answered and the other never). White space after
// the message is no value.
//
//	→ POST /mcp  {"jsonrpc":"2.0","id":3,"method":"ping"}{"jsonrpc":"2.0","id":4,"method":"ping"}
//	← 200  data: {"jsonrpc":"2.0","id":3,"result":{}}
func TestMCPBodyIsOneJSONValue(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "twovalues")
	cs := mcpClient(t, n.base, key, nil)
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":3,"method":"ping"}{"jsonrpc":"2.0","id":4,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":3,"method":"ping"} garbage`,
		`[{"jsonrpc":"2.0","id":3,"method":"ping"}]]`,
	} {
		resp := mcpPost(t, n.base, key, cs.ID(), body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, body+": status", resp.StatusCode, http.StatusBadRequest)
		assert.True(t, strings.Contains(string(b), `"code":"invalid_mcp_request"`), "%s: %s", body, b)
	}
	resp := mcpPost(t, n.base, key, cs.ID(), "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\r\n ")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.True(t, resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"id":5`), "a message and white space: %d %s", resp.StatusCode, b)
}

// TestMCPBodyNestedTooDeep: a POST body nested past the SDK's 1 000
// levels of objects and arrays is 400 invalid_mcp_request (the SDK's
// "malformed payload"), a megabyte of '[' too, which the server's own
// decoding of the body took minutes over before it was bounded as the
// SDK's is; the session goes on.
func TestMCPBodyNestedTooDeep(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "deep")
	cs := mcpClient(t, n.base, key, nil)
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":` + deep(999) + `}}`,
		`[{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":` + deep(998) + `}}]`,
		`{"jsonrpc":"2.0","id":3,"method":"ping","params":` + deep(chatrelay.MaxMCPBody/2-100) + `}`,
	} {
		resp := mcpPost(t, n.base, key, cs.ID(), body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, "a body 1 001 deep or more: status", resp.StatusCode, http.StatusBadRequest)
		assert.True(t, strings.Contains(string(b), `"code":"invalid_mcp_request"`) && strings.Contains(string(b), "nesting depth"), "a body 1 001 deep or more: %.300s", b)
	}
	r := callTool(t, cs, "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "a call after: %+v", r)
}

// TestMCPIDIsAStringOrAnInteger: a request whose id is neither a string
// nor an integer the SDK keeps exactly (1.5, 2^53+1) is 400 invalid_json,
// as chatrelay mcp refuses it on stdio (-32600). The SDK answered it with
// another id: 1.5 as 1, so a client with a request 1 in flight had that
// call's answer taken by the other one (agentprobe, curl:
// {"jsonrpc":"2.0","id":1.5,"method":"ping"} answered
// {"jsonrpc":"2.0","id":1,"result":{}}). Integer and string ids are
// answered with themselves.
func TestMCPIDIsAStringOrAnInteger(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "ids")
	cs := mcpClient(t, n.base, key, nil)
	for _, id := range []string{`1.5`, `9007199254740993`, `-9007199254740993`, `true`, `[1]`} {
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`
		resp := mcpPost(t, n.base, key, cs.ID(), body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, body+": status", resp.StatusCode, http.StatusBadRequest)
		assert.True(t, strings.Contains(string(b), `"code":"invalid_json"`), "%s: %s", body, b)
	}
	for _, id := range []string{`7`, `"seven"`, `9007199254740992`} {
		resp := mcpPost(t, n.base, key, cs.ID(), `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, id+": status", resp.StatusCode, http.StatusOK)
		assert.True(t, strings.Contains(string(b), `"id":`+id+`,`), "id %s: %s", id, b)
	}
}

// TestMCPArgumentsNotUTF8: a tool call whose arguments hold bytes that
// are not UTF-8 is the tool's error invalid_text and stores nothing, as
// POST /api/chat/post refuses such a text (and chatrelay mcp such a line).
// Over MCP HTTP the text was stored with each bad byte changed into
// U+FFFD (agentprobe, curl: chatrelay_send {"text":"bad \xff byte"}
// answered "sent", and the thread showed "bad � byte").
func TestMCPArgumentsNotUTF8(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	owner := opsToken("mcp utf8")
	thread := chatrelay.ThreadOf(owner)
	assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
	key, _ := addAgent(t, sa, "bytes")
	cs := mcpClient(t, n.base, key, nil)
	for i, args := range []string{
		`{"name":"chatrelay_send","arguments":{"thread":"` + thread + `","text":"bad ` + "\xff" + ` byte"}}`,
		`{"name":"chatrelay_request_input","arguments":{"thread":"` + thread + `","prompt":"cut ` + "\xc3" + `","allow_text":true}}`,
	} {
		resp := mcpPost(t, n.base, key, cs.ID(), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, 10+i, args))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.True(t, strings.Contains(string(b), `"isError":true`) && strings.Contains(string(b), `"code":"invalid_text"`), "%s: %s", args, b)
	}
	req, _ := http.NewRequest(http.MethodGet, n.base+chatrelay.PathPoll, nil)
	req.Header.Set("X-Chat-Token", owner)
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	v1, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.True(t, strings.Count(string(v1), `"id":"MSG-`) == 1, "the refused calls stored: %s", v1)
}

// TestMCPClientMistakesAreNoErrors: a client's protocol mistake in a
// session that the SDK answers itself (notifications/initialized sent
// twice) is no error line: the SDK logged "duplicate initialized
// notification" at error level, one line a request, so any key holder
// could fill the log with errors no operator can act on. It is logged at
// info, and the session goes on.
func TestMCPClientMistakesAreNoErrors(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "mistaken")
	cs := mcpClient(t, n.base, key, nil) // it sent notifications/initialized
	for range 3 {
		resp := mcpPost(t, n.base, key, cs.ID(), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		resp.Body.Close()
	}
	assert.Eventually(t, 10*time.Second, "the duplicate's log line", func() bool {
		return strings.Count(n.log.String(), "duplicate initialized notification") == 3
	})
	assert.True(t, !strings.Contains(n.log.String(), "level=ERROR"), "the log: %s", n.log.String())
	r := callTool(t, cs, "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "the session after: %+v", r)
}

// TestMCPNewProtocolVersionIsNoWarning: a call in a session made as
// MCP 2026-07-28, or one whose _meta names a protocol version (SEP-2575),
// which the SDK refuses on a server with sessions (-32022), is a client's
// mistake, logged at info: the SDK logged it at warn, one line a request,
// so any key holder could fill the log with warnings no operator can act
// on. The session goes on.
func TestMCPNewProtocolVersionIsNoWarning(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "early")
	cs := mcpClient(t, n.base, key, nil)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`
	meta := `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}}}`
	for _, r := range []*http.Response{
		mcpDo(t, http.MethodPost, n.base, key, call, "Mcp-Session-Id", cs.ID(), "MCP-Protocol-Version", "2026-07-28"),
		mcpPost(t, n.base, key, cs.ID(), meta),
	} {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		assert.True(t, r.StatusCode == http.StatusBadRequest && strings.Contains(string(body), "-32022"), "the refusal: %d %s", r.StatusCode, body)
	}
	assert.Eventually(t, 10*time.Second, "the refusals' log lines", func() bool {
		return strings.Count(n.log.String(), "rejecting request with protocol version") == 2
	})
	for line := range strings.Lines(n.log.String()) {
		assert.True(t, !strings.Contains(line, "rejecting request") || strings.Contains(line, "level=INFO"), "a client's mistake logged above info: %s", line)
	}
	r := callTool(t, cs, "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "the session after: %+v", r)
}

// TestMCPOpenThreadCountsInTheKeysWindow: chatrelay_open_thread over MCP
// HTTP counts in the key's window (--rate-ip: the key is one client
// address), as a post that makes a thread counts in its address's: past
// it, the tool's error is rate_limited and no thread is made. It counted
// in no window, so one key made threads in a loop until the store held
// --max-threads, and every person's new thread was refused 507 until
// retention (agentprobe, TypeScript SDK: 45 calls in a second, 45
// threads).
func TestMCPOpenThreadCountsInTheKeysWindow(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		sa := mcpStoreArgs(t, backend)
		n := serveMCP(t, sa, "--rate-ip", "2")
		key, _ := addAgent(t, sa, "opener")
		cs := mcpClient(t, n.base, key, nil)
		for i := range 2 {
			r := callTool(t, cs, "open_thread", map[string]any{"text": fmt.Sprintf("hello %d", i)})
			assert.True(t, !r.IsError, "open_thread %d: %+v", i, r)
		}
		r := callTool(t, cs, "open_thread", map[string]any{"text": "one too many"})
		var te mcpserver.ToolError
		structured(t, r, &te)
		assert.True(t, r.IsError && te.Code == chatrelay.RateLimited, "the third open_thread: %+v", te)
		var list struct {
			Threads []struct{ Thread string } `json:"threads"`
		}
		structured(t, callTool(t, cs, "list_threads", map[string]any{}), &list)
		assert.Equal(t, "threads", len(list.Threads), 2)
	})
}

// TestMCPHeadIsNotAllowed: HEAD is no method of /mcp (its GET opens the
// session's event stream, and HEAD on a stream is none, as on the API's
// streams): 405 with the API's JSON answer and Allow naming its three
// methods, with a key or without one. Before, HEAD reached MCP: 401
// without a key (a challenge to send one, for a method never served), and
// with one the SDK's plain-text 405.
func TestMCPHeadIsNotAllowed(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "builder")
	for _, auth := range []string{"", "Bearer " + key} {
		req, _ := http.NewRequest(http.MethodHead, n.base+chatrelay.PathMCP, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		resp.Body.Close()
		assert.Equal(t, fmt.Sprintf("HEAD with %q: status", auth), resp.StatusCode, http.StatusMethodNotAllowed)
		assert.Equal(t, fmt.Sprintf("HEAD with %q: Allow", auth), resp.Header.Get("Allow"), "POST, GET, DELETE")
		assert.Equal(t, fmt.Sprintf("HEAD with %q: Content-Type", auth), resp.Header.Get("Content-Type"), "application/json")
		assert.Equal(t, fmt.Sprintf("HEAD with %q: WWW-Authenticate", auth), resp.Header.Get("WWW-Authenticate"), "")
	}
}

// TestMCPRefusalsOfTheSDKAreTheAPIsErrors: what MCP's transport refuses
// itself (the SDK's checks: a session the server does not know or made
// with another key, an Accept or a Content-Type it does not take, a
// protocol version it does not speak, a GET or DELETE without a session)
// is answered with the API's error body and a machine code, at the SDK's
// status, as every other refusal of the route. Before, each was the SDK's
// plain text, which no client tells from a proxy's page.
func TestMCPRefusalsOfTheSDKAreTheAPIsErrors(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "builder")
	other, _ := addAgent(t, sa, "other")
	do := func(method, key, body string, header ...string) (*http.Response, []byte) {
		t.Helper()
		resp := mcpDo(t, method, n.base, key, body, header...)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	resp, body := do(http.MethodPost, key, mcpInitialize)
	assert.Equal(t, "initialize "+string(body), resp.StatusCode, 200)
	sid := resp.Header.Get("Mcp-Session-Id")
	const list = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	for _, c := range []struct {
		name, method, key, body string
		header                  []string
		status                  int
		code                    chatrelay.Code
	}{
		{"a session the server does not know", http.MethodPost, key, list, []string{"Mcp-Session-Id", "not-a-session"}, 404, chatrelay.NotFound},
		{"a GET of a session the server does not know", http.MethodGet, key, "", []string{"Mcp-Session-Id", "not-a-session", "Accept", "text/event-stream"}, 404, chatrelay.NotFound},
		{"a session made with another key", http.MethodPost, other, list, []string{"Mcp-Session-Id", sid}, 403, chatrelay.NotPermitted},
		{"an Accept without text/event-stream", http.MethodPost, key, mcpInitialize, []string{"Accept", "application/json"}, 400, chatrelay.InvalidMCPRequest},
		{"a Content-Type that is not JSON", http.MethodPost, key, mcpInitialize, []string{"Content-Type", "text/plain"}, 415, chatrelay.UnsupportedMediaType},
		{"a protocol version the server does not speak", http.MethodPost, key, mcpInitialize, []string{"MCP-Protocol-Version", "1999-01-01"}, 400, chatrelay.InvalidMCPRequest},
		{"a GET without a session", http.MethodGet, key, "", []string{"Accept", "text/event-stream"}, 400, chatrelay.InvalidMCPRequest},
		{"a DELETE without a session", http.MethodDelete, key, "", nil, 400, chatrelay.InvalidMCPRequest},
	} {
		resp, body := do(c.method, c.key, c.body, c.header...)
		var e struct {
			Success   *bool          `json:"success"`
			Error     string         `json:"error"`
			Code      chatrelay.Code `json:"code"`
			Retryable *bool          `json:"retryable"`
		}
		err := json.Unmarshal(body, &e)
		assert.True(t, resp.StatusCode == c.status && err == nil && e.Success != nil && !*e.Success && e.Code == c.code && e.Error != "" && e.Retryable != nil,
			"%s: %d %s %s, want %d with code %s", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status, c.code)
		assert.Equal(t, c.name+": Content-Type", resp.Header.Get("Content-Type"), "application/json")
	}
	// The session lives on: a refusal ended nothing.
	resp, body = do(http.MethodPost, key, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", sid)
	assert.Equal(t, "initialized "+string(body), resp.StatusCode, http.StatusAccepted)
	resp, body = do(http.MethodPost, key, list, "Mcp-Session-Id", sid)
	assert.True(t, resp.StatusCode == 200 && strings.Contains(string(body), `"name":"chatrelay_list_threads"`), "tools/list after the refusals: %d %.200s", resp.StatusCode, body)
}

// TestMCPRefusalsQuoteTheAgentsOwnWords: a refusal of a request made
// with an active agent key shows its words as the owner's view does, as
// the agent's tool results do: the SDK's "malformed Last-Event-ID" quotes
// the header the agent sent, whole. Before, /mcp's refusals were all in
// a participant's view, which redacted the agent's own words.
func TestMCPRefusalsQuoteTheAgentsOwnWords(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "builder")
	resp := mcpDo(t, http.MethodPost, n.base, key, mcpInitialize)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	const id = "sk-live_0123456789abcdefghij" // a secret's shape, which a participant's view redacts
	resp = mcpDo(t, http.MethodGet, n.base, key, "", "Mcp-Session-Id", sid, "Accept", "text/event-stream", "Last-Event-ID", id)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.True(t, resp.StatusCode == http.StatusBadRequest && strings.Contains(string(b), id), "a malformed Last-Event-ID: %d %s, want 400 quoting %q", resp.StatusCode, b, id)
}

// TestMCPSessionLinesAreDebug: the MCP SDK's own lines of a session's
// life (server connecting, server session connected with its session id,
// session initialized, client log level set, disconnected) are at debug:
// at info, the level of the documented lines, every key holder wrote four
// lines a session and the log held each session's Mcp-Session-Id (with
// the key, what resumes the session). The audit line of a tool call stays
// at info.
func TestMCPSessionLinesAreDebug(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "quiet")
	cs := mcpClient(t, n.base, key, nil)
	resp := mcpPost(t, n.base, key, cs.ID(), `{"jsonrpc":"2.0","id":90,"method":"logging/setLevel","params":{"level":"debug"}}`)
	resp.Body.Close()
	r := callTool(t, cs, "list_threads", map[string]any{})
	assert.True(t, !r.IsError, "list_threads: %+v", r)
	assert.Eventually(t, 10*time.Second, "the tool call's audit line", func() bool {
		return strings.Contains(n.log.String(), `msg="mcp tool call"`)
	})
	log := n.log.String()
	for _, s := range []string{cs.ID(), "session_id", "server connecting", "session initialized", "client log level set"} {
		assert.True(t, !strings.Contains(log, s), "the log at info holds %q:\n%s", s, log)
	}
}

// TestMCPEvictionEndsItsSessionInTheLog: at --log-level debug, a session
// ended to make room says so as a DELETE's does ("mcp: a session ends",
// with the key's id), after the info line of the room made, even when its
// client never sends a DELETE (it crashed): the eviction's end of the
// session logged to a discard logger, so only a client's DELETE, if any,
// put the line in the log.
func TestMCPEvictionEndsItsSessionInTheLog(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--mcp-sessions-per-key", "1", "--log-level", "debug")
	key, id := addAgent(t, sa, "restarts")
	session := func() string { // a client that never ends its session (no DELETE)
		resp := mcpPost(t, n.base, key, "", mcpInitialize)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, "initialize", resp.StatusCode, http.StatusOK)
		sid := resp.Header.Get("Mcp-Session-Id")
		resp = mcpPost(t, n.base, key, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		resp.Body.Close()
		return sid
	}
	session()
	assert.True(t, !strings.Contains(n.log.String(), "mcp: a session ends"), "a session ends before any eviction: %s", n.log.String())
	session() // the agent again: the first makes room
	log := n.log.String()
	assert.True(t, strings.Contains(log, "least recently used session ended"), "the room made is not logged: %s", log)
	assert.True(t, strings.Contains(log, `msg="mcp: a session ends: its calls in flight were ended" agent=`+id), "the evicted session's end is not logged: %s", log)
}
