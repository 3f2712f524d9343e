package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// logLinesOf is the thread's log in data, line by line (none: no log, or
// an empty one).
func logLinesOf(t *testing.T, data, thread string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "chat", thread+".log"))
	if os.IsNotExist(err) {
		return nil
	}
	assert.Success(t, err)
	return strings.Fields(string(b)) // a line is one JSON object, without spaces outside its strings
}

// TestAppendLogFlag: --append-log (or CHATRELAY_APPEND_LOG) makes the host
// CLI's posts go to the thread's log; without it (the default) a reply
// rewrites the document, compacting the log, and makes none; every
// reply is read back.
func TestAppendLogFlag(t *testing.T) {
	t.Parallel()
	data := seed(t)
	reply := func(getenv func(string) string, text string, flags ...string) {
		t.Helper()
		args := append([]string{"reply", "--data", data, "--fsync", "never"}, flags...)
		r := runCLI(t, getenv, "", append(args, threadOld, text)...)
		assert.Success(t, r.err)
	}
	reply(nil, "default")
	assert.Equal(t, "log lines after a default reply", len(logLinesOf(t, data, threadOld)), 0)
	reply(nil, "first", "--append-log") // rewrites the document, now version 5
	reply(nil, "second", "--append-log")
	assert.Equal(t, "log lines", len(logLinesOf(t, data, threadOld)), 1)
	reply(env(map[string]string{"CHATRELAY_APPEND_LOG": "true"}), "third")
	assert.Equal(t, "log lines after a reply with CHATRELAY_APPEND_LOG", len(logLinesOf(t, data, threadOld)), 2)
	reply(nil, "fourth")
	assert.Equal(t, "log lines after a reply without the flag", len(logLinesOf(t, data, threadOld)), 0)

	doc, err := os.ReadFile(filepath.Join(data, "chat", threadOld+".json"))
	assert.Success(t, err)
	for _, text := range []string{"default", "first", "second", "third", "fourth"} {
		assert.True(t, strings.Contains(string(doc), `"text":"`+text+`"`), "the document lacks %q after the compaction", text)
	}
	r := runCLI(t, nil, "", "show", "--data", data, threadOld)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "second") && strings.Contains(r.stdout, "fourth"), "show: %s", r.stdout)
}

// TestAppendLogServe: serve --append-log puts a post that only adds a
// message in the thread's log; serve without it does not.
func TestAppendLogServe(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		var args []string
		if on {
			args = append(args, "--append-log")
		}
		s := opsServe(t, args...)
		tok := opsToken("append log")
		for _, text := range []string{"one", "two", "three"} {
			assert.Equal(t, "post "+text, opsPost(t, t.Context(), http.DefaultClient, s.base, tok, text, nil), http.StatusCreated)
		}
		want := 0
		if on {
			want = 2
		}
		assert.Equal(t, "log lines, --append-log "+map[bool]string{false: "off", true: "on"}[on], len(logLinesOf(t, s.data, chatrelay.ThreadOf(tok))), want)
	}
}

// TestAppendLogRefusedWithRedis: --append-log is an option of the file
// store: with a Redis store it is refused (exit 2, naming the flag)
// before anything connects, by serve and by the host CLI.
func TestAppendLogRefusedWithRedis(t *testing.T) {
	t.Parallel()
	const redis = "redis://127.0.0.1:1/0" // nothing listens: refused before it would connect
	for _, args := range [][]string{
		{"reply", "--store", redis, "--append-log", threadOld, "text"},
		{"serve", "--store", redis, "--append-log", "--addr", "127.0.0.1:0"},
	} {
		r := runCLI(t, nil, "", args...)
		assert.Equal(t, args[0]+": exit code", exitCode(r.err), 2)
		assert.True(t, r.err != nil && strings.Contains(r.err.Error(), "--append-log") && strings.Contains(r.err.Error(), "file store"), "%s: %v", args[0], r.err)
	}
	r := runCLI(t, env(map[string]string{"CHATRELAY_APPEND_LOG": "1"}), "", "reply", "--store", redis, threadOld, "text")
	assert.Equal(t, "from the environment: exit code", exitCode(r.err), 2)
}
