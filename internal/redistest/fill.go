package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Fill makes the Redis of rdb full: maxmemory half of what it uses, with
// noeviction, so that it refuses writes (OOM) until the test ends or sets
// maxmemory back to 0.
func Fill(t testing.TB, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	info := rdb.Info(ctx, "memory").Val()
	var mem int64
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			mem, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if mem == 0 {
		t.Fatalf("redistest: no used_memory in %q", info)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(mem/2, 10)).Err(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
}
