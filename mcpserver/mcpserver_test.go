package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/mcpserver"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

const thread = "00000000000000bb"

// publicURL is the server's public address the MCP server is given.
const publicURL = "https://chat.example.com/relay"

// env is an MCP server of the verbs on a file store, served over Stdio on
// pipes, and an SDK client connected to it. calls reports each tools/call
// as it starts ("start <tool>") and returns ("end <tool>").
type env struct {
	st    store.Store
	cs    *mcp.ClientSession
	first store.Entry // the operator's message in thread
	calls chan string

	mu       sync.Mutex
	outputs  map[string]*jsonschema.Schema // each tool's declared outputSchema, compiled
	answered map[string]bool               // the verbs that answered a result (not a tool error) through call
}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil, nil) }

// newEnvWith is newEnv with the server's and the client's options.
func newEnvWith(t *testing.T, opts *mcpserver.Options, copts *mcp.ClientOptions) *env {
	t.Helper()
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	first, err := st.Append(t.Context(), thread, store.NewMessage{Text: "can you deploy build 412?"})
	assert.Success(t, err)
	e := &env{st: st, first: first, calls: make(chan string, 1024)}
	srv := mcpserver.New(&host.Verbs{Store: st, PublicURL: publicURL}, opts)
	srv.AddReceivingMiddleware(e.observe)
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	ss, err := srv.Connect(ctx, &mcpserver.Stdio{In: toServer, Out: fromServer}, nil)
	assert.Success(t, err)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts)
	e.cs, err = client.Connect(ctx, &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	assert.Success(t, err)
	t.Cleanup(func() {
		e.cs.Close()
		ss.Wait()
		cancel()
	})
	return e
}

// observe is a receiving middleware that reports tool calls on e.calls.
func (e *env) observe(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		name := req.GetParams().(*mcp.CallToolParamsRaw).Name
		e.calls <- "start " + name
		defer func() { e.calls <- "end " + name }()
		return next(ctx, method, req)
	}
}

// call calls a tool; a tool error is a result (IsError), not an error.
func (e *env) call(t *testing.T, ctx context.Context, verb string, args any) *mcp.CallToolResult {
	t.Helper()
	r, err := e.cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolName(verb), Arguments: args})
	assert.Success(t, err)
	// Every answer is checked against the bundle: the result against
	// <verb>.result, a tool error against verb.error.
	b, err := json.Marshal(r.StructuredContent)
	assert.Success(t, err)
	def := verb + ".result"
	if r.IsError {
		def = "verb.error"
	}
	schematest.Valid(t, def, b)
	// And against the outputSchema the tool declares, as a client that
	// validates does (the TypeScript SDK's, errors included).
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	assert.Success(t, err)
	if err := e.output(t, verb).Validate(v); err != nil {
		t.Errorf("chatrelay_%s's structured content does not fit its outputSchema: %v\n%s", verb, err, b)
	}
	assert.True(t, len(r.Content) == 1 && text(r) != "", "%s: no text for the model", verb)
	if !r.IsError {
		e.mu.Lock()
		e.answered[verb] = true
		e.mu.Unlock()
	}
	return r
}

// output is the outputSchema the tool of verb declares, as the client
// lists it, compiled on its own.
func (e *env) output(t *testing.T, verb string) *jsonschema.Schema {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.outputs == nil {
		res, err := e.cs.ListTools(t.Context(), nil)
		assert.Success(t, err)
		e.outputs, e.answered = map[string]*jsonschema.Schema{}, map[string]bool{}
		for _, tool := range res.Tools {
			if tool.OutputSchema == nil {
				continue
			}
			b, err := json.Marshal(tool.OutputSchema)
			assert.Success(t, err)
			s, err := schematest.Standalone(b)
			assert.Success(t, err)
			e.outputs[tool.Name] = s
		}
	}
	s, ok := e.outputs[mcpserver.ToolName(verb)]
	if !ok {
		t.Fatalf("chatrelay_%s declares no outputSchema", verb)
	}
	return s
}

// await reads the calls' events until want, for at most 5 s.
func (e *env) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case c := <-e.calls:
			if c == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %q within 5s", want)
		}
	}
}

