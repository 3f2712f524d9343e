package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/mcpserver"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// answer is a line the server wrote, as a client reads it.
type answer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	line string
}

// rawClient writes lines to a server served over Stdio, and reads the
// lines it writes as they come: a client that can send what no SDK would.
type rawClient struct {
	in    *io.PipeWriter
	lines chan string
}

// startRaw serves srv over Stdio (bounded to maxLine, 0: the default) on
// pipes, through wrap when it is not nil, and sends initialize.
func startRaw(t *testing.T, srv *mcp.Server, maxLine int, wrap func(mcp.Transport) mcp.Transport) *rawClient {
	t.Helper()
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	var tr mcp.Transport = &mcpserver.Stdio{In: toServer, Out: fromServer, MaxLine: maxLine}
	if wrap != nil {
		tr = wrap(tr)
	}
	ss, err := srv.Connect(context.Background(), tr, nil)
	assert.Success(t, err)
	c := &rawClient{in: fromClient, lines: make(chan string, 1024)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(toClient)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		fromClient.Close() // the end of the server's input: the session ends
		ss.Wait()
		fromServer.Close()
		<-read
	})
	c.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	init := c.until(t, `"init"`)
	assert.True(t, init[len(init)-1].Error == nil, "initialize: %s", init[len(init)-1].line)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *rawClient) send(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(c.in, line+"\n")
	assert.Success(t, err)
}

// until reads the server's lines up to the answer whose id is id (as
// JSON), for at most 10 s, and returns them all. Every line must be a
// JSON-RPC message.
func (c *rawClient) until(t *testing.T, id string) []answer {
	t.Helper()
	var got []answer
	deadline := time.After(10 * time.Second)
	for {
		select {
		case line := <-c.lines:
			a := answer{line: line}
			assert.True(t, json.Unmarshal([]byte(line), &a) == nil && a.JSONRPC == "2.0", "the server wrote a line that is no JSON-RPC message: %q", line)
			got = append(got, a)
			if string(a.ID) == id && a.Method == "" {
				return got
			}
		case <-deadline:
			t.Fatalf("no answer with id %s within 10s; read %d lines", id, len(got))
		}
	}
}

