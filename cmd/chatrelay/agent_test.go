package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/transport"
)

// TestSchemaCommand: chatrelay schema prints the bundle and --limits the
// limits artifact, the bytes the server serves and the repository
// commits.
func TestSchemaCommand(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "", "schema")
	assert.Success(t, r.err)
	assert.Equal(t, "schema", r.stdout, string(chatrelay.Schema()))
	committed, err := os.ReadFile("../../schema/chatrelay.schema.json")
	assert.Success(t, err)
	assert.Equal(t, "the committed bundle", r.stdout, string(committed))
	r = runCLI(t, nil, "", "schema", "--limits")
	assert.Success(t, r.err)
	schematest.Valid(t, "limits.answer", []byte(r.stdout))
	committed, err = os.ReadFile("../../schema/limits.json")
	assert.Success(t, err)
	assert.Equal(t, "the committed limits", r.stdout, string(committed))
	assert.Equal(t, "an operand", exitCode(runCLI(t, nil, "", "schema", "extra").err), 2)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// chatrelayBinary builds the command once per test process.
func chatrelayBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chatrelay-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "chatrelay")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = err
			t.Logf("go build: %s", out)
		}
	})
	assert.Success(t, binErr)
	return binPath
}

// agentEnv is a chat server in this process and `chatrelay mcp` in
// another, on one data folder, with the SDK's client over the child's
// standard input and output.
type agentEnv struct {
	url    string
	data   string // the server's data folder, for `chatrelay mcp --data`
	token  string
	thread string
	cs     *mcp.ClientSession
	sent   chan string // the tools/call requests the client has written, by tool name
}

func startAgent(t testing.TB) *agentEnv {
	t.Helper()
	e := startChat(t)
	cmd := exec.Command(chatrelayBinary(t), "mcp", "--data", e.data, "--fsync", "never")
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), watched{&mcp.CommandTransport{Command: cmd}, e.sent}, nil)
	assert.Success(t, err)
	t.Cleanup(func() { cs.Close() })
	e.cs = cs
	return e
}

// startChat starts the chat server of an agentEnv, without an MCP client.
func startChat(t testing.TB) *agentEnv {
	t.Helper()
	data := t.TempDir()
	st, err := filestore.OpenFile(data, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	srv := transport.NewServer(transport.Config{Store: st, Log: slog.New(slog.DiscardHandler),
		Windows: chatrelay.Windows{PerThread: 100000, PerIP: 100000}})
	ctx, cancel := context.WithCancel(context.Background())
	fed := make(chan error, 1)
	go func() { fed <- srv.Run(ctx) }()
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-fed
	})
	e := &agentEnv{url: hs.URL, data: data, token: strings.Repeat("ab", 32), sent: make(chan string, 1024)}
	e.thread = chatrelay.ThreadOf(e.token)
	return e
}

// watched tells which tool calls the client has written to the pipe.
type watched struct {
	mcp.Transport
	sent chan string
}

func (w watched) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := w.Transport.Connect(ctx)
	return watchedConn{c, w.sent}, err
}

type watchedConn struct {
	mcp.Connection
	sent chan string
}

func (c watchedConn) Write(ctx context.Context, m jsonrpc.Message) error {
	err := c.Connection.Write(ctx, m)
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == "tools/call" {
		var p struct{ Name string }
		json.Unmarshal(r.Params, &p)
		c.sent <- p.Name
	}
	return err
}

// awaitSent waits until the client has written a call of the tool.
func (e *agentEnv) awaitSent(t testing.TB, tool string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-e.sent:
			if s == tool {
				return
			}
		case <-deadline:
			t.Fatalf("the client did not send %s", tool)
		}
	}
}

// http sends a request to the chat server as the thread's owner.
func (e *agentEnv) http(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", e.token)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	schematest.Answer(t, method, path, res.StatusCode, res.Header, b)
	return res.StatusCode, b
}

// tool calls a tool that must succeed and decodes its result.
func tool[T any](t testing.TB, ctx context.Context, e *agentEnv, verb string, args any) T {
	t.Helper()
	r, err := e.cs.CallTool(ctx, &mcp.CallToolParams{Name: "chatrelay_" + verb, Arguments: args})
	return result[T](t, verb, r, err)
}