func text(r *mcp.CallToolResult) string {
	if tc, ok := r.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// ok calls a tool that must succeed and decodes its structured content.
func ok[T any](t *testing.T, e *env, verb string, args any) T {
	t.Helper()
	r := e.call(t, t.Context(), verb, args)
	assert.True(t, !r.IsError, "%s: %s", verb, text(r))
	var out T
	b, _ := json.Marshal(r.StructuredContent)
	assert.Success(t, json.Unmarshal(b, &out))
	return out
}

// TestToolsAreTheVerbs: every verb of the contract's table is a tool
// chatrelay_<verb>, whose input schema, as the client receives it, is its
// $defs entry, a valid schema on its own; the server's instructions say
// how to use them.
func TestToolsAreTheVerbs(t *testing.T) {
	e := newEnv(t)
	res, err := e.cs.ListTools(t.Context(), nil)
	assert.Success(t, err)
	got := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		got[tool.Name] = tool
	}
	assert.Equal(t, "tools", len(got), len(chatrelay.Verbs()))
	for _, verb := range chatrelay.Verbs() {
		tool, found := got["chatrelay_"+verb]
		assert.True(t, found, "no tool chatrelay_%s", verb)
		schema, err := json.Marshal(tool.InputSchema)
		assert.Success(t, err)
		def, _ := chatrelay.SchemaDef(verb + ".input")
		assert.True(t, schematest.SameJSON(schema, def), "chatrelay_%s's input schema is not its $defs entry:\n%s", verb, schema)
		_, err = schematest.Standalone(schema)
		assert.Success(t, err)
		assert.True(t, tool.Description != "" && strings.Contains(string(def), tool.Description), "chatrelay_%s's description is not its entry's", verb)
	}
	// What the model reads of a tool (its description and input schema)
	// names the other tools as the client knows them: chatrelay_<verb>.
	// (send and react are words too; the verbs of two words are checked.)
	for _, tool := range res.Tools {
		schema, _ := json.Marshal(tool.InputSchema)
		words := tool.Description + "\n" + string(schema)
		for _, verb := range chatrelay.Verbs() {
			if !strings.Contains(verb, "_") {
				continue
			}
			bare := regexp.MustCompile(`(^|[^A-Za-z0-9_])` + verb + `\b`)
			assert.True(t, !bare.MatchString(words), "%s names %s without its prefix chatrelay_: %s", tool.Name, verb, words)
		}
	}
	ins := e.cs.InitializeResult().Instructions
	for _, want := range []string{"chatrelay_request_approval", "chatrelay_wait_interaction", "chatrelay_read_thread", "chatrelay_send", "approved"} {
		assert.True(t, strings.Contains(ins, want), "the instructions do not mention %s", want)
	}
}

// TestToolsDeclareOutputSchemas: every tool declares an outputSchema, as
// the client receives it, made of the bundle's entries taken as they are:
// an object (MCP's structured content is one) that is the verb's
// <verb>.result or, in a tool error, verb.error, with under $defs exactly
// the entries these refer to, each the bundle's own, so that it stands
// alone and is valid against the draft 2020-12 meta-schema. (Each call's
// structured content is validated against it in env.call.)
func TestToolsDeclareOutputSchemas(t *testing.T) {
	e := newEnv(t)
	res, err := e.cs.ListTools(t.Context(), nil)
	assert.Success(t, err)
	ref := regexp.MustCompile(`"\$ref":"#/\$defs/([^"]+)"`)
	for _, tool := range res.Tools {
		verb := strings.TrimPrefix(tool.Name, "chatrelay_")
		assert.True(t, tool.OutputSchema != nil, "%s declares no outputSchema", tool.Name)
		schema, err := json.Marshal(tool.OutputSchema)
		assert.Success(t, err)
		var root map[string]json.RawMessage
		assert.Success(t, json.Unmarshal(schema, &root))
		assert.Equal(t, tool.Name+"'s outputSchema's keys", slices.Sorted(maps.Keys(root)), []string{"$defs", "description", "oneOf", "type"})
		assert.Equal(t, tool.Name+"'s outputSchema's type", string(root["type"]), `"object"`)
		result := verb + ".result"
		assert.True(t, schematest.SameJSON(root["oneOf"], []byte(`[{"$ref":"#/$defs/`+result+`"},{"$ref":"#/$defs/verb.error"}]`)),
			"%s's outputSchema is not %s or verb.error: %s", tool.Name, result, root["oneOf"])
		var defs map[string]json.RawMessage
		assert.Success(t, json.Unmarshal(root["$defs"], &defs))
		for name, d := range defs {
			want, ok := chatrelay.SchemaDef(name)
			assert.True(t, ok && schematest.SameJSON(d, want), "%s's outputSchema's $defs %s is not the bundle's:\n%s", tool.Name, name, d)
		}
		for _, name := range []string{result, "verb.error"} {
			var head struct{ Type string }
			assert.Success(t, json.Unmarshal(defs[name], &head))
			assert.Equal(t, name+"'s type", head.Type, "object")
		}
		// Exactly what is referred to, from the root on.
		used := map[string]bool{}
		todo := []string{string(root["oneOf"])}
		for len(todo) > 0 {
			s := todo[0]
			todo = todo[1:]
			for _, m := range ref.FindAllStringSubmatch(s, -1) {
				if !used[m[1]] {
					used[m[1]] = true
					todo = append(todo, string(defs[m[1]]))
				}
			}
		}
		assert.Equal(t, tool.Name+"'s outputSchema's $defs", slices.Sorted(maps.Keys(defs)), slices.Sorted(maps.Keys(used)))
		_, err = schematest.Standalone(schema)
		assert.Success(t, err)
	}
}

