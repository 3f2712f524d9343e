package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestStoreShardedURLs: --store takes a Redis Cluster
// (redis+cluster://host:port,…) and a list of Redis instances
// (redis://a,redis://b): open, reply and list work on threads placed over
// the shards, and a cluster URL without a host is a clear error.
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
			var threads []string
			for _, text := range []string{"first", "second", "third", "fourth"} {
				r := runCLI(t, nil, "", append([]string{"open", "--text", text, "--public-url", "https://chat.example.com/"}, args...)...)
				assert.Success(t, r.err)
				var out struct {
					Thread string `json:"thread"`
				}
				assert.Success(t, json.Unmarshal([]byte(r.stdout), &out))
				threads = append(threads, out.Thread)
				r = runCLI(t, nil, "", append([]string{"reply", out.Thread, "more on " + text}, args...)...)
				assert.Success(t, r.err)
			}
			r := runCLI(t, nil, "", append([]string{"list", "--json"}, args...)...)
			assert.Success(t, r.err)
			var rows []map[string]any
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &rows))
			assert.Equal(t, "threads listed", len(rows), len(threads))
			for _, row := range rows {
				assert.Equal(t, "messages of "+row["thread"].(string), row["messages"], any(float64(2)))
			}
		})
	}
	t.Run("bad cluster URL", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, nil, "", "list", "--store", "redis+cluster://")
		assert.True(t, r.err != nil && strings.Contains(r.stderr+r.err.Error(), "want redis+cluster://host:port"), "error %v, stderr %q", r.err, r.stderr)
	})
}
