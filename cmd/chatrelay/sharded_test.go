package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestStoreShardedURLs: --store takes a Redis Cluster
// (redis+cluster://host:port,…) and a list of Redis instances
// (redis://a,redis://b): open, reply and list work on threads placed over
// the shards, two servers on them hand a post on one to a stream on the
// other, and a cluster URL without a host is a clear error.
func TestStoreShardedURLs(t *testing.T) {
	specs := map[string]func(t *testing.T) string{
		"cluster": func(t *testing.T) string {
			return redistest.StartCluster(t, redistest.ClusterOptions{}).URL()
		},
		"shards": func(t *testing.T) string {
			a := storetest.StartServer(t, storetest.ServerOptions{})
			b := storetest.StartServer(t, storetest.ServerOptions{})
			return a.URL() + "," + b.URL()
		},
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := []string{"--store", spec(t), "--redis-prefix", "cli:"}
			var threads, tokens []string
			for _, text := range []string{"first", "second", "third", "fourth"} {
				r := runCLI(t, nil, "", append([]string{"open", "--text", text, "--public-url", "https://chat.example.com/"}, args...)...)
				assert.Success(t, r.err)
				var out struct {
					Thread string `json:"thread"`
					Link   string `json:"link"`
				}
				assert.Success(t, json.Unmarshal([]byte(r.stdout), &out))
				threads = append(threads, out.Thread)
				_, tok, _ := strings.Cut(out.Link, "#t=")
				tokens = append(tokens, tok)
				r = runCLI(t, nil, "", append([]string{"reply", out.Thread, "more on " + text}, args...)...)
				assert.Success(t, r.err)
			}
			// Two servers on the same shards: a post on one reaches a stream
			// on the other, for threads on every shard.
			n1, n2 := startServe(t, args...), startServe(t, args...)
			for i, tok := range tokens {
				live := fmt.Sprintf("live %d", i)
				got := streamSays(t, n2, tok, live)
				preq, err := http.NewRequest("POST", n1+"api/chat/post", strings.NewReader(`{"text":"`+live+`"}`))
				assert.Success(t, err)
				preq.Header.Set("X-Chat-Token", tok)
				preq.Header.Set("Content-Type", "application/json")
				pres, err := http.DefaultClient.Do(preq)
				assert.Success(t, err)
				pres.Body.Close()
				assert.Equal(t, "post status", pres.StatusCode, 201)
				assert.True(t, <-got, "the post on one server did not reach the stream on the other (thread %s)", threads[i])
			}
			r := runCLI(t, nil, "", append([]string{"list", "--json"}, args...)...)
			assert.Success(t, r.err)
			var rows []map[string]any
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &rows))
			assert.Equal(t, "threads listed", len(rows), len(threads))
			for _, row := range rows {
				assert.Equal(t, "messages of "+row["thread"].(string), row["messages"], any(float64(3)))
			}
		})
	}
	t.Run("bad cluster URL", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, nil, "", "list", "--store", "redis+cluster://")
		assert.True(t, r.err != nil && strings.Contains(r.stderr+r.err.Error(), "want redis+cluster://host:port"), "error %v, stderr %q", r.err, r.stderr)
	})
}