// TestBadArguments: arguments over a limit, of a wrong type or naming
// what does not exist are tool errors with the contract's codes, and
// nothing is stored.
func TestBadArguments(t *testing.T) {
	e := newEnv(t)
	ix := ok[host.InteractionResult](t, e, "request_input", map[string]any{"thread": thread, "prompt": "Which branch?", "allow_text": true})
	before, err := e.st.Changes(t.Context(), thread, 0, 0)
	assert.Success(t, err)
	long := func(l chatrelay.Limit) string { return strings.Repeat("é", l.Max+1) }
	for _, tc := range []struct {
		name, verb string
		args       any
		code       chatrelay.Code
	}{
		{"text over its limit", "send", map[string]any{"thread": thread, "text": long(chatrelay.LimitPostText)}, chatrelay.TextTooLong},
		{"blank text", "send", map[string]any{"thread": thread, "text": " \n"}, chatrelay.InvalidText},
		{"text of a wrong type", "send", map[string]any{"thread": thread, "text": 5}, chatrelay.InvalidJSON},
		{"an unknown argument", "send", map[string]any{"thread": thread, "text": "hi", "kind": "operator"}, chatrelay.InvalidJSON},
		{"arguments that are not an object", "send", []string{thread, "hi"}, chatrelay.InvalidJSON},
		{"an unknown thread", "send", map[string]any{"thread": "00000000000000cc", "text": "hi"}, chatrelay.NotFound},
		{"not a thread id", "read_thread", map[string]any{"thread": "../etc"}, chatrelay.InvalidThread},
		{"a bad client_id", "send", map[string]any{"thread": thread, "text": "hi", "client_id": "a b"}, chatrelay.InvalidClientID},
		{"a summary over its limit", "request_approval", map[string]any{"thread": thread, "summary": long(chatrelay.LimitApprovalText)}, chatrelay.InvalidInteraction},
		{"too many choices", "request_input", map[string]any{"thread": thread, "prompt": "?", "choices": make([]map[string]string, chatrelay.LimitChoices.Max+1)}, chatrelay.InvalidInteraction},
		{"a timeout past its limit", "request_approval", map[string]any{"thread": thread, "summary": "Deploy?", "timeout": chatrelay.LimitApprovalTime.Max + 1}, chatrelay.InvalidInteraction},
		{"a card link that is not http", "send_card", map[string]any{"thread": thread, "card": map[string]any{"fallback_text": "x",
			"blocks": []any{map[string]any{"type": "link", "url": "javascript:alert(1)"}}}}, chatrelay.InvalidCard},
		{"a card without blocks", "send_card", map[string]any{"thread": thread, "card": map[string]any{"fallback_text": "x"}}, chatrelay.InvalidCard},
		{"an emoji with a space", "react", map[string]any{"thread": thread, "message_id": e.first.ID, "emoji": "👍 👍"}, chatrelay.InvalidEmoji},
		{"an unknown message", "react", map[string]any{"thread": thread, "message_id": "MSG-20000101-000000-000000", "emoji": "👍"}, chatrelay.NotFound},
		{"an unknown interaction", "check_interaction", map[string]any{"thread": thread, "interaction_id": "ix_000000000000"}, chatrelay.NotFound},
		{"a wait past its limit", "wait_interaction", map[string]any{"thread": thread, "interaction_id": ix.Interaction.ID, "timeout": chatrelay.LimitWaitTimeout.Max + 1}, chatrelay.InvalidJSON},
		{"a negative cursor", "wait_messages", map[string]any{"since": -1}, chatrelay.InvalidSince},
		{"a lone surrogate", "send", json.RawMessage(`{"thread":"` + thread + `","text":"half an emoji \ud83d"}`), chatrelay.InvalidText},
		{"a thread opened with nothing to say", "open_thread", map[string]any{}, chatrelay.InvalidText},
		{"a title past its limit", "open_thread", map[string]any{"title": strings.Repeat("é", chatrelay.LimitThreadTitle.Max+1)}, chatrelay.TextTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call(t, t.Context(), tc.verb, tc.args)
			assert.True(t, r.IsError, "%s: not a tool error: %s", tc.name, text(r))
			var te mcpserver.ToolError
			b, _ := json.Marshal(r.StructuredContent)
			assert.Success(t, json.Unmarshal(b, &te))
			assert.Equal(t, "code", te.Code, tc.code)
			assert.True(t, strings.HasPrefix(text(r), string(tc.code)+": "), "text %q does not start with the code", text(r))
		})
	}
	after, err := e.st.Changes(t.Context(), thread, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "cursor (nothing stored)", after.Cursor, before.Cursor)
	assert.Equal(t, "messages", len(after.Messages), len(before.Messages))
	threads, err := e.st.Threads(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "threads", len(threads), 1)
}