// called is a call made in another goroutine, for result.
type called struct {
	r   *mcp.CallToolResult
	err error
	at  time.Time // when the answer came
}

// callAsync calls a tool in a goroutine of its own.
func (e *agentEnv) callAsync(ctx context.Context, verb string, args any) <-chan called {
	c := make(chan called, 1)
	go func() {
		r, err := e.cs.CallTool(ctx, &mcp.CallToolParams{Name: "chatrelay_" + verb, Arguments: args})
		c <- called{r, err, time.Now()}
	}()
	return c
}

// result checks a tool's answer, which must be a success, and decodes it.
func result[T any](t testing.TB, verb string, r *mcp.CallToolResult, err error) T {
	t.Helper()
	assert.Success(t, err)
	b, err := json.Marshal(r.StructuredContent)
	assert.Success(t, err)
	if r.IsError {
		t.Fatalf("chatrelay_%s: %s", verb, b)
	}
	schematest.Valid(t, verb+".result", b)
	var out T
	assert.Success(t, json.Unmarshal(b, &out))
	return out
}

// TestMCPOverStdio: `chatrelay mcp` in its own process, driven by the
// SDK's client over a real pipe, beside a server on the same folder: the
// tools are the verbs with the bundle's input schemas; an approval asked
// over MCP and approved over HTTP wakes wait_interaction; an operator's
// post over HTTP wakes wait_messages; a canceled wait returns at once and
// the session goes on.
func TestMCPOverStdio(t *testing.T) {
	t.Parallel()
	e := startAgent(t)
	ctx := t.Context()

	tools, err := e.cs.ListTools(ctx, nil)
	assert.Success(t, err)
	assert.Equal(t, "tools", len(tools.Tools), len(chatrelay.Verbs()))
	for _, tl := range tools.Tools {
		verb := strings.TrimPrefix(tl.Name, "chatrelay_")
		def, ok := chatrelay.SchemaDef(verb + ".input")
		assert.True(t, ok, "tool %s is no verb of the bundle", tl.Name)
		got, _ := json.Marshal(tl.InputSchema)
		assert.True(t, schematest.SameJSON(got, def), "%s's input schema is not %s.input", tl.Name, verb)
	}

	status, _ := e.http(t, "POST", "/api/chat/post", `{"text":"can you deploy build 412?"}`)
	assert.Equal(t, "operator's post", status, http.StatusCreated)
	sent := tool[host.MessageResult](t, ctx, e, "send", map[string]any{"thread": e.thread, "text": "Yes, once you approve.", "client_id": "reply-1"})
	var m chatrelay.Message
	assert.Success(t, json.Unmarshal(sent.Message, &m))
	assert.Equal(t, "author", m.Author, chatrelay.Hermes)

	// Ask for approval over MCP; the person approves over HTTP.
	asked := tool[host.InteractionResult](t, ctx, e, "request_approval", map[string]any{
		"thread": e.thread, "summary": "Deploy build 412 to production?", "title": "deploy",
		"details": []map[string]string{{"label": "build", "value": "412"}}})
	waited := e.callAsync(ctx, "wait_interaction", map[string]any{"thread": e.thread, "interaction_id": asked.Interaction.ID, "timeout": 60})
	e.awaitSent(t, "chatrelay_wait_interaction")
	status, body := e.http(t, "POST", "/api/chat/respond", `{"interaction_id":"`+asked.Interaction.ID+`","decision":"approve"}`)
	assert.Equal(t, "respond "+string(body), status, http.StatusOK)
	select {
	case c := <-waited:
		r := result[host.InteractionResult](t, "wait_interaction", c.r, c.err)
		assert.Equal(t, "approved", [2]any{r.Interaction.State, r.Interaction.AnsweredBy}, [2]any{chatrelay.Approved, chatrelay.Operator})
	case <-time.After(30 * time.Second):
		t.Fatal("wait_interaction did not return after the approval")
	}

	// wait_messages wakes on an operator's post from another process.
	rd := tool[host.ReadThreadResult](t, ctx, e, "read_thread", map[string]any{"thread": e.thread})
	woke := e.callAsync(ctx, "wait_messages", map[string]any{"thread": e.thread, "since": rd.Cursor, "timeout": 60})
	e.awaitSent(t, "chatrelay_wait_messages")
	status, _ = e.http(t, "POST", "/api/chat/post", `{"text":"approved, go ahead"}`)
	posted := time.Now()
	assert.Equal(t, "operator's post", status, http.StatusCreated)
	var after int64 // the cursor past the post
	select {
	case c := <-woke:
		t.Logf("wait_messages woke %v after the post", time.Since(posted))
		r := result[host.WaitMessagesResult](t, "wait_messages", c.r, c.err)
		after = r.Cursor
		assert.True(t, !r.TimedOut && len(r.Messages) == 1, "wait_messages: %+v", r)
		var got chatrelay.Message
		assert.Success(t, json.Unmarshal(r.Messages[0].Message, &got))
		assert.Equal(t, "the post", got.Text, "approved, go ahead")
	case <-time.After(30 * time.Second):
		t.Fatal("wait_messages did not wake on the post")
	}

	// A canceled wait returns at once; the session goes on. (From past the
	// post, so that it waits: from before it, it answers the post at once.)
	cctx, cancel := context.WithCancel(ctx)
	canceled := e.callAsync(cctx, "wait_messages", map[string]any{"thread": e.thread, "since": after, "timeout": chatrelay.LimitWaitTimeout.Max})
	e.awaitSent(t, "chatrelay_wait_messages")
	cancel()
	select {
	case c := <-canceled:
		assert.True(t, c.err != nil, "a canceled wait returned no error")
	case <-time.After(5 * time.Second):
		t.Fatal("the canceled wait did not return")
	}
	th := tool[host.ListThreadsResult](t, ctx, e, "list_threads", nil)
	assert.Equal(t, "threads", len(th.Threads), 1)
}

