package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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
	must[func(bool)](t)(rl.Take(ctx, th, "192.0.2.1"))
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

// TestClusterEvalOnly: the test option evalOnly (a Redis without
// functions) holds on a Redis Cluster as on a single Redis: the library
// is loaded on no primary and posts to every shard run as scripts.
// Before the fix openCluster loaded it and the posts ran FCALL.
func TestClusterEvalOnly(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	ctx := t.Context()
	sh := openSharded(t, c.URL(), Options{Prefix: "t:", evalOnly: true})
	for i := range ClusterShards {
		th := fmt.Sprintf("%016x", 0xe7a10+i)
		if _, err := sh.Append(ctx, th, store.NewMessage{Text: fmt.Sprint("post ", i)}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	admin := c.Client(t)
	err := admin.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		libs, err := n.FunctionList(ctx, redis.FunctionListQuery{}).Result()
		if err != nil || len(libs) != 0 {
			return fmt.Errorf("%s has libraries %v (%v), want none", n.Options().Addr, libs, err)
		}
		info, err := n.Info(ctx, "commandstats").Result()
		if err != nil || strings.Contains(info, "cmdstat_fcall:") {
			return fmt.Errorf("%s ran FCALL (%v):\n%s", n.Options().Addr, err, info)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFunctionCallAllocatesNoName: a post's FCALL costs the store no
// allocation beyond go-redis's own FCall: the function's name is made
// once, not per post. (Not parallel: AllocsPerRun counts every
// goroutine's allocations.)
func TestFunctionCallAllocatesNoName(t *testing.T) {
	s := &Store{fcall: new(atomic.Bool)}
	s.fcall.Store(true)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: the pipeline is not run
	t.Cleanup(func() { c.Close() })
	p := c.Pipeline()
	ctx := context.Background()
	keys, args := []string{"k"}, []any{"a"} // made once, as a post's are
	_, prefix := library()
	name := prefix + "append"
	direct := testing.AllocsPerRun(200, func() { p.FCall(ctx, name, keys, args...); p.Discard() })
	viaStore := testing.AllocsPerRun(200, func() { s.call(ctx, p, appendScript, keys, args...); p.Discard() })
	if viaStore > direct {
		t.Fatalf("a call of the library's function allocates %v times, go-redis's FCall %v", viaStore, direct)
	}
}

// TestLibraryRefusedAfterOpen: a Redis that had the library at open, then
// lost it (FUNCTION FLUSH, as a failover or a restart would) and refuses
// to load it again (here the store's ACL user lost FUNCTION) still takes
// posts, concurrent ones too: the store runs the scripts with EVALSHA
// from then on, says so once at warn, and tries FCALL no more. Before
// the fix every post failed (FCALL, a refused load, FCALL again).
func TestLibraryRefusedAfterOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	ctx := t.Context()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "fn", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	s, err := Open(ctx, "redis://fn:pw@"+srv.Addr()+"/0", Options{Log: slog.New(slog.NewJSONHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	const th = "a1b2c3d4e5f60718"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "with functions"}))
	if calls := commandCalls(t, s); calls["fcall"] != 1 {
		t.Fatalf("the first post ran %v, want one FCALL", calls)
	}

	if err := admin.Do(ctx, "ACL", "SETUSER", "fn", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const posts = 8
	errs := make(chan error, posts)
	var wg sync.WaitGroup
	for i := range posts {
		wg.Go(func() {
			_, err := s.Append(ctx, th, store.NewMessage{Text: fmt.Sprint("after the loss ", i)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a post after the library was refused: %v", err)
		}
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "later"}))
	if calls := commandCalls(t, s); calls["fcall"] != 0 || calls["function|load"] != 0 || calls["evalsha"] != 1 {
		t.Fatalf("a later post ran %v, want one EVALSHA and no FCALL", calls)
	}
	if p := must[store.Page](t)(s.Since(ctx, th, 0, 0)); len(p.Messages) != posts+2 {
		t.Fatalf("thread holds %d messages, want %d", len(p.Messages), posts+2)
	}
	warned := 0
	for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Level == "WARN" && strings.Contains(rec.Msg, "EVALSHA") {
			warned++
		}
	}
	if warned != 1 {
		t.Fatalf("%d warnings of the switch to EVALSHA, want 1:\n%s", warned, logged.String())
	}
}

// TestLibraryNameIsTheHashOfItsCode: the library's name (and so its
// functions') is the hash of every byte of its code but the names, so
// that a node of another version, whatever it changed, calls its own.
func TestLibraryNameIsTheHashOfItsCode(t *testing.T) {
	code, prefix := library()
	name := strings.TrimSuffix(prefix, "_")
	body, ok := strings.CutPrefix(code, "#!lua name="+name+"\n")
	if !ok {
		t.Fatalf("the library does not start with its name %q: %.60q", name, code)
	}
	sum := sha1.Sum([]byte(strings.ReplaceAll(body, prefix, libraryPlaceholder)))
	if want := "chatrelay_" + hex.EncodeToString(sum[:6]); name != want {
		t.Errorf("the library is named %s, and the hash of its code names %s: a part of its code is not in its name", name, want)
	}
}