// TestAskApproveAndWait: request_approval, then wait_interaction blocks
// until the person approves (here, through the store, as the server's
// respond route does), and says approved.
func TestAskApproveAndWait(t *testing.T) {
	e := newEnv(t)
	asked := ok[host.InteractionResult](t, e, "request_approval", map[string]any{
		"thread": thread, "summary": "Deploy build 412 to production?", "title": "deploy",
		"details": []map[string]string{{"label": "build", "value": "412"}}, "client_id": "deploy-412",
	})
	assert.Equal(t, "pending", asked.Interaction.State, chatrelay.Pending)
	again := ok[host.InteractionResult](t, e, "request_approval", map[string]any{
		"thread": thread, "summary": "Deploy build 412 to production?", "title": "deploy",
		"details": []map[string]string{{"label": "build", "value": "412"}}, "client_id": "deploy-412",
	})
	assert.Equal(t, "the same interaction under the client_id", [2]any{again.Interaction.ID, again.Replayed}, [2]any{asked.Interaction.ID, true})
	waited := make(chan host.InteractionResult, 1)
	go func() {
		r, _ := e.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "chatrelay_wait_interaction",
			Arguments: map[string]any{"thread": thread, "interaction_id": asked.Interaction.ID, "timeout": 60}})
		var out host.InteractionResult
		if r != nil {
			b, _ := json.Marshal(r.StructuredContent)
			json.Unmarshal(b, &out)
		}
		waited <- out
	}()
	e.await(t, "start chatrelay_wait_interaction")
	_, err := e.st.Change(t.Context(), thread, store.Change{Op: store.Respond, InteractionID: asked.Interaction.ID,
		Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
	assert.Success(t, err)
	select {
	case r := <-waited:
		assert.Equal(t, "state", r.Interaction.State, chatrelay.Approved)
		assert.Equal(t, "by", r.Interaction.AnsweredBy, chatrelay.Operator)
	case <-time.After(10 * time.Second):
		t.Fatal("wait_interaction did not return after the approval")
	}
}

// TestCancelABlockedWait: a client that cancels a blocked wait_messages
// gets its call back at once, and the server's handler returns (it does
// not wait out its timeout).
func TestCancelABlockedWait(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan error, 1)
	go func() {
		_, err := e.cs.CallTool(ctx, &mcp.CallToolParams{Name: "chatrelay_wait_messages",
			Arguments: map[string]any{"thread": thread, "since": e.first.Epoch, "timeout": chatrelay.LimitWaitTimeout.Max}})
		returned <- err
	}()
	e.await(t, "start chatrelay_wait_messages")
	cancel()
	select {
	case err := <-returned:
		assert.True(t, err != nil, "a canceled call returned no error")
	case <-time.After(5 * time.Second):
		t.Fatal("the canceled call did not return")
	}
	e.await(t, "end chatrelay_wait_messages") // the server's handler returned
	// The session still serves.
	ok[host.ListThreadsResult](t, e, "list_threads", nil)
}