// TestStdioAnswersMalformedLines: each line that is no message gets the
// JSON-RPC error it is due (-32700 and id null for what does not parse,
// -32600 for JSON that is no request, with the request's id when it has a
// usable one), and the session goes on: the next request is answered.
func TestStdioAnswersMalformedLines(t *testing.T) {
	e := newEnv(t)
	const maxLine = 4096
	c := startRaw(t, mcpserver.New(&host.Verbs{Store: e.st}, nil), maxLine, nil)
	padded := func(n int) string { // a ping of exactly n bytes
		head := `{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"`
		return head + strings.Repeat("x", n-len(head)-3) + `"}}`
	}
	for i, tc := range []struct {
		name, line string
		code       int    // 0: an answer, no error
		id         string // the answer's id, as JSON
	}{
		{"not JSON", `hello`, -32700, "null"},
		{"NUL bytes", "\x00\x00\x00", -32700, "null"},
		{"a NUL byte in a string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\x00\"}}", -32700, "null"},
		{"not UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\xff\xfe\"}}", -32700, "null"},
		{"a truncated line", `{"jsonrpc":"2.0","id":9,"method":"pi`, -32700, "null"},
		{"two values on a line", `{"jsonrpc":"2.0","id":9,"method":"ping"}{}`, -32700, "null"},
		{"an empty array", `[]`, -32600, "null"},
		{"a batch", `[{"jsonrpc":"2.0","id":7,"method":"ping"}]`, -32600, "null"},
		{"a number", `42`, -32600, "null"},
		{"a string", `"ping"`, -32600, "null"},
		{"null", `null`, -32600, "null"},
		{"an empty object", `{}`, -32600, "null"},
		{"a wrong jsonrpc version", `{"jsonrpc":"1.0","id":8,"method":"ping"}`, -32600, "8"},
		{"no jsonrpc", `{"id":"x","method":"ping"}`, -32600, `"x"`},
		{"jsonrpc in capitals", `{"JSONRPC":"2.0","id":8,"method":"ping"}`, -32600, "8"},
		{"an object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, -32600, "null"},
		{"an array id", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, -32600, "null"},
		{"a null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, -32600, "null"},
		{"a fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, -32600, "null"},
		{"an id past 2^53", `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, -32600, "null"},
		{"a boolean id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, -32600, "null"},
		{"a method that is no string", `{"jsonrpc":"2.0","id":10,"method":5}`, -32600, "10"},
		{"params that are a number", `{"jsonrpc":"2.0","id":11,"method":"ping","params":3}`, -32600, "11"},
		{"params that are an array", `{"jsonrpc":"2.0","id":14,"method":"tools/list","params":[1]}`, -32600, "14"}, // MCP's params are an object; by position is not MCP
		{"a response with neither result nor error", `{"jsonrpc":"2.0","id":12}`, -32600, "null"},
		{"a response with both", `{"jsonrpc":"2.0","id":12,"result":{},"error":{"code":1,"message":"x"}}`, -32600, "null"},
		{"a response whose error is a string", `{"jsonrpc":"2.0","id":12,"error":"no"}`, -32600, "null"},
		{"a line over the cap", padded(maxLine + 1), -32600, "null"},
		{"a line at the cap", padded(maxLine), 0, `"big"`},
		{"an unknown method", `{"jsonrpc":"2.0","id":13,"method":"no/such"}`, -32601, "13"},
		{"initialize whose params are not MCP's", `{"jsonrpc":"2.0","id":15,"method":"initialize","params":{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, -32602, "15"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.send(t, tc.line)
			ping := fmt.Sprintf(`"ping-%d"`, i)
			c.send(t, `{"jsonrpc":"2.0","id":`+ping+`,"method":"ping"}`)
			got := c.until(t, ping)
			if len(got) == 1 {
				// A request the SDK serves (the line at the cap, the
				// unknown method) and the ping are served concurrently:
				// the ping's answer may come first.
				got = append(c.until(t, tc.id), got...)
			}
			assert.Equal(t, "lines written", len(got), 2)
			a := got[0]
			assert.Equal(t, "id", string(a.ID), tc.id)
			if tc.code == 0 {
				assert.True(t, a.Error == nil, "an error: %s", a.line)
			} else {
				assert.True(t, a.Error != nil && a.Error.Code == tc.code && a.Error.Message != "", "want error %d, got %s", tc.code, a.line)
			}
			assert.True(t, got[1].Error == nil, "the ping after it: %s", got[1].line)
		})
	}
	// Blank lines are no messages, and get no answer.
	c.send(t, "\n  \r")
	c.send(t, `{"jsonrpc":"2.0","id":"after blanks","method":"ping"}`)
	assert.Equal(t, "lines written", len(c.until(t, `"after blanks"`)), 1)
}

// writes tells which responses the SDK has handed to the connection
// (written or not), after the connection is done with each.
type writes struct {
	mcp.Transport
	done chan jsonrpc.ID
}

func (w writes) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := w.Transport.Connect(ctx)
	return writesConn{c, w.done}, err
}

type writesConn struct {
	mcp.Connection
	done chan jsonrpc.ID
}

func (c writesConn) Write(ctx context.Context, m jsonrpc.Message) error {
	err := c.Connection.Write(ctx, m)
	if r, ok := m.(*jsonrpc.Response); ok {
		c.done <- r.ID
	}
	return err
}

// TestCanceledCallGetsNoAnswer: a call the client canceled
// (notifications/cancelled) gets no answer at all, not an error; a cancel
// of a call already answered, or of no call, changes nothing; the session
// goes on.
func TestCanceledCallGetsNoAnswer(t *testing.T) {
	e := newEnv(t)
	srv := mcpserver.New(&host.Verbs{Store: e.st}, nil)
	srv.AddReceivingMiddleware(e.observe)
	done := make(chan jsonrpc.ID, 64)
	c := startRaw(t, srv, 0, func(tr mcp.Transport) mcp.Transport { return writes{tr, done} })
	five, err := jsonrpc.MakeID(float64(5))
	assert.Success(t, err)

	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"thread":%q,"since":%d,"timeout":300}}}`, thread, e.first.Epoch))
	e.await(t, "start chatrelay_wait_messages")
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"the user pressed stop"}}`)
	deadline := time.After(10 * time.Second)
	for handed := false; !handed; {
		select {
		case id := <-done:
			handed = id == five
		case <-deadline:
			t.Fatal("the canceled call's handler did not return")
		}
	}
	// Whatever the SDK made of call 5 has gone to the connection: the
	// lines up to the next answer show whether it was written.
	c.send(t, `{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	for _, a := range c.until(t, "6") {
		assert.True(t, string(a.ID) != "5", "the canceled call was answered: %s", a.line)
	}

	// A cancel of a call already answered, or of no call, withholds
	// nothing: the next calls are answered.
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6}}`)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"nothing"}}`)
	c.send(t, `{"jsonrpc":"2.0","id":"list","method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`)
	got := c.until(t, `"list"`)
	assert.True(t, got[len(got)-1].Error == nil && len(got[len(got)-1].Result) > 0, "list_threads: %s", got[len(got)-1].line)
}

