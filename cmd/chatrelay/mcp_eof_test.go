package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// mcpLine is a line `chatrelay mcp` wrote, as a client reads it.
type mcpLine struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	line string
}

// pipeMCP runs `chatrelay mcp --data data` with lines as its whole
// standard input (as `printf … | chatrelay mcp` does), bounded by the
// test's deadline, and returns the answers it wrote by id (as JSON).
func pipeMCP(t *testing.T, data string, lines ...string) map[string]mcpLine {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok { // a hang fails the test with what was written, not the binary
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"mcp", "--data", data, "--fsync", "never"}, env(nil), strings.NewReader(strings.Join(lines, "\n")+"\n"), &stdout, &stderr)
	assert.True(t, err == nil, "chatrelay mcp: %v; stderr: %s", err, stderr.String())
	assert.True(t, ctx.Err() == nil, "chatrelay mcp outlived its input until the test's deadline; wrote %q", stdout.String())
	answers := map[string]mcpLine{}
	for l := range strings.Lines(stdout.String()) {
		a := mcpLine{line: l}
		assert.True(t, json.Unmarshal([]byte(l), &a) == nil, "a line that is no JSON: %q", l)
		if a.Method == "" {
			answers[string(a.ID)] = a
		}
	}
	return answers
}

const mcpInit = `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}` + "\n" +
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`

// TestMCPAnswersEveryCallAtEndOfInput: `printf … | chatrelay mcp`, a
// client that writes its calls and closes its end: every call is
// answered (initialize, tools/list, a send), the message sent is stored,
// and the command exits 0.
func TestMCPAnswersEveryCallAtEndOfInput(t *testing.T) {
	t.Parallel()
	data := seed(t)
	got := pipeMCP(t, data, mcpInit,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chatrelay_send","arguments":{"thread":"`+threadOld+`","text":"sent before the end of input"}}}`)
	for _, id := range []string{`"init"`, "2", "3"} {
		a, ok := got[id]
		assert.True(t, ok, "no answer to the call %s; answers: %v", id, slices.Sorted(maps.Keys(got)))
		assert.True(t, a.Error == nil && a.Result != nil && !a.Result.IsError, "the call %s: %s", id, a.line)
	}
	r := runCLI(t, nil, "", "show", threadOld, "--json", "--data", data)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "sent before the end of input"), "the thread: %s", r.stdout)
}

// TestMCPEndsWaitsAtEndOfInput: waits of up to 300 s in flight when the
// client closes its end do not hold the process: each is answered as its
// timeout would answer it then (wait_messages timed_out with its cursor,
// wait_interaction still pending, timed_out), a subscriptions/listen,
// which lasts until canceled, is answered, a call the client canceled
// gets no answer (as MCP asks), and the command exits 0.
func TestMCPEndsWaitsAtEndOfInput(t *testing.T) {
	t.Parallel()
	data := seed(t)
	r := runCLI(t, nil, "", "ask", threadOld, "--approval", "Deploy?", "--data", data)
	assert.Success(t, r.err)
	var asked host.InteractionResult
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &asked))
	assert.True(t, asked.Interaction != nil, "ask printed %s", r.stdout)
	ix := asked.Interaction.ID

	got := pipeMCP(t, data, mcpInit,
		// Nothing to answer in threadOld (hermes asked last): it waits.
		`{"jsonrpc":"2.0","id":"messages","method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"thread":"`+threadOld+`","timeout":300}}}`,
		`{"jsonrpc":"2.0","id":"interaction","method":"tools/call","params":{"name":"chatrelay_wait_interaction","arguments":{"thread":"`+threadOld+`","interaction_id":"`+ix+`","timeout":300}}}`,
		`{"jsonrpc":"2.0","id":"canceled","method":"tools/call","params":{"name":"chatrelay_wait_messages","arguments":{"thread":"`+threadOld+`","timeout":300}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"canceled"}}`,
		`{"jsonrpc":"2.0","id":"listen","method":"subscriptions/listen","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"notifications":{"toolsListChanged":true}}}`,
		`{"jsonrpc":"2.0","id":"ping","method":"ping"}`)

	for _, id := range []string{`"init"`, `"messages"`, `"interaction"`, `"ping"`} {
		a, ok := got[id]
		assert.True(t, ok, "no answer to the call %s; answers: %v", id, slices.Sorted(maps.Keys(got)))
		assert.True(t, a.Error == nil && a.Result != nil && !a.Result.IsError, "the call %s: %s", id, a.line)
	}
	// The listen ends as on a cancel: with its result once it runs, or
	// an error if it had not started yet.
	_, answered := got[`"listen"`]
	assert.True(t, answered, "no answer to subscriptions/listen; answers: %v", slices.Sorted(maps.Keys(got)))
	_, answered = got[`"canceled"`]
	assert.True(t, !answered, "the canceled call was answered: %s", got[`"canceled"`].line)

	var waited host.WaitMessagesResult
	assert.Success(t, json.Unmarshal(got[`"messages"`].Result.StructuredContent, &waited))
	assert.True(t, waited.TimedOut && len(waited.Messages) == 0 && waited.Cursor > 0, "wait_messages: %s", got[`"messages"`].line)
	var interaction host.InteractionResult
	assert.Success(t, json.Unmarshal(got[`"interaction"`].Result.StructuredContent, &interaction))
	assert.True(t, interaction.TimedOut && interaction.Interaction.State == "pending" && interaction.Interaction.ID == ix, "wait_interaction: %s", got[`"interaction"`].line)
}