// TestEveryVerbAnswers: each tool answers its verb's result, with a text
// that says what happened, and structured content that fits the
// outputSchema it declares (env.call checks it).
func TestEveryVerbAnswers(t *testing.T) {
	e := newEnv(t)
	th := ok[host.ListThreadsResult](t, e, "list_threads", map[string]any{})
	assert.Equal(t, "threads", len(th.Threads), 1)
	rd := ok[host.ReadThreadResult](t, e, "read_thread", map[string]any{"thread": thread})
	assert.Equal(t, "awaiting", rd.Awaiting, true)
	sent := e.call(t, t.Context(), "send", map[string]any{"thread": thread, "text": "on it"})
	assert.True(t, strings.HasPrefix(text(sent), "sent MSG-"), "send said %q", text(sent))
	rx := e.call(t, t.Context(), "react", map[string]any{"thread": thread, "message_id": e.first.ID, "emoji": "👀"})
	assert.Equal(t, "react said", text(rx), "reacted 👀 to "+e.first.ID)
	card := ok[host.MessageResult](t, e, "send_card", map[string]any{"thread": thread, "card": map[string]any{
		"title": "Build 412", "fallback_text": "Build 412 is green.", "blocks": []any{map[string]any{"type": "text", "text": "all checks passed"}}}})
	var m chatrelay.Message
	assert.Success(t, json.Unmarshal(card.Message, &m))
	assert.Equal(t, "card's v1 text", m.Text, "Build 412 is green.")
	in := ok[host.InteractionResult](t, e, "request_input", map[string]any{"thread": thread, "prompt": "Which branch?",
		"choices": []map[string]string{{"value": "main"}, {"value": "release"}}})
	ck := e.call(t, t.Context(), "check_interaction", map[string]any{"thread": thread, "interaction_id": in.Interaction.ID})
	assert.True(t, strings.Contains(text(ck), "pending"), "check said %q", text(ck))
	wt := e.call(t, t.Context(), "wait_interaction", map[string]any{"thread": thread, "interaction_id": in.Interaction.ID, "timeout": 1})
	assert.True(t, strings.Contains(text(wt), "still pending"), "wait said %q", text(wt))
	cn := ok[host.InteractionResult](t, e, "cancel_interaction", map[string]any{"thread": thread, "interaction_id": in.Interaction.ID})
	assert.Equal(t, "canceled", cn.Interaction.State, chatrelay.Canceled)
	wm := ok[host.WaitMessagesResult](t, e, "wait_messages", map[string]any{"thread": thread, "since": 1})
	assert.Equal(t, "the operator's message", len(wm.Messages), 1)
	read := e.call(t, t.Context(), "read_thread", map[string]any{"thread": thread, "since": rd.Cursor})
	assert.True(t, strings.Contains(text(read), "hermes") && strings.Contains(text(read), "canceled"), "read said %q", text(read))
	ap := ok[host.InteractionResult](t, e, "request_approval", map[string]any{"thread": thread, "summary": "Deploy build 412?", "title": "deploy",
		"details": []map[string]string{{"label": "build", "value": "412"}}})
	assert.Equal(t, "approval", ap.Interaction.Type, chatrelay.Approval)
	op := e.call(t, t.Context(), "open_thread", map[string]any{"title": "Deploy 412", "text": "Shall I deploy build 412?"})
	assert.True(t, strings.Contains(text(op), publicURL+"/#t="), "open_thread said %q", text(op))
	for _, verb := range chatrelay.Verbs() {
		assert.True(t, e.answered[verb], "chatrelay_%s was not called with a result", verb)
	}
}

// TestWaitsReportProgress: a wait called with a progressToken sends
// notifications/progress for that token while it waits, every
// ProgressEvery, progress increasing and total the wait's timeout, so that
// a client resetting its request timeout on progress keeps waiting; the
// wait still answers when its event comes.
func TestWaitsReportProgress(t *testing.T) {
	progress := make(chan *mcp.ProgressNotificationParams, 1024)
	e := newEnvWith(t, &mcpserver.Options{ProgressEvery: 20 * time.Millisecond}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { progress <- req.Params },
	})
	ix := ok[host.InteractionResult](t, e, "request_input", map[string]any{"thread": thread, "prompt": "Which branch?", "allow_text": true})
	rd := ok[host.ReadThreadResult](t, e, "read_thread", map[string]any{"thread": thread})
	for _, tc := range []struct {
		verb  string
		args  map[string]any
		token any
		end   func() error // what the wait waits for
	}{
		{"wait_messages", map[string]any{"thread": thread, "since": rd.Cursor, "timeout": 60}, "messages-1", func() error {
			_, err := e.st.Append(t.Context(), thread, store.NewMessage{Text: "main, please"})
			return err
		}},
		{"wait_interaction", map[string]any{"thread": thread, "interaction_id": ix.Interaction.ID, "timeout": 60}, 7, func() error {
			_, err := e.st.Change(t.Context(), thread, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID,
				Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator})
			return err
		}},
	} {
		t.Run(tc.verb, func(t *testing.T) {
			params := &mcp.CallToolParams{Name: mcpserver.ToolName(tc.verb), Arguments: tc.args}
			params.SetProgressToken(tc.token)
			type called struct {
				r   *mcp.CallToolResult
				err error
			}
			answered := make(chan called, 1)
			go func() {
				r, err := e.cs.CallTool(t.Context(), params)
				answered <- called{r, err}
			}()
			want, _ := json.Marshal(tc.token)
			var last float64
			deadline := time.After(10 * time.Second)
			for n := 0; n < 3; {
				select {
				case p := <-progress:
					if got, _ := json.Marshal(p.ProgressToken); string(got) != string(want) {
						continue // an earlier wait's
					}
					assert.True(t, p.Progress > last, "progress %v after %v: not increasing", p.Progress, last)
					assert.Equal(t, "total", p.Total, 60.0)
					last = p.Progress
					n++
				case c := <-answered:
					t.Fatalf("the wait answered before it reported progress: %v %v", c.r, c.err)
				case <-deadline:
					t.Fatalf("%s sent no progress for token %s within 10s", tc.verb, want)
				}
			}
			assert.Success(t, tc.end())
			select {
			case c := <-answered:
				assert.Success(t, c.err)
				assert.True(t, !c.r.IsError, "%s: %s", tc.verb, text(c.r))
				var out struct {
					TimedOut bool `json:"timed_out"`
				}
				b, _ := json.Marshal(c.r.StructuredContent)
				assert.Success(t, json.Unmarshal(b, &out))
				assert.True(t, !out.TimedOut, "%s timed out: %s", tc.verb, b)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not answer after its event", tc.verb)
			}
		})
	}
}

