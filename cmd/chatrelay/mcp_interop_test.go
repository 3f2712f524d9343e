package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/mcpserver"
)

// TestMCPFromTheTypeScriptSDK: an agent runtime we did not write — the
// official TypeScript SDK's client (testdata/mcpjs, pinned by its lock
// file), in Node — starts `chatrelay mcp` over stdio. It initializes,
// lists the tools (the verbs, with the bundle's input schemas, and the
// output schemas against which it validates every answer's structured
// content, a tool error's included), reads the thread list, sends (a
// repeat with the same client_id stores nothing), gets a tool error with
// the contract's code and structured content for a blank text, asks for
// approval, and its wait_interaction returns approved once the person
// answers over HTTP; a second wait, with a 1 s request timeout that the
// client resets on progress (resetTimeoutOnProgress), outlives it on the
// server's notifications/progress and gets its answer. Node and npm come
// from .ci/packages; the SDK from npm, once per lock file (in the user's
// cache folder).
func TestMCPFromTheTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node := lookPath(t, "node")
	dir := installMCPClient(t, lookPath(t, "npm"))
	e := startChat(t)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "client.mjs"), chatrelayBinary(t), e.data, e.url, e.token, e.thread)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.Bytes())
	}

	type toolResult struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Type, Text string
		} `json:"content"`
	}
	var out struct {
		Server       struct{ Name, Version string }
		Capabilities struct {
			Tools *json.RawMessage `json:"tools"`
		}
		Instructions string
		Tools        []struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		}
		Post, Respond, Respond2                              int
		List, Send, Resend, Blank, Ask, Wait, Ask2, SlowWait toolResult
		Progress                                             []struct {
			Progress, Total float64
		}
	}
	assert.Success(t, json.Unmarshal(stdout, &out))

	assert.Equal(t, "server name", out.Server.Name, "chatrelay")
	assert.True(t, out.Capabilities.Tools != nil, "the server announces no tools capability")
	assert.True(t, strings.Contains(out.Instructions, "chatrelay_request_approval"), "instructions: %q", out.Instructions)
	assert.Equal(t, "tools", len(out.Tools), len(chatrelay.Verbs()))
	for _, tl := range out.Tools {
		verb := strings.TrimPrefix(tl.Name, "chatrelay_")
		def, ok := chatrelay.SchemaDef(verb + ".input")
		assert.True(t, ok, "tool %s is no verb of the bundle", tl.Name)
		assert.True(t, schematest.SameJSON(tl.InputSchema, def), "%s's input schema is not %s.input: %s", tl.Name, verb, tl.InputSchema)
		// The client validated each answer below against this.
		assert.True(t, schematest.SameJSON(tl.OutputSchema, mcpserver.OutputSchema(verb)), "%s's output schema: %s", tl.Name, tl.OutputSchema)
	}

	ok := func(verb string, r toolResult) {
		t.Helper()
		assert.True(t, !r.IsError, "chatrelay_%s: %+v", verb, r)
		schematest.Valid(t, verb+".result", r.StructuredContent)
	}
	assert.Equal(t, "the person's post", out.Post, 201)
	ok("list_threads", out.List)
	ok("send", out.Send)
	ok("send", out.Resend)
	var sent, resent struct {
		Message  json.RawMessage `json:"message"`
		Replayed bool            `json:"replayed"`
	}
	assert.Success(t, json.Unmarshal(out.Send.StructuredContent, &sent))
	assert.Success(t, json.Unmarshal(out.Resend.StructuredContent, &resent))
	assert.True(t, !sent.Replayed && resent.Replayed, "replayed: %v then %v", sent.Replayed, resent.Replayed)
	assert.Equal(t, "a repeat with the same client_id", string(resent.Message), string(sent.Message))
	assert.True(t, out.Blank.IsError, "a blank text was no tool error: %+v", out.Blank)
	assert.True(t, len(out.Blank.Content) == 1 && strings.HasPrefix(out.Blank.Content[0].Text, string(chatrelay.InvalidText)+": "),
		"a blank text's error: %+v", out.Blank.Content)
	schematest.Valid(t, "verb.error", out.Blank.StructuredContent)
	ok("request_approval", out.Ask)
	assert.Equal(t, "the person's answer", out.Respond, 200)
	ok("wait_interaction", out.Wait)
	var waited struct {
		Interaction struct {
			State      chatrelay.State  `json:"state"`
			AnsweredBy chatrelay.Author `json:"answered_by"`
		} `json:"interaction"`
	}
	assert.Success(t, json.Unmarshal(out.Wait.StructuredContent, &waited))
	assert.Equal(t, "the wait's outcome", waited.Interaction, struct {
		State      chatrelay.State  `json:"state"`
		AnsweredBy chatrelay.Author `json:"answered_by"`
	}{chatrelay.Approved, chatrelay.Operator})

	// The wait that outlived the client's 1 s request timeout: progress
	// came every 100 ms, increasing, out of the wait's 60 s, and the call
	// got the person's answer.
	ok("request_approval", out.Ask2)
	assert.True(t, len(out.Progress) >= 15, "progress notifications: %d", len(out.Progress))
	for i, p := range out.Progress {
		assert.True(t, p.Total == 60 && (i == 0 || p.Progress > out.Progress[i-1].Progress), "progress %d: %+v after %+v", i, p, out.Progress[max(i-1, 0)])
	}
	assert.Equal(t, "the person's second answer", out.Respond2, 200)
	ok("wait_interaction", out.SlowWait)
	assert.Success(t, json.Unmarshal(out.SlowWait.StructuredContent, &waited))
	assert.Equal(t, "the slow wait's outcome", waited.Interaction.State, chatrelay.Approved)

	// Everything the client did is in the thread: the person's post, one
	// reply (not two), the approval.
	rd := runCLI(t, nil, "", "show", e.thread, "--data", e.data, "--json")
	assert.Success(t, rd.err)
	assert.Equal(t, "replies stored", strings.Count(rd.stdout, "Yes, once you approve."), 1)
}

// lookPath finds a program the test needs; CI installs it (.ci/packages).
func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (apt-get install nodejs npm; .ci/test installs it): %v", name, err)
	}
	return p
}

// installMCPClient installs testdata/mcpjs with `npm ci` into a folder of
// the user's cache named by its lock file's digest, once, and returns it.
// A marker written after a whole install tells the next run it is there;
// an install cut short has none, and is done again.
func installMCPClient(t *testing.T, npm string) string {
	t.Helper()
	src := filepath.Join("testdata", "mcpjs")
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	assert.Success(t, err)
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil { // no $HOME nor $XDG_CACHE_HOME: install it for this run only
		cache = t.TempDir()
	}
	dir := filepath.Join(cache, "chatrelay-test", "mcpjs-"+hex.EncodeToString(sum[:8]))
	assert.Success(t, os.MkdirAll(dir, 0o755))
	for _, f := range []string{"package.json", "package-lock.json", "client.mjs", "httpclient.mjs"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		assert.Success(t, err)
		assert.Success(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	installed := filepath.Join(dir, "node_modules", ".chatrelay-installed")
	if _, err := os.Stat(installed); err == nil {
		return dir
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, b)
	}
	assert.Success(t, os.WriteFile(installed, nil, 0o644))
	return dir
}
