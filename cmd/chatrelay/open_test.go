package main

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// TestOpen: `chatrelay open` starts a thread on either store: it prints
// the claim link <public URL>/#t=<token> once, the thread is the token's
// with hermes's first message and the title (the v2 poll answers it; v1
// does not), list shows the title and the message's first words, and the
// token is in no file of the data folder, no Redis key or value, and no
// log of the server or the CLI.
func TestOpen(t *testing.T) {
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			b := ownBackend(t, backend)
			serverLog := &lockedBuffer{}
			log := slog.New(slog.NewTextHandler(serverLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
			hs := httptest.NewServer(transport.NewServer(transport.Config{Store: b.Store, Log: log}))
			t.Cleanup(hs.Close)

			const title, first = "Deploy build 412", "Build 412 passed every check. Shall I deploy it to production tonight?"
			r := runCLI(t, nil, "", append([]string{"open", "--title", title, "--text", first, "--public-url", "https://chat.example.com/relay/"}, b.CLIArgs()...)...)
			assert.Success(t, r.err)
			var out struct {
				Thread string `json:"thread"`
				Link   string `json:"link"`
			}
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &out))
			m := regexp.MustCompile(`^https://chat\.example\.com/relay/#t=([0-9a-f]{64})$`).FindStringSubmatch(out.Link)
			assert.True(t, m != nil, "the link %q is not https://chat.example.com/relay/#t=<64 hex>", out.Link)
			token := m[1]
			assert.Equal(t, "the thread is the token's", out.Thread, chatrelay.ThreadOf(token))
			assert.Equal(t, "the link is printed once", strings.Count(r.stdout+r.stderr, token), 1)

			v2 := getPoll(t, hs.URL+"/api/chat/poll?v=2", token)
			assert.Equal(t, "v2 title", v2["title"], any(title))
			msgs, _ := v2["messages"].([]any)
			assert.Equal(t, "messages", len(msgs), 1)
			msg, _ := msgs[0].(map[string]any)
			assert.Equal(t, "author", msg["author"], any("hermes"))
			assert.Equal(t, "text", msg["text"], any(first))
			v1 := getPoll(t, hs.URL+"/api/chat/poll", token)
			_, has := v1["title"]
			assert.True(t, !has, "a v1 poll answers a title: %v", v1)

			r = runCLI(t, nil, "", append([]string{"list"}, b.CLIArgs()...)...)
			assert.Success(t, r.err)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			assert.Equal(t, "rows", len(lines), 2)
			assert.True(t, strings.HasPrefix(lines[1], out.Thread) && strings.Contains(lines[1], title) &&
				strings.HasSuffix(lines[1], "Build 412 passed every check. Shall I…"), "list shows %q", lines[1])
			r = runCLI(t, nil, "", append([]string{"list", "--json"}, b.CLIArgs()...)...)
			assert.Success(t, r.err)
			var rows []map[string]any
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &rows))
			assert.Equal(t, "list --json's title", rows[0]["title"], any(title))

			// Refused: nothing to say, a title past its limit, a bad URL;
			// each leaves nothing behind.
			for _, bad := range []struct {
				args []string
				code chatrelay.Code
				exit int
			}{
				{[]string{"open"}, chatrelay.InvalidText, 1},
				{[]string{"open", "--title", strings.Repeat("é", chatrelay.LimitThreadTitle.Max+1)}, chatrelay.TextTooLong, 1},
				{[]string{"open", "--title", "two\nlines"}, chatrelay.InvalidText, 1},
				{[]string{"open", "--title", "x", "--public-url", "ftp://example.com"}, "", 2},
			} {
				r := runCLI(t, nil, "", append(bad.args, b.CLIArgs()...)...)
				assert.Equal(t, strings.Join(bad.args, " ")+": exit", exitCode(r.err), bad.exit)
				if bad.code != "" {
					assert.Equal(t, strings.Join(bad.args, " ")+": code", chatrelay.CodeOf(r.err), bad.code)
				}
			}
			assert.Equal(t, "threads after the refusals", b.Threads(t), []string{out.Thread})

			assert.True(t, !strings.Contains(serverLog.String(), token), "the server's log holds the token")
			for where, data := range stored(t, b) {
				assert.True(t, !strings.Contains(data, token), "%s holds the token", where)
			}
		})
	}
}

// TestOpenWithoutAPublicURL: without --public-url, nor one the folder's
// server recorded, the link is its path alone, and the CLI says so.
func TestOpenWithoutAPublicURL(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "", "open", "--text", "hello", "--data", t.TempDir(), "--fsync", "never")
	assert.Success(t, r.err)
	var out struct{ Link string }
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &out))
	assert.True(t, regexp.MustCompile(`^/#t=[0-9a-f]{64}$`).MatchString(out.Link), "link %q", out.Link)
	assert.True(t, strings.Contains(r.stderr, "--public-url"), "stderr %q", r.stderr)
}

func getPoll(t *testing.T, u, token string) map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", token)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	assert.Equal(t, "status "+string(body), res.StatusCode, 200)
	var p map[string]any
	assert.Success(t, json.Unmarshal(body, &p))
	return p
}

// stored is everything the store holds: each file of the data folder, or
// each Redis key (under the test's prefix) with its values.
func stored(t *testing.T, b *storetest.Backend) map[string]string {
	t.Helper()
	out := map[string]string{}
	if b.Redis == nil {
		err := filepath.WalkDir(b.Dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			out[path] = path + "\n" + string(data)
			return err
		})
		assert.Success(t, err)
		assert.True(t, len(out) > 0, "no file in the data folder")
		return out
	}
	ctx := context.Background()
	c := b.Client(t)
	for _, k := range b.Keys(t) {
		key := b.Prefix + k
		var vals []string
		switch typ := c.Type(ctx, key).Val(); typ {
		case "string":
			vals = []string{c.Get(ctx, key).Val()}
		case "hash":
			for f, v := range c.HGetAll(ctx, key).Val() {
				vals = append(vals, f, v)
			}
		case "zset":
			for _, z := range c.ZRangeWithScores(ctx, key, 0, -1).Val() {
				vals = append(vals, z.Member.(string))
			}
		case "set":
			vals = c.SMembers(ctx, key).Val()
		case "list":
			vals = c.LRange(ctx, key, 0, -1).Val()
		case "stream":
			for _, x := range c.XRange(ctx, key, "-", "+").Val() {
				vals = append(vals, x.ID)
				for f, v := range x.Values {
					vals = append(vals, f, v.(string))
				}
			}
		default:
			t.Fatalf("key %s of type %s", key, typ)
		}
		out[key] = key + "\n" + strings.Join(vals, "\n")
	}
	assert.True(t, len(out) > 0, "no key under the prefix")
	return out
}

// ownBackend is a fresh store of backend, on a Redis server of its own for
// Redis (so that the test may read every key of it).
func ownBackend(t *testing.T, backend string) *storetest.Backend {
	if backend == storetest.Redis {
		return storetest.OpenRedis(t, storetest.StartServer(t, storetest.ServerOptions{}), storetest.NewPrefix(), storetest.Options{})
	}
	return storetest.Open(t, backend, storetest.Options{})
}