// FuzzStdioFraming: whatever bytes come on the input, as one line or
// several, the server never stops serving, never panics, writes only
// JSON-RPC messages, and answers the request that follows them.
func FuzzStdioFraming(f *testing.F) {
	for _, seed := range []string{
		"hello", "\x00\x00", "[]", "42", "null", `{}`, `[{"jsonrpc":"2.0","id":7,"method":"ping"}]`,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":{},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":9,"method":"pi`, "\xff\xfe", "\r\n\r\n",
		`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n" + `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chatrelay_list_threads","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"chatrelay_send","arguments":[]}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"timeout":300,"since":1}}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`,
		`{"jsonrpc":"2.0","id":6,"result":{}}`, `{"jsonrpc":"2.0","id":6,"error":{"code":-1,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}`, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chatrelay_read_thread","arguments":{"thread":"../x"},"_meta":{"progressToken":{}}}}`,
		strings.Repeat("[", 20000), strings.Repeat("x", 5000),
	} {
		f.Add([]byte(seed))
	}
	st, err := filestore.OpenFile(f.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(f, err)
	f.Cleanup(func() { st.Close() })
	const probe = `"probe-4f1d0c9a7e"`
	f.Fuzz(func(t *testing.T, junk []byte) {
		if strings.Contains(string(junk), probe[1:len(probe)-1]) {
			t.Skip("the input holds the probe's id")
		}
		c := startRaw(t, mcpserver.New(&host.Verbs{Store: st}, nil), 4096, nil)
		_, err := c.in.Write(append(junk, '\n'))
		assert.Success(t, err)
		c.send(t, `{"jsonrpc":"2.0","id":`+probe+`,"method":"tools/list"}`)
		got := c.until(t, probe)
		var tools mcp.ListToolsResult
		last := got[len(got)-1]
		assert.True(t, last.Error == nil && json.Unmarshal(last.Result, &tools) == nil && len(tools.Tools) > 0, "the request after the input: %s", last.line)
	})
}

// TestStdioAnswersEveryCallAtItsEnd: when the client closes its end of
// the input, every call already read is answered before the session
// ends: a wait in flight at once, as its timeout would answer it
// (timed_out, the cursor it was given), and a write sent after it is
// carried through (stored, and answered).
func TestStdioAnswersEveryCallAtItsEnd(t *testing.T) {
	e := newEnv(t)
	srv := mcpserver.New(&host.Verbs{Store: e.st}, nil)
	srv.AddReceivingMiddleware(e.observe)
	c := startRaw(t, srv, 0, nil)
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":"wait","method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"thread":%q,"since":%d,"timeout":300}}}`, thread, e.first.Epoch))
	e.await(t, "start chatrelay_wait_messages")
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":"send","method":"tools/call","params":{"name":"chatrelay_send","arguments":{"thread":%q,"text":"on my way out"}}}`, thread))
	assert.Success(t, c.in.Close())

	got := map[string]answer{}
	for want := `"wait"`; want != ""; {
		for _, a := range c.until(t, want) { // the lines up to want's answer: the other's too, if it came first
			got[string(a.ID)] = a
		}
		want = ""
		for _, id := range []string{`"wait"`, `"send"`} {
			if _, ok := got[id]; !ok {
				want = id
			}
		}
	}
	var waited struct {
		StructuredContent host.WaitMessagesResult `json:"structuredContent"`
		IsError           bool                    `json:"isError"`
	}
	w := got[`"wait"`]
	assert.True(t, w.Error == nil && json.Unmarshal(w.Result, &waited) == nil && !waited.IsError, "the wait: %s", w.line)
	assert.True(t, waited.StructuredContent.TimedOut && len(waited.StructuredContent.Messages) == 0 && waited.StructuredContent.Cursor == e.first.Epoch, "the wait: %s", w.line)
	s := got[`"send"`]
	assert.True(t, s.Error == nil && len(s.Result) > 0 && !strings.Contains(string(s.Result), `"isError":true`), "the send: %s", s.line)
	p, err := e.st.Since(t.Context(), thread, e.first.Epoch, 0)
	assert.Success(t, err)
	assert.True(t, len(p.Messages) == 1 && p.Messages[0].Text == "on my way out", "stored after the first: %+v", p.Messages)
}
