package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// TestPostsWithoutFunctions: on a Redis that refuses FUNCTION (before 7.0
// it has none; here an ACL user without it), the store opens and a post,
// a rated post and a rate window check run as scripts (EVALSHA).
func TestPostsWithoutFunctions(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	ctx := t.Context()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "nofn", "on", ">pw", "~*", "&*", "+@all", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, "redis://nofn:pw@"+srv.Addr()+"/0", Options{Log: testLogger(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rl := NewRateLimiter(s, chatrelay.Windows{PerThread: 100, PerIP: 100, Window: time.Minute})
	const th = "a1b2c3d4e5f60718"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "plain"}))
	must[func()](t)(rl.Take(ctx, th, "192.0.2.1"))
	if _, _, err := s.AppendLimited(ctx, rl, th, "192.0.2.1", store.NewMessage{Text: "rated"}); err != nil {
		t.Fatal(err)
	}
	p := must[store.Page](t)(s.Since(ctx, th, 0, 0))
	if len(p.Messages) != 2 || p.Messages[1].Text != "rated" {
		t.Fatalf("thread holds %+v", p.Messages)
	}
	calls := commandCalls(t, s)
	if calls["fcall"] != 0 || calls["evalsha"]+calls["eval"] < 3 {
		t.Fatalf("posts ran %v, want scripts and no FCALL", calls)
	}
}

// TestClusterLoadsTheLibrary: on a Redis Cluster the library is loaded on
// every primary at open, and after the primaries lost it (FUNCTION FLUSH,
// as a restart without persistence or a new primary would) posts to
// threads of every shard still run: the first call that misses it loads
// it on every primary again.
func TestClusterLoadsTheLibrary(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	ctx := t.Context()
	sh := openSharded(t, c.URL(), Options{Prefix: "t:"})
	admin := c.Client(t)
	forEachPrimary := func(f func(ctx context.Context, n *redis.Client) error) {
		t.Helper()
		if err := admin.ForEachMaster(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	_, prefix := library()
	name := strings.TrimSuffix(prefix, "_")
	hasLibrary := func(ctx context.Context, n *redis.Client) error {
		libs, err := n.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name}).Result()
		if err != nil || len(libs) != 1 {
			return fmt.Errorf("%s has libraries %v (%v), want %s", n.Options().Addr, libs, err, name)
		}
		return nil
	}
	forEachPrimary(hasLibrary)
	forEachPrimary(func(ctx context.Context, n *redis.Client) error { return n.FunctionFlush(ctx).Err() })
	for i := range ClusterShards * 2 {
		th := fmt.Sprintf("%016x", 0xfa110+i)
		if _, err := sh.Append(ctx, th, store.NewMessage{Text: fmt.Sprint("post ", i)}); err != nil {
			t.Fatalf("post %d after the flush: %v", i, err)
		}
	}
	forEachPrimary(hasLibrary) // loaded again on every primary, not only where a call missed it
}

// TestFunctionCallAllocatesNoName: a post's FCALL costs the store no
// allocation beyond go-redis's own FCall: the function's name is made
// once, not per post. (Not parallel: AllocsPerRun counts every
// goroutine's allocations.)
func TestFunctionCallAllocatesNoName(t *testing.T) {
	s := &Store{fcall: true}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: the pipeline is not run
	t.Cleanup(func() { c.Close() })
	p := c.Pipeline()
	ctx := context.Background()
	keys, args := []string{"k"}, []any{"a"} // made once, as a post's are
	_, prefix := library()
	name := prefix + "append"
	direct := testing.AllocsPerRun(200, func() { p.FCall(ctx, name, keys, args...); p.Discard() })
	viaStore := testing.AllocsPerRun(200, func() { s.call(ctx, p, appendScript, keys, args...); p.Discard() })
	if viaStore != direct {
		t.Fatalf("a call of the library's function allocates %v times, go-redis's FCall %v", viaStore, direct)
	}
}