// TestOpenThread: chatrelay_open_thread starts a thread with hermes's
// first message and its title, and answers its claim link
// <public URL>/#t=<token>, whose token is the thread's (ThreadOf) and
// is fresh each time. Without a text, the title is the first message.
func TestOpenThread(t *testing.T) {
	e := newEnv(t)
	linkRE := regexp.MustCompile(`^` + regexp.QuoteMeta(publicURL) + `/#t=([0-9a-f]{64})$`)
	open := func(args map[string]any) (host.OpenThreadResult, string) {
		t.Helper()
		r := ok[host.OpenThreadResult](t, e, "open_thread", args)
		m := linkRE.FindStringSubmatch(r.Link)
		assert.True(t, m != nil, "link %q is not %s/#t=<64 hex>", r.Link, publicURL)
		assert.Equal(t, "the thread is the token's", r.Thread, chatrelay.ThreadOf(m[1]))
		return r, m[1]
	}
	r, token := open(map[string]any{"title": "Deploy 412", "text": "Shall I deploy build 412?"})
	p, err := e.st.Changes(t.Context(), r.Thread, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "title", p.Title, "Deploy 412")
	assert.Equal(t, "messages", len(p.Messages), 1)
	assert.Equal(t, "author", p.Messages[0].Author, chatrelay.Hermes)
	assert.Equal(t, "text", p.Messages[0].Text, "Shall I deploy build 412?")

	r2, token2 := open(map[string]any{"title": "Only a title"})
	assert.True(t, token2 != token && r2.Thread != r.Thread, "the same token twice")
	p2, err := e.st.Changes(t.Context(), r2.Thread, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "the title is the first message", p2.Messages[0].Text, "Only a title")
	r3, _ := open(map[string]any{"text": "No title"})
	p3, err := e.st.Changes(t.Context(), r3.Thread, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "no title", p3.Title, "")

	th := ok[host.ListThreadsResult](t, e, "list_threads", map[string]any{})
	titles := map[string]string{}
	for _, x := range th.Threads {
		titles[x.Thread] = x.Title
	}
	assert.Equal(t, "list_threads' titles", titles, map[string]string{thread: "", r.Thread: "Deploy 412", r2.Thread: "Only a title", r3.Thread: ""})
}