// TestMCPSurvivesMalformedLines: the real `chatrelay mcp`, fed lines no
// client should send (not JSON, NUL bytes, not UTF-8, a truncated line,
// an empty array, a batch, a number, a wrong jsonrpc, an object id, a line
// over its cap), answers each with the JSON-RPC error due, answers the
// request after it, and keeps a wait_messages that was already waiting:
// the person's post still ends it.
func TestMCPSurvivesMalformedLines(t *testing.T) {
	t.Parallel()
	e := startChat(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chatrelayBinary(t), "mcp", "--data", e.data, "--fsync", "never")
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	assert.Success(t, err)
	defer stderr.Close()
	cmd.Stderr = stderr
	logged := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
	stdin, err := cmd.StdinPipe()
	assert.Success(t, err)
	stdout, err := cmd.StdoutPipe()
	assert.Success(t, err)
	assert.Success(t, cmd.Start())
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("writing to chatrelay mcp: %v; stderr: %s", err, logged())
		}
	}
	type answer struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
		Result json.RawMessage `json:"result"`
		line   string
	}
	// until reads answers up to the one with id, for at most 30 s.
	until := func(id string) []answer {
		t.Helper()
		var got []answer
		deadline := time.After(30 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("chatrelay mcp closed its output waiting for %s (it exited?); stderr: %s", id, logged())
				}
				a := answer{line: line}
				assert.Success(t, json.Unmarshal([]byte(line), &a))
				got = append(got, a)
				if string(a.ID) == id {
					return got
				}
			case <-deadline:
				t.Fatalf("no answer %s within 30s; stderr: %s", id, logged())
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	until(`"init"`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A wait with no since, in a thread that has nothing to answer: it waits.
	send(`{"jsonrpc":"2.0","id":"wait","method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"thread":"` + e.thread + `","timeout":120}}}`)

	for i, tc := range []struct {
		name, line string
		code       int
	}{
		{"not JSON", "hello", -32700},
		{"NUL bytes", "\x00\x00\x00", -32700},
		{"not UTF-8", "\xff\xfe", -32700},
		{"a truncated line", `{"jsonrpc":"2.0","id":9,"method":"pi`, -32700},
		{"an empty array", `[]`, -32600},
		{"a batch", `[{"jsonrpc":"2.0","id":7,"method":"ping"}]`, -32600},
		{"a number", `42`, -32600},
		{"a wrong jsonrpc version", `{"jsonrpc":"1.0","id":8,"method":"ping"}`, -32600},
		{"an object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, -32600},
		{"a line over its cap", `{"jsonrpc":"2.0","id":10,"method":"ping","params":{"pad":"` + strings.Repeat("x", 1<<20) + `"}}`, -32600},
	} {
		send(tc.line)
		ping := fmt.Sprintf(`"ping-%d"`, i)
		send(`{"jsonrpc":"2.0","id":` + ping + `,"method":"ping"}`)
		got := until(ping)
		var read []string
		for _, a := range got {
			read = append(read, a.line)
		}
		assert.True(t, len(got) == 2 && got[0].Error != nil && got[0].Error.Code == tc.code,
			"%s: want the error %d, then the ping's answer; got %q", tc.name, tc.code, read)
		assert.True(t, got[1].Error == nil, "%s: the ping after it: %s", tc.name, got[1].line)
	}

	status, _ := e.http(t, "POST", "/api/chat/post", `{"text":"still there?"}`)
	assert.Equal(t, "the person's post", status, http.StatusCreated)
	got := until(`"wait"`)
	var r struct {
		StructuredContent host.WaitMessagesResult `json:"structuredContent"`
	}
	assert.Success(t, json.Unmarshal(got[len(got)-1].Result, &r))
	assert.Equal(t, "the wait's messages", len(r.StructuredContent.Messages), 1)
	var m chatrelay.Message
	assert.Success(t, json.Unmarshal(r.StructuredContent.Messages[0].Message, &m))
	assert.Equal(t, "the wait's message", m.Text, "still there?")

	stdin.Close()
	assert.Success(t, cmd.Wait())
}

// BenchmarkMCPWaitMessagesWake measures how long after an operator sends a post
// (over HTTP, to a server in this process) a `chatrelay mcp` process's
// blocked wait_messages returns with it: the store's change feed across
// processes, plus one MCP answer over a pipe.
func BenchmarkMCPWaitMessagesWake(b *testing.B) {
	e := startAgent(b)
	ctx := context.Background()
	status, _ := e.http(b, "POST", "/api/chat/post", `{"text":"first"}`)
	assert.Equal(b, "post", status, http.StatusCreated)
	var total time.Duration
	var worst time.Duration
	for b.Loop() {
		rd := tool[host.ReadThreadResult](b, ctx, e, "read_thread", map[string]any{"thread": e.thread})
		woke := e.callAsync(ctx, "wait_messages", map[string]any{"thread": e.thread, "since": rd.Cursor, "timeout": 60})
		e.awaitSent(b, "chatrelay_wait_messages")
		posted := time.Now() // the person sends: the wake includes the post's round trip
		e.http(b, "POST", "/api/chat/post", `{"text":"next"}`)
		c := <-woke
		d := c.at.Sub(posted)
		if r := result[host.WaitMessagesResult](b, "wait_messages", c.r, c.err); r.TimedOut {
			b.Fatal("wait_messages timed out")
		}
		total += d
		worst = max(worst, d)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "wake-ms/op")
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-wake-ms")
}

// TestMCPInterruptIsQuiet: Ctrl-C stops `chatrelay mcp` with exit status 0
// and nothing on stderr, even with a call waiting: it is how a person or
// a client stops it, not a failure (the SDK's Run logged "server run
// cancelled" at error level).
func TestMCPInterruptIsQuiet(t *testing.T) {
	t.Parallel()
	e := startChat(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chatrelayBinary(t), "mcp", "--data", e.data, "--fsync", "never")
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	assert.Success(t, err)
	stdout, err := cmd.StdoutPipe()
	assert.Success(t, err)
	assert.Success(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	_, err = io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"thread":"`+e.thread+`","timeout":60}}}`+"\n"+
		`{"jsonrpc":"2.0","id":3,"method":"ping"}`+"\n")
	assert.Success(t, err)
	for sc.Scan() && !strings.Contains(sc.Text(), `"id":3`) { // the ping's answer: the wait is under way
	}
	assert.Success(t, cmd.Process.Signal(os.Interrupt))
	err = cmd.Wait()
	assert.True(t, err == nil, "chatrelay mcp after Ctrl-C: %v; stderr: %s", err, stderr.String())
	assert.Equal(t, "stderr", stderr.String(), "")
}
