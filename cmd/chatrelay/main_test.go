package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// lockedBuffer is a buffer a running server may write to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// env returns a getenv over vars.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// cliResult is what one run of a subcommand did.
type cliResult struct {
	err            error
	stdout, stderr string
}

// runCLI runs the command line args to completion.
func runCLI(t *testing.T, getenv func(string) string, stdin string, args ...string) cliResult {
	t.Helper()
	if getenv == nil {
		getenv = env(nil)
	}
	// Locked: go-redis logs through one logger per process, handed to the
	// newest open store's (clientlog.go), so another test's store may log
	// a failed dial here while this command writes.
	var stdout, stderr lockedBuffer
	err := run(t.Context(), args, getenv, strings.NewReader(stdin), &stdout, &stderr)
	return cliResult{err: err, stdout: stdout.String(), stderr: stderr.String()}
}

const (
	cliToken  = "1111111111111111111111111111111111111111111111111111111111111111"
	threadOld = "00000000000000aa"
	threadNew = "00000000000000bb"
)

var t0 = time.Date(2026, 10, 23, 18, 40, 0, 123e6, time.UTC)

// seed fills a data folder: threadOld (operator, then hermes) and, a
// minute later, threadNew (agent).
func seed(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	now := t0
	st, err := filestore.OpenFile(data, filestore.FileOptions{NoFsync: true, Now: func() time.Time { return now }, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer st.Close()
	for _, m := range []struct {
		thread string
		author chatrelay.Author
		text   string
	}{
		{threadOld, chatrelay.Operator, "is it green?"},
		{threadOld, chatrelay.Hermes, "green\nand deployed"},
		{threadNew, chatrelay.Agent, "new question"},
	} {
		_, err := st.Append(t.Context(), m.thread, store.NewMessage{Author: m.author, Text: m.text})
		assert.Success(t, err)
		now = now.Add(time.Minute)
	}
	return data
}

func TestServe(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-data", data, "-fsync", "never", "-log-level", "debug"},
			env(nil), strings.NewReader(""), pw, &stderr)
		pw.Close()
	}()

	lines := bufio.NewScanner(pr)
	assert.True(t, lines.Scan(), "serve wrote nothing (%v); log:\n%s", lines.Err(), stderr.String())
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[0-9]+/)$`).FindStringSubmatch(lines.Text())
	assert.True(t, m != nil, "first line %q", lines.Text())
	base := m[1]
	go io.Copy(io.Discard, pr) // whatever else serve prints

	poll := func() (*http.Response, error) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"api/chat/poll", nil)
		req.Header.Set("X-Chat-Token", cliToken)
		return http.DefaultClient.Do(req)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := poll()
		if err == nil {
			res.Body.Close()
			assert.Equal(t, "poll status", res.StatusCode, http.StatusOK)
			break
		}
		assert.True(t, time.Now().Before(deadline), "the server never answered: %v", err)
	}

	req, _ := http.NewRequest("POST", base+"api/chat/post", strings.NewReader(`{"text":"hello from the browser"}`))
	req.Header.Set("X-Chat-Token", cliToken)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	res.Body.Close()
	assert.Equal(t, "post status", res.StatusCode, http.StatusCreated)

	// The host CLI answers through the same store while the server runs.
	thread := chatrelay.ThreadOf(cliToken)
	r := runCLI(t, nil, "", "reply", "--data", data, thread, "hello from the host")
	assert.Success(t, r.err)
	res, err = poll()
	assert.Success(t, err)
	var page struct {
		Messages []chatrelay.Message `json:"messages"`
		Awaiting bool                `json:"awaiting"`
	}
	err = json.NewDecoder(res.Body).Decode(&page)
	res.Body.Close()
	assert.Success(t, err)
	assert.Equal(t, "messages", len(page.Messages), 2)
	assert.Equal(t, "reply author", page.Messages[1].Author, chatrelay.Hermes)
	assert.Equal(t, "awaiting", page.Awaiting, false)

	cancel()
	select {
	case err := <-errc:
		assert.Success(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after its context was cancelled")
	}
}

func TestServeRefusesBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"serve", "--no-such-flag"}},
		{"bad fsync", []string{"serve", "--fsync", "sometimes"}},
		{"bad proxy", []string{"serve", "--trusted-proxy", "not-a-cidr"}},
		{"zero max threads", []string{"serve", "--max-threads", "0"}},
		{"stray argument", []string{"serve", "extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append(tt.args, "--data", t.TempDir(), "--addr", "127.0.0.1:0")
			r := runCLI(t, nil, "", args...)
			assert.True(t, r.err != nil, "serve accepted %q", tt.args)
			assert.Equal(t, "exit code", exitCode(r.err), 2)
		})
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	data := seed(t)

	r := runCLI(t, nil, "", "list", "--data", data)
	assert.Success(t, r.err)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	assert.Equal(t, "lines", len(lines), 3)
	assert.Equal(t, "header", strings.Fields(lines[0]), []string{"THREAD", "MESSAGES", "LAST", "AUTHOR", "LAST", "(UTC)", "AWAITING", "TITLE", "LAST", "MESSAGE"})
	assert.Equal(t, "newest first", strings.Fields(lines[1]), []string{threadNew, "1", "agent", "2026-10-23", "18:42:00Z", "true", "-", "new", "question"})
	assert.Equal(t, "then: the newest message on one line", strings.Fields(lines[2]), []string{threadOld, "2", "hermes", "2026-10-23", "18:41:00Z", "false", "-", "green", "and", "deployed"})

	r = runCLI(t, nil, "", "list", "--data", data, "--json")
	assert.Success(t, r.err)
	var rows []map[string]any
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &rows))
	assert.Equal(t, "rows", len(rows), 2)
	assert.Equal(t, "first thread", rows[0]["thread"], any(threadNew))
	assert.Equal(t, "last time", rows[0]["last_time"], any("2026-10-23T18:42:00Z"))
	assert.Equal(t, "awaiting", rows[1]["awaiting"], any(false))
}

func TestShow(t *testing.T) {
	t.Parallel()
	data := seed(t)

	r := runCLI(t, nil, "", "show", "--data", data, threadOld)
	assert.Success(t, r.err)
	for _, want := range []string{"2026-10-23 18:40:00Z", "operator", "is it green?", "2026-10-23 18:41:00Z", "hermes", "green\n    and deployed", "awaiting false"} {
		assert.True(t, strings.Contains(r.stdout, want), "show lacks %q:\n%s", want, r.stdout)
	}

	r = runCLI(t, nil, "", "show", "--data", data, "--json", "--since", "1792780800123", threadOld)
	assert.Success(t, r.err)
	var page struct {
		Thread   string              `json:"thread"`
		Messages []chatrelay.Message `json:"messages"`
		Awaiting bool                `json:"awaiting"`
		Cursor   int64               `json:"cursor"`
	}
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &page))
	assert.Equal(t, "thread", page.Thread, threadOld)
	assert.Equal(t, "messages after --since", len(page.Messages), 1)
	assert.Equal(t, "text", page.Messages[0].Text, "green\nand deployed")
	assert.Equal(t, "cursor", page.Cursor, t0.Add(time.Minute).UnixMilli())

	r = runCLI(t, nil, "", "show", "--data", data, "not-a-thread")
	assert.Equal(t, "exit code for a malformed thread", exitCode(r.err), 2)
	r = runCLI(t, nil, "", "show", "--data", data, "--since", "-5", threadOld)
	assert.Equal(t, "exit code for a negative --since", exitCode(r.err), 2)
}

func TestReply(t *testing.T) {
	t.Parallel()
	const missing = "00000000000000cc"
	tests := []struct {
		name     string
		args     []string // after "reply --data DIR"
		stdin    string
		wantText string         // stored as hermes' newest message; "" if refused
		wantCode chatrelay.Code // the refusal's code
		wantExit int
		wantWord string // in the error a person reads
	}{
		{name: "text", args: []string{threadNew, "on it"}, wantText: "on it"},
		{name: "4000 code points", args: []string{threadNew, strings.Repeat("é", 4000)}, wantText: strings.Repeat("é", 4000)},
		{name: "from standard input", args: []string{threadNew, "-"}, stdin: "line one\nline two\n", wantText: "line one\nline two"},
		{name: "unknown thread", args: []string{missing, "hello?"}, wantCode: chatrelay.NotFound, wantExit: 1, wantWord: "no thread " + missing},
		{name: "empty text", args: []string{threadNew, ""}, wantCode: chatrelay.InvalidText, wantExit: 1, wantWord: "empty"},
		{name: "blank text", args: []string{threadNew, " \n "}, wantCode: chatrelay.InvalidText, wantExit: 1, wantWord: "empty"},
		{name: "empty standard input", args: []string{threadNew, "-"}, stdin: "", wantCode: chatrelay.InvalidText, wantExit: 1, wantWord: "empty"},
		{name: "4001 characters", args: []string{threadNew, strings.Repeat("a", 4001)}, wantCode: chatrelay.TextTooLong, wantExit: 1, wantWord: "text too long (max 4000 chars)"},
		{name: "4001 characters on standard input", args: []string{threadNew, "-"}, stdin: strings.Repeat("é", 4001), wantCode: chatrelay.TextTooLong, wantExit: 1, wantWord: "too long"},
		{name: "malformed thread", args: []string{"../../etc", "hi"}, wantCode: chatrelay.InvalidThread, wantExit: 2, wantWord: "16 lowercase hex"},
		{name: "no text", args: []string{threadNew}, wantExit: 2, wantWord: "THREAD and TEXT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := seed(t)
			r := runCLI(t, nil, tt.stdin, append([]string{"reply", "--data", data}, tt.args...)...)
			st, err := filestore.OpenFile(data, filestore.FileOptions{Log: slog.New(slog.DiscardHandler)})
			assert.Success(t, err)
			if tt.wantText == "" {
				assert.True(t, r.err != nil, "reply accepted: %s", r.stdout)
				assert.Equal(t, "exit code", exitCode(r.err), tt.wantExit)
				if tt.wantCode != "" {
					assert.Code(t, r.err, tt.wantCode)
				}
				assert.True(t, strings.Contains(r.err.Error(), tt.wantWord), "error %q lacks %q", r.err, tt.wantWord)
				threads, err := st.Threads(t.Context())
				assert.Success(t, err)
				assert.Equal(t, "threads", len(threads), 2) // nothing created
				p, err := st.Since(t.Context(), threadNew, 0, 0)
				assert.Success(t, err)
				assert.Equal(t, "messages", len(p.Messages), 1) // nothing appended
				return
			}
			assert.Success(t, r.err)
			var ans struct {
				ID     string `json:"id"`
				Epoch  int64  `json:"epoch"`
				Thread string `json:"thread"`
			}
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &ans))
			p, err := st.Since(t.Context(), threadNew, 0, 0)
			assert.Success(t, err)
			last := p.Messages[len(p.Messages)-1]
			assert.Equal(t, "stored", []any{last.Author, last.Text, last.ID, last.Epoch}, []any{chatrelay.Hermes, tt.wantText, ans.ID, ans.Epoch})
			assert.Equal(t, "awaiting", p.Awaiting, false)
		})
	}
}

func TestDataFromTheEnvironment(t *testing.T) {
	t.Parallel()
	data := seed(t)
	getenv := env(map[string]string{"CHATRELAY_DATA": data})

	r := runCLI(t, getenv, "", "list", "--json")
	assert.Success(t, r.err)
	var rows []map[string]any
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &rows))
	assert.Equal(t, "threads listed from $CHATRELAY_DATA", len(rows), 2)

	r = runCLI(t, getenv, "", "reply", threadOld, "via the environment")
	assert.Success(t, r.err)
	r = runCLI(t, getenv, "", "show", "--json", threadOld)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "via the environment"), "show: %s", r.stdout)

	other := t.TempDir() // a flag wins over the variable
	r = runCLI(t, getenv, "", "list", "--json", "--data", other)
	assert.Success(t, r.err)
	assert.Equal(t, "threads in --data", strings.TrimSpace(r.stdout), "[]")
}

// TestRefusedSettingNamesItsVariable: a setting the environment gave
// (CHATRELAY_MAX_THREADS) that a command refuses is named with its
// variable, since the user never typed the flag the refusal names; a
// flag the command line gave is named alone.
func TestRefusedSettingNamesItsVariable(t *testing.T) {
	t.Parallel()
	data := seed(t)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		variable string
	}{
		{"serve", map[string]string{"CHATRELAY_MAX_THREADS": "0"}, []string{"serve", "--addr", "127.0.0.1:0"}, "CHATRELAY_MAX_THREADS"},
		{"serve, a second flag", map[string]string{"CHATRELAY_MAX_ATTACHMENT_BYTES": "0"}, []string{"serve", "--addr", "127.0.0.1:0"}, "CHATRELAY_MAX_ATTACHMENT_BYTES"},
		{"serve, a rate window", map[string]string{"CHATRELAY_RATE_WINDOW": "-1s"}, []string{"serve", "--addr", "127.0.0.1:0"}, "CHATRELAY_RATE_WINDOW"},
		{"serve, a stream limit", map[string]string{"CHATRELAY_MAX_STREAMS_PER_IP": "0"}, []string{"serve", "--addr", "127.0.0.1:0"}, "CHATRELAY_MAX_STREAMS_PER_IP"},
		{"ask", map[string]string{"CHATRELAY_TIMEOUT": "1500ms"}, []string{"ask", threadOld, "--approval", "deploy?"}, "CHATRELAY_TIMEOUT"},
		{"the command line wins", map[string]string{"CHATRELAY_MAX_THREADS": "0"}, []string{"serve", "--addr", "127.0.0.1:0", "--max-threads=0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, env(tc.env), "", append(tc.args, "--data", data)...)
			assert.Equal(t, "exit code ("+errString(r.err)+")", exitCode(r.err), 2)
			if tc.variable == "" {
				assert.True(t, !strings.Contains(errString(r.err), "CHATRELAY_"), "error %q names a variable", errString(r.err))
				return
			}
			assert.True(t, strings.Contains(errString(r.err), "was set by "+tc.variable), "error %q names no %s", errString(r.err), tc.variable)
		})
	}
}

// TestFsyncFromTheEnvironment: CHATRELAY_FSYNC is one of the store's
// variables that the server and the host CLI share; a value that is not
// always or never is a usage error naming the variable, not a flag the
// command line never gave, and stores nothing.
func TestFsyncFromTheEnvironment(t *testing.T) {
	t.Parallel()
	data := seed(t)
	for _, cmd := range [][]string{
		{"reply", threadOld, "durably?"},
		{"serve", "--addr", "127.0.0.1:0"},
	} {
		t.Run(cmd[0], func(t *testing.T) {
			r := runCLI(t, env(map[string]string{"CHATRELAY_FSYNC": "sometimes"}), "", append(cmd, "--data", data)...)
			assert.Equal(t, "exit code ("+errString(r.err)+")", exitCode(r.err), 2)
			assert.True(t, strings.Contains(errString(r.err), `CHATRELAY_FSYNC="sometimes"`) && strings.Contains(errString(r.err), "always or never"),
				"error %q names no CHATRELAY_FSYNC", errString(r.err))
		})
	}
	r := runCLI(t, nil, "", "reply", threadOld, "durably?", "--data", data, "--fsync", "sometimes")
	assert.Equal(t, "exit code ("+errString(r.err)+")", exitCode(r.err), 2)
	assert.True(t, strings.Contains(errString(r.err), "-fsync") && strings.Contains(errString(r.err), "always or never"), "error %q", errString(r.err))
	r = runCLI(t, nil, "", "show", threadOld, "--json", "--data", data)
	assert.Success(t, r.err)
	assert.True(t, !strings.Contains(r.stdout, "durably?"), "a refused reply was stored: %s", r.stdout)
}

func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cmd  string
		want []string // flags with their defaults
	}{
		{"serve", []string{"-addr", "127.0.0.1:8080", "-data", "./data", "-prefix", "-max-threads", "500",
			"-rate-thread", "20", "-rate-ip", "40", "-rate-window", "10m0s", "-retention-messages", "200",
			"-retention-age", "720h0m0s", "-sweep-every", "1h0m0s", "-fsync", "always", "never", "benchmarks",
			"-trusted-proxy", "CHATRELAY_"}},
		{"list", []string{"-data", "./data", "-json", "CHATRELAY_DATA"}},
		{"show", []string{"-data", "./data", "-json", "-since", "THREAD"}},
		{"reply", []string{"-data", "./data", "THREAD TEXT", `"-"`}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, nil, "", tt.cmd, "--help")
			assert.True(t, errors.Is(r.err, flag.ErrHelp), "--help: %v", r.err)
			assert.Equal(t, "exit code", exitCode(r.err), 0)
			for _, w := range tt.want { // on stdout, for a pager or grep; nothing on stderr
				assert.True(t, strings.Contains(r.stdout, w), "%s --help lacks %q:\n%s", tt.cmd, w, r.stdout)
			}
			assert.Equal(t, "stderr", r.stderr, "")
		})
	}

	// The environment's example names a flag the command has (subscribe
	// has no --data), and a command without flags has no Flags header.
	r := runCLI(t, nil, "", "subscribe", "--help")
	assert.True(t, strings.Contains(r.stdout, "e.g. --server from CHATRELAY_SERVER") && !strings.Contains(r.stdout, "--data"),
		"subscribe --help:\n%s", r.stdout)
	// A command line it cannot parse: the error and the usage on stderr, nothing on stdout.
	r = runCLI(t, nil, "", "serve", "--frob")
	assert.True(t, exitCode(r.err) == 2 && r.stdout == "" && strings.Contains(r.stderr, "flag provided but not defined: -frob") &&
		strings.Contains(r.stderr, "Usage: chatrelay serve"), "serve --frob: %v\nstdout %q\nstderr %q", r.err, r.stdout, r.stderr)
	r = runCLI(t, nil, "", "version", "--help")
	assert.True(t, strings.Contains(r.stdout, "Usage: chatrelay version") && !strings.Contains(r.stdout, "Flags"), "version --help:\n%s", r.stdout)

	r = runCLI(t, nil, "", "--help")
	assert.Success(t, r.err)
	for _, c := range []string{"serve", "list", "show", "reply"} {
		assert.True(t, strings.Contains(r.stdout, "chatrelay "+c), "usage lacks %s:\n%s", c, r.stdout)
	}
	r = runCLI(t, nil, "", "frobnicate")
	assert.Equal(t, "exit code of an unknown command", exitCode(r.err), 2)
	r = runCLI(t, nil, "")
	assert.Equal(t, "exit code of no command", exitCode(r.err), 2)
}

func TestShowCreatesNoThread(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	r := runCLI(t, nil, "", "show", "--data", data, threadOld)
	assert.Success(t, r.err)
	_, err := os.Stat(filepath.Join(data, "chat", threadOld+".json"))
	assert.True(t, os.IsNotExist(err), "show created the thread: %v", err)
}