// TestOpenThreadClientID: over stdio, chatrelay_open_thread with a
// client_id called again (its answer lost) answers the same thread and
// link, says so, and makes nothing new; another text with it is the
// tool's error client_id_conflict.
func TestOpenThreadClientID(t *testing.T) {
	e := newEnv(t)
	args := map[string]any{"title": "Deploy 412", "text": "Shall I deploy build 412?", "client_id": "deploy-412"}
	r := ok[host.OpenThreadResult](t, e, "open_thread", args)
	again := e.call(t, t.Context(), "open_thread", args)
	assert.True(t, !again.IsError, "the repeat: %s", text(again))
	assert.True(t, strings.Contains(text(again), "already opened") && strings.Contains(text(again), r.Link), "the repeat said %q", text(again))
	var r2 host.OpenThreadResult
	b, _ := json.Marshal(again.StructuredContent)
	assert.Success(t, json.Unmarshal(b, &r2))
	assert.Equal(t, "the repeat", r2, host.OpenThreadResult{Thread: r.Thread, Link: r.Link, Replayed: true})
	p, err := e.st.Changes(t.Context(), r.Thread, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", len(p.Messages), 1)
	conflict := e.call(t, t.Context(), "open_thread", map[string]any{"text": "Shall I roll back?", "title": "Deploy 412", "client_id": "deploy-412"})
	assert.True(t, conflict.IsError && strings.HasPrefix(text(conflict), string(chatrelay.ClientIDConflict)), "another text: %s", text(conflict))
}

// TestRefusalSaysHowLongToWait: a refusal that a later retry gets past
// (rate_limited, whose window frees a place only minutes later, and
// too_many_streams) says how long to wait, retry_after_ms in its
// structured content and in its text, as the API's error body does. It
// said retryable and nothing more, so an agent could only guess, and one
// that retried at once was refused again for up to the window's 10
// minutes.
func TestRefusalSaysHowLongToWait(t *testing.T) {
	for _, c := range []struct {
		refusal *chatrelay.Error
		wantMS  int64
		wantIn  string
	}{
		{&chatrelay.Error{Code: chatrelay.RateLimited, Retry: 90 * time.Second, Message: "rate limit: at most 20 posts per thread"}, 90000, "retry in 1m30s"},
		{&chatrelay.Error{Code: chatrelay.TooManyStreams, Retry: 1500 * time.Millisecond, Message: "too many tool calls"}, 1500, "retry in 1.5s"},
	} {
		t.Run(string(c.refusal.Code), func(t *testing.T) {
			e := newEnvWith(t, &mcpserver.Options{Call: func(ctx context.Context, _ string, _ json.RawMessage) (context.Context, func(error, bool), error) {
				return ctx, func(error, bool) {}, c.refusal
			}}, nil)
			r := e.call(t, t.Context(), chatrelay.VerbSend, map[string]any{"thread": thread, "text": "hello"})
			assert.True(t, r.IsError, "the refused call answered a result")
			var te struct {
				Code         chatrelay.Code `json:"code"`
				Retryable    bool           `json:"retryable"`
				RetryAfterMS int64          `json:"retry_after_ms"`
			}
			b, _ := json.Marshal(r.StructuredContent)
			assert.Success(t, json.Unmarshal(b, &te))
			assert.True(t, te.Code == c.refusal.Code && te.Retryable, "the refusal: %s", b)
			assert.Equal(t, "retry_after_ms", te.RetryAfterMS, c.wantMS)
			assert.True(t, strings.Contains(text(r), c.wantIn), "the text %q does not say %q", text(r), c.wantIn)
		})
	}
	// A refusal that no wait gets past says nothing of one.
	e := newEnv(t)
	r := e.call(t, t.Context(), chatrelay.VerbSend, map[string]any{"thread": thread})
	b, _ := json.Marshal(r.StructuredContent)
	assert.True(t, r.IsError && !strings.Contains(string(b), "retry_after_ms") && !strings.Contains(text(r), "retry in"), "a refusal not retryable: %s %q", b, text(r))
}

// TestWholeNumbersWrittenAsFloats: an integer argument written with a
// fraction or an exponent (60.0, as Python's json writes a float, or 1e0)
// is that integer: JSON Schema's "integer", which the input schemas say,
// counts it, so a client that validates its arguments sends it. The
// server refused it, invalid_json "timeout must be an integer". A number
// with a fraction is still refused, and so is a timeout past its bound.
func TestWholeNumbersWrittenAsFloats(t *testing.T) {
	e := newEnv(t)
	for _, args := range []string{
		`{"thread":"` + thread + `","since":9000000000000,"timeout":1.0}`,
		`{"thread":"` + thread + `","since":9e12,"timeout":1e0}`,
		`{"thread":"` + thread + `","since":9.0E+12,"timeout":0.1e1}`,
	} {
		r := e.call(t, t.Context(), chatrelay.VerbWaitMessages, json.RawMessage(args))
		assert.True(t, !r.IsError, "%s: %s", args, text(r))
		var w host.WaitMessagesResult
		b, _ := json.Marshal(r.StructuredContent)
		assert.Success(t, json.Unmarshal(b, &w))
		// 9e12 is past the thread's one message: the wait times out and
		// answers that message's epoch as its cursor (host's
		// TestWaitMessagesPastEveryCursor); a since read as anything
		// below it would have answered the message at once.
		assert.True(t, w.TimedOut && w.Cursor == e.first.Epoch, "%s: %s", args, b)
	}
	for _, args := range []string{
		`{"thread":"` + thread + `","timeout":1.5}`,
		`{"thread":"` + thread + `","timeout":1e300}`,
		`{"thread":"` + thread + `","timeout":"1"}`,
	} {
		r := e.call(t, t.Context(), chatrelay.VerbWaitMessages, json.RawMessage(args))
		b, _ := json.Marshal(r.StructuredContent)
		assert.True(t, r.IsError && strings.Contains(string(b), `"invalid_json"`), "%s: %s", args, b)
	}
}

// TestCursorPastInt64: a cursor too large for 64 bits (99999999999999999999,
// or 1e+20 as JavaScript writes it) is past every epoch there can be and
// reads as "nothing newer", as the API's since does; the input schemas
// bound it by no maximum. It was refused invalid_json "since must be an
// integer", which it is.
func TestCursorPastInt64(t *testing.T) {
	e := newEnv(t)
	for _, since := range []string{"99999999999999999999", "1e+20"} {
		r := e.call(t, t.Context(), chatrelay.VerbReadThread, json.RawMessage(`{"thread":"`+thread+`","since":`+since+`}`))
		assert.True(t, !r.IsError, "read_thread since %s: %s", since, text(r))
		var read struct { // the cursor, int64's most, is past what the client's float64 holds
			Messages []json.RawMessage `json:"messages"`
		}
		b, _ := json.Marshal(r.StructuredContent)
		assert.Success(t, json.Unmarshal(b, &read))
		assert.Equal(t, "read_thread since "+since+": messages", len(read.Messages), 0)

		r = e.call(t, t.Context(), chatrelay.VerbWaitMessages, json.RawMessage(`{"thread":"`+thread+`","since":`+since+`,"timeout":1}`))
		assert.True(t, !r.IsError, "wait_messages since %s: %s", since, text(r))
		var w struct {
			Messages []json.RawMessage `json:"messages"`
			TimedOut bool              `json:"timed_out"`
		}
		b, _ = json.Marshal(r.StructuredContent)
		assert.Success(t, json.Unmarshal(b, &w))
		assert.True(t, w.TimedOut && len(w.Messages) == 0, "wait_messages since %s: %s", since, b)
	}
	r := e.call(t, t.Context(), chatrelay.VerbWaitMessages, json.RawMessage(`{"thread":"`+thread+`","since":-99999999999999999999}`))
	b, _ := json.Marshal(r.StructuredContent)
	assert.True(t, r.IsError && strings.Contains(string(b), `"invalid_since"`), "a cursor below int64: %s", b)
}

// TestProgressTotalOfAWholeNumberTimeout: a wait whose timeout is written
// as a whole number with a fraction or an exponent (60.0, as Python's json
// writes a float, or 6e1) waits that timeout, and its progress says so:
// total 60. Its progress said total 300 and "of at most 5m0s" (the most a
// wait may ask) while the call ended at 60 s, so a client drawing the
// progress against total showed a wait five times too long. The exchange
// (agentprobe, Streamable HTTP):
//
//	→ {"method":"tools/call","params":{"name":"chatrelay_wait_messages",
//	   "arguments":{"since":99999999999999,"timeout":5.0},"_meta":{"progressToken":7}}}
//	← {"method":"notifications/progress","params":{"progressToken":7,
//	   "message":"waiting for a message (2s of at most 5m0s)","progress":2,"total":300}}
func TestProgressTotalOfAWholeNumberTimeout(t *testing.T) {
	progress := make(chan *mcp.ProgressNotificationParams, 1024)
	e := newEnvWith(t, &mcpserver.Options{ProgressEvery: 20 * time.Millisecond}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { progress <- req.Params },
	})
	for _, timeout := range []string{"60.0", "6e1", "0.6e2"} {
		t.Run(timeout, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			params := &mcp.CallToolParams{Name: mcpserver.ToolName(chatrelay.VerbWaitMessages),
				Arguments: json.RawMessage(`{"thread":"` + thread + `","since":9000000000000,"timeout":` + timeout + `}`)}
			params.SetProgressToken("t-" + timeout)
			answered := make(chan error, 1)
			go func() {
				_, err := e.cs.CallTool(ctx, params)
				answered <- err
			}()
			for {
				select {
				case p := <-progress:
					if p.ProgressToken != "t-"+timeout {
						continue // an earlier wait's
					}
					assert.Equal(t, "total", p.Total, 60.0)
					assert.True(t, strings.Contains(p.Message, "of at most 1m0s"), "progress message %q", p.Message)
					cancel()
					<-answered
					return
				case err := <-answered:
					t.Fatalf("the wait answered before it reported progress: %v", err)
				case <-time.After(10 * time.Second):
					t.Fatalf("no progress within 10s")
				}
			}
		})
	}
}
