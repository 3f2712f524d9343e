package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestListUnreadableThread: one thread the store cannot read (a file it
// cannot open or read, or a document cut short) hides none of the others: list prints the rest,
// names the bad one on stderr with its machine code, and exits 1, so that
// a script learns the list is not whole. Before, a document that could not
// be opened or read failed the whole list (store_unavailable), and one
// cut short was left out without a word.
func TestListUnreadableThread(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, doc string)
		code  string
	}{
		// Tests run as root, whom a chmod 000 does not stop: a folder in
		// place of the thread's log fails the read as an unreadable file
		// would (EISDIR where EACCES).
		{"a folder in place of its log", func(t *testing.T, doc string) {
			assert.Success(t, os.Mkdir(strings.TrimSuffix(doc, ".json")+".log", 0o700))
		}, "store_unavailable"},
		{"a document cut short", func(t *testing.T, doc string) {
			assert.Success(t, os.WriteFile(doc, []byte(`{"version":1,"thread":"`+threadOld+`","messages":[{"id":`), 0o600))
		}, "thread_unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := seed(t)
			tc.spoil(t, filepath.Join(data, "chat", threadOld+".json"))
			for _, asJSON := range []bool{false, true} {
				args := []string{"list", "--data", data}
				if asJSON {
					args = append(args, "--json")
				}
				r := runCLI(t, nil, "", args...)
				assert.Equal(t, "exit status", exitCode(r.err), 1)
				var errOut strings.Builder
				report(&errOut, r.err)
				stderr := r.stderr + errOut.String()
				assert.True(t, strings.Contains(stderr, threadOld) && strings.Contains(stderr, tc.code),
					"stderr names neither the thread nor its code:\n%s", stderr)
				// The command's own line once; beside it only the store's
				// records (warn and above: the file and the parse error,
				// which the command's line does not repeat).
				own := 0
				for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
					if strings.HasPrefix(l, "chatrelay: ") {
						own++
						continue
					}
					assert.True(t, strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN"), "stderr holds a line neither the command's nor a store record: %q", l)
				}
				assert.Equal(t, "the command's stderr lines", own, 1)
				if asJSON {
					var rows []map[string]any
					assert.Success(t, json.Unmarshal([]byte(r.stdout), &rows))
					assert.Equal(t, "rows", len(rows), 1)
					assert.Equal(t, "the readable thread", rows[0]["thread"], any(threadNew))
					continue
				}
				lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
				assert.Equal(t, "lines", len(lines), 2)
				assert.Equal(t, "the readable thread", strings.Fields(lines[1])[0], threadNew)
			}
		})
	}
}
