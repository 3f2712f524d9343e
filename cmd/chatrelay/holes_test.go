package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestServeRefusesBadPrefixesAndOrigins: --prefix takes only a clean
// absolute path of literal segments, --allowed-origin only exact origins;
// anything else is a usage error (exit 2) of one line, never a panic.
func TestServeRefusesBadPrefixesAndOrigins(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--prefix", "/spaces/{id...}"},
		{"--prefix", "/spaces/{id}"},
		{"--prefix", "/a b"},
		{"--prefix", "x"},
		{"--prefix", "POST /x"},
		{"--prefix", "/a/../b"},
		{"--prefix", "//a"},
		{"--prefix", "example.com/x"},
		{"--allowed-origin", "*"},
		{"--allowed-origin", "https://*.example.com"},
		{"--allowed-origin", "https://app.example.com/path"},
		{"--allowed-origin", "app.example.com"},
		{"--allowed-origin", "ftp://app.example.com"},
		{"--allowed-origin", "https://app.example.com:0"},
		{"--allowed-origin", "https://app.example.com:99999"},
		{"--allowed-origin", "http://[::1%25eth0]:8080"},
		{"--allowed-origin", "https://bücher.example"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			full := append([]string{"serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0"}, args...)
			// The flags alone first: a serve that took them would run
			// until the test timed out.
			if _, err := parseServe(full[1:], env(nil), io.Discard); err == nil {
				t.Fatalf("serve accepted %q", args)
			}
			r := runCLI(t, nil, "", full...)
			assert.True(t, r.err != nil, "serve accepted %q", args)
			assert.Equal(t, "exit code", exitCode(r.err), 2)
			assert.True(t, !strings.Contains(r.err.Error(), "\n"), "a message of several lines: %q", r.err)
			assert.Equal(t, "stderr", r.stderr, "")
		})
	}
	// The good ones are taken.
	s := opsServe(t, "--prefix", "/spaces/newos4.v2~x", "--allowed-origin", "https://App.Example.com:8443/",
		"--allowed-origin", "https://a.example.com:443", "--allowed-origin", "http://[::1]:8080")
	assert.True(t, strings.HasSuffix(s.base, "/spaces/newos4.v2~x"), "listening on %s", s.base)
	status, _ := getStatus(t, s.base+"/api/chat/poll", opsToken("p"))
	assert.Equal(t, "poll under the prefix", status, http.StatusOK)
}

func getStatus(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", token)
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	assert.Success(t, err)
	return resp.StatusCode, body
}

// TestTwoServersOnOneFolder: a second serve on a data folder that a server
// holds is refused with a message naming the holder's pid and pointing to
// Redis; the host CLI works on the folder meanwhile, and once the first
// server stops, another may start.
func TestTwoServersOnOneFolder(t *testing.T) {
	t.Parallel()
	a := opsServe(t)
	r := runCLI(t, nil, "", "serve", "--data", a.data, "--addr", "127.0.0.1:0", "--fsync", "never")
	assert.True(t, r.err != nil, "a second server started on a served folder")
	msg := r.err.Error()
	assert.True(t, strings.Contains(msg, "pid "+strconv.Itoa(os.Getpid())) && strings.Contains(msg, "--store redis://"),
		"the refusal does not name the holder and the way out: %q", msg)
	assert.Equal(t, "exit code", exitCode(r.err), 1)

	tok := opsToken("two servers")
	assert.Equal(t, "post", opsPost(t, t.Context(), http.DefaultClient, a.base, tok, "hello", nil), http.StatusCreated)
	r = runCLI(t, nil, "", "reply", "--data", a.data, chatrelay.ThreadOf(tok), "the CLI shares the folder")
	assert.Success(t, r.err)

	assert.Success(t, a.stop())
	b := opsServe(t, "--data", a.data)
	status, _ := getStatus(t, b.base+"/api/chat/poll", tok)
	assert.Equal(t, "poll on the next server", status, http.StatusOK)
}

// TestCLITakesTheFolderSettings: the host CLI applies the retention the
// folder's server recorded, so a reply with default flags no longer trims
// a thread the server keeps longer (it trimmed to 200 before); a flag
// that contradicts the folder's settings is refused (exit 2), one that
// agrees is taken.
func TestCLITakesTheFolderSettings(t *testing.T) {
	t.Parallel()
	s := opsServe(t, "--retention-messages", "300", "--rate-thread", "1000", "--rate-ip", "1000")
	tok := opsToken("settings")
	thread := chatrelay.ThreadOf(tok)
	for i := range 250 {
		assert.Equal(t, "post", opsPost(t, t.Context(), http.DefaultClient, s.base, tok, "m"+strconv.Itoa(i), nil), http.StatusCreated)
	}
	r := runCLI(t, nil, "", "reply", "--data", s.data, "--fsync", "never", thread, "an answer")
	assert.Success(t, r.err)
	r = runCLI(t, nil, "", "show", "--data", s.data, "--json", thread)
	assert.Success(t, r.err)
	var page struct{ Messages []json.RawMessage }
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &page))
	assert.Equal(t, "messages kept after a default reply", len(page.Messages), 251)

	r = runCLI(t, nil, "", "reply", "--data", s.data, "--retention-messages", "100", thread, "trim it!")
	assert.True(t, r.err != nil, "a contradicting --retention-messages was taken")
	assert.Equal(t, "exit code", exitCode(r.err), 2)
	assert.True(t, strings.Contains(r.err.Error(), "300") && strings.Contains(r.err.Error(), "--retention-messages 100"), "message %q", r.err)
	r = runCLI(t, env(map[string]string{"CHATRELAY_RETENTION_MESSAGES": "100"}), "", "reply", "--data", s.data, thread, "trim it!")
	assert.Equal(t, "exit code for the same from the environment", exitCode(r.err), 2)
	r = runCLI(t, nil, "", "reply", "--data", s.data, "--retention-messages", "300", "--fsync", "never", thread, "agreed")
	assert.Success(t, r.err)

	// The store, opened as the CLI opens it, reports the folder's settings.
	b, err := store.Open(context.Background(), "file:"+s.data, store.Options{})
	assert.Success(t, err)
	defer b.Close()
	assert.Equal(t, "settings", b.Settings, store.Settings{Retention: chatrelay.Retention{Messages: 300, Age: chatrelay.DefaultRetainAge}, MaxThreads: chatrelay.DefaultMaxThreads})
}
