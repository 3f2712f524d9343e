package redisstore

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// The sharded tests run on the package's shared Redis Cluster (3
// primaries, each with a replica, started on first use and killed when
// the tests end) and on two shared single servers as shards, each test
// under a key prefix of its own.

var sharedCluster struct {
	mu      sync.Mutex
	cluster *redistest.Cluster
	servers []*redistest.Server
	dirs    []string
	err     error
	seq     int
}

// killShared ends the shared servers (TestMain, after the tests).
func killShared() {
	sharedCluster.mu.Lock()
	defer sharedCluster.mu.Unlock()
	if sharedCluster.cluster != nil {
		sharedCluster.cluster.Kill()
	}
	for _, s := range sharedCluster.servers {
		s.Kill()
	}
	for _, d := range sharedCluster.dirs {
		os.RemoveAll(d)
	}
}

// shardSpec returns the spec of a sharded store ("cluster" or "shards")
// on the shared servers, and a key prefix no other test uses.
func shardSpec(t testing.TB, kind string) (spec, prefix string) {
	t.Helper()
	sharedCluster.mu.Lock()
	defer sharedCluster.mu.Unlock()
	sharedCluster.seq++
	prefix = fmt.Sprintf("sh%d:", sharedCluster.seq)
	if sharedCluster.err == nil && sharedCluster.cluster == nil {
		dir, err := os.MkdirTemp("", "chatrelay-cluster-")
		sharedCluster.err = err
		if err == nil {
			sharedCluster.dirs = append(sharedCluster.dirs, dir)
			sharedCluster.cluster, sharedCluster.err = redistest.NewCluster(dir, redistest.ClusterOptions{Primaries: 3, Replicas: 1})
		}
		for range 2 {
			if sharedCluster.err != nil {
				break
			}
			dir, err := os.MkdirTemp("", "chatrelay-redis-")
			if sharedCluster.err = err; err != nil {
				break
			}
			sharedCluster.dirs = append(sharedCluster.dirs, dir)
			srv, err := redistest.Start(dir, redistest.ServerOptions{})
			if sharedCluster.err = err; err == nil {
				sharedCluster.servers = append(sharedCluster.servers, srv)
			}
		}
	}
	if sharedCluster.err != nil {
		t.Fatal(sharedCluster.err)
	}
	if kind == "cluster" {
		return sharedCluster.cluster.URL(), prefix
	}
	return sharedCluster.servers[0].URL() + "," + sharedCluster.servers[1].URL(), prefix
}

// openSharded opens a Sharded store of spec, closed when the test ends.
func openSharded(t testing.TB, spec string, opt Options) *Sharded {
	t.Helper()
	if opt.Log == nil {
		opt.Log = testLogger(t)
	}
	sh, err := OpenSharded(t.Context(), spec, opt)
	if err != nil {
		t.Fatalf("OpenSharded %s: %v", spec, err)
	}
	t.Cleanup(func() { sh.Close() })
	return sh
}

// eachSharded runs fn as a parallel subtest on the cluster and on shards.
func eachSharded(t *testing.T, fn func(t *testing.T, spec, prefix string)) {
	for _, kind := range []string{"cluster", "shards"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			spec, prefix := shardSpec(t, kind)
			fn(t, spec, prefix)
		})
	}
}

// TestShardedFollowAcrossNodes: appends on two nodes, to threads on every
// shard, reach both nodes' feeds once each, in epoch order per thread.
func TestShardedFollowAcrossNodes(t *testing.T) {
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		a, b := openSharded(t, spec, Options{Prefix: prefix}), openSharded(t, spec, Options{Prefix: prefix})
		recA, recB := follow(t, a), follow(t, b)
		ctx := t.Context()
		if strings.HasPrefix(spec, "redis+cluster:") {
			// The feed is sharded pub/sub: both nodes' subscriptions to
			// shard 0's channel are on the primary of its slot.
			c := sharedCluster.cluster
			ch := a.shards[0].feed
			n := c.Server(t, c.PrimaryOf(t, ch)).Client(t).PubSubShardNumSub(ctx, ch).Val()[ch]
			if n != 2 {
				t.Fatalf("PUBSUB SHARDNUMSUB %s: %d, want 2", ch, n)
			}
		}
		var threads []string
		shards := map[int]bool{}
		for i := range 12 {
			th := fmt.Sprintf("%016x", 0x5eed00+i)
			threads = append(threads, th)
			shards[a.ShardOf(th)] = true
		}
		if len(shards) < 2 {
			t.Fatalf("the threads are on %d shard(s)", len(shards))
		}
		const per = 10
		var wg sync.WaitGroup
		for w, node := range []*Sharded{a, b} {
			for _, th := range threads {
				wg.Go(func() {
					for i := range per {
						if _, err := node.Append(ctx, th, store.NewMessage{Text: fmt.Sprintf("w%d %d", w, i)}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		for _, th := range threads {
			p := must[store.Page](t)(b.Since(ctx, th, 0, 0))
			if len(p.Messages) != 2*per {
				t.Fatalf("thread %s holds %d messages", th, len(p.Messages))
			}
			for _, rec := range []*recorder{recA, recB} {
				assert.Eventually(t, 10*time.Second, "every message on every node", func() bool { return len(rec.messages(th)) >= 2*per })
				checkDelivered(t, rec, th, p.Messages)
				if rec.resets(th) != 0 {
					t.Fatalf("thread %s: Reset batches", th)
				}
			}
		}
		infos := must[[]store.ThreadInfo](t)(a.Threads(ctx))
		if len(infos) != len(threads) {
			t.Fatalf("Threads lists %d threads, want %d", len(infos), len(threads))
		}
		for i := 1; i < len(infos); i++ {
			if infos[i].Rev > infos[i-1].Rev {
				t.Fatalf("Threads not newest first: %+v", infos)
			}
		}
	})
}

// TestShardedThreadLimitAcrossNodes races thread creations on two nodes,
// over every shard: exactly MaxThreads threads are created, the rest get
// 507 thread_limit, existing threads keep working, and a swept thread
// frees its place (and only one).
func TestShardedThreadLimitAcrossNodes(t *testing.T) {
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		clk := testclock.New(time.UnixMilli(1792778400000))
		opt := Options{Prefix: prefix, MaxThreads: 7, Now: clk.Now}
		a, b := openSharded(t, spec, opt), openSharded(t, spec, opt)
		threadLimitAcrossNodes(t, a, b, clk)
	})
}

// TestShardedLimitersAcrossNodes: two nodes share the rate windows and the
// stream limits.
func TestShardedLimitersAcrossNodes(t *testing.T) {
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		clk := testclock.New(time.UnixMilli(1792778400000))
		sa, sb := openSharded(t, spec, Options{Prefix: prefix, Now: clk.Now}), openSharded(t, spec, Options{Prefix: prefix, Now: clk.Now})
		w := chatrelay.Windows{PerThread: 3, PerIP: 5, Window: 10 * time.Minute}
		a, b := sa.NewRateLimiter(w), sb.NewRateLimiter(w)
		ctx := t.Context()
		const th, ip = "a1b2c3d4e5f60718", "192.0.2.7"
		must[func(bool)](t)(a.Take(ctx, th, ip))
		must[func(bool)](t)(b.Take(ctx, th, ip))
		must[func(bool)](t)(a.Take(ctx, th, ip))
		_, err := b.Take(ctx, th, ip)
		wantCode(t, err, chatrelay.RateLimited)
		must[func(bool)](t)(a.Take(ctx, "0000000000000001", ip))
		must[func(bool)](t)(b.Take(ctx, "0000000000000002", ip))
		_, err = a.Take(ctx, "0000000000000003", ip)
		wantCode(t, err, chatrelay.RateLimited)

		l := chatrelay.StreamLimits{PerThread: 2, PerIP: 3}
		la, lb := sa.NewStreamLimiter(l, 0), sb.NewStreamLimiter(l, 0)
		t.Cleanup(func() { la.Close(); lb.Close() })
		rel := must[func()](t)(la.Acquire(ctx, th, "192.0.2.1", chatrelay.OwnerStream))
		must[func()](t)(lb.Acquire(ctx, th, "192.0.2.2", chatrelay.OwnerStream))
		_, err = lb.Acquire(ctx, th, "192.0.2.3", chatrelay.OwnerStream)
		wantCode(t, err, chatrelay.TooManyStreams)
		rel()
		must[func()](t)(lb.Acquire(ctx, th, "192.0.2.3", chatrelay.OwnerStream))
	})
}

// TestShardedSingletons: the ticket key, the VAPID key and the agent keys
// are one for every node; a share link resolves from any node whatever
// shard its thread is on; a revoke reaches the other node's feed within a
// second, and every node then sees the grant revoked.
func TestShardedSingletons(t *testing.T) {
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		a, b := openSharded(t, spec, Options{Prefix: prefix}), openSharded(t, spec, Options{Prefix: prefix})
		recB := follow(t, b)
		ctx := t.Context()
		ka, kb := must[[]byte](t)(a.TicketKey(ctx)), must[[]byte](t)(b.TicketKey(ctx))
		if len(ka) < 32 || string(ka) != string(kb) {
			t.Fatal("two nodes disagree on the ticket key")
		}
		va, vb := must[[]byte](t)(a.VAPIDKey(ctx)), must[[]byte](t)(b.VAPIDKey(ctx))
		if len(va) == 0 || string(va) != string(vb) {
			t.Fatal("two nodes disagree on the VAPID key")
		}
		ok1, _, err1 := a.ClaimPush(ctx, "x:1", "a", time.Minute, nil)
		ok2, _, err2 := b.ClaimPush(ctx, "x:1", "b", time.Minute, nil)
		if err1 != nil || err2 != nil || !ok1 || ok2 {
			t.Fatalf("claims %v %v (%v %v)", ok1, ok2, err1, err2)
		}
		// Share links on threads of several shards resolve on either node.
		for i := range 6 {
			th := fmt.Sprintf("%016x", 0x70ca1+i)
			must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "hi"}))
			g, tok := chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter, Kind: chatrelay.Human, ExpiresIn: time.Hour}.Grant(time.Now())
			if err := a.Invite(ctx, th, g); err != nil {
				t.Fatalf("invite: %v", err)
			}
			got, gg, err := b.Resolve(ctx, chatrelay.DigestOf(tok))
			if err != nil || got != th || gg.ID != g.ID {
				t.Fatalf("resolve on the other node: %q %+v %v", got, gg, err)
			}
			participants := func(from int) bool {
				return slices.ContainsFunc(recB.snapshot()[from:], func(x store.Batch) bool { return x.Thread == th && x.Participants })
			}
			assert.Eventually(t, 5*time.Second, "the invite on the other node's feed", func() bool { return participants(0) })
			seen := len(recB.snapshot())
			must[chatrelay.Grant](t)(a.Revoke(ctx, th, g.ID))
			// The other node's feed says so within a second: its streams
			// of that link end (transport), whatever shard the thread is on.
			assert.Eventually(t, time.Second, "the revoke on the other node's feed", func() bool { return participants(seen) })
			if _, gg, err := a.Resolve(ctx, chatrelay.DigestOf(tok)); err != nil || gg.RevokedAt == 0 {
				t.Fatalf("the revoked link on the other node: %+v %v", gg, err)
			}
		}
		_, _, err := a.Resolve(ctx, chatrelay.DigestOf("unknown"))
		wantCode(t, err, chatrelay.Unauthorized)
	})
}

// TestShardedOpenChecks: a list of instances is recorded, shard by shard;
// the same instances in another order or number, one of them alone, or a
// store written by one Redis opened as a shard are refused with a
// configuration error, and nothing is written.
func TestShardedOpenChecks(t *testing.T) {
	t.Parallel()
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	s2 := redistest.StartServer(t, redistest.ServerOptions{})
	s3 := redistest.StartServer(t, redistest.ServerOptions{})
	ctx := t.Context()
	sh := openSharded(t, s1.URL()+","+s2.URL(), Options{})
	must[store.Entry](t)(sh.Append(ctx, "0123456789abcdef", store.NewMessage{Text: "hi"}))
	sh.Close()
	refused := func(spec, words string) {
		t.Helper()
		b, err := store.Open(ctx, spec, store.Options{Log: testLogger(t)})
		if err == nil {
			b.Close()
			t.Fatalf("%s opened", spec)
		}
		var ce *store.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), words) {
			t.Fatalf("%s: %v, want a configuration error saying %q", spec, err, words)
		}
	}
	refused(s2.URL()+","+s1.URL(), "is shard 1/2")
	refused(s1.URL()+","+s2.URL()+","+s3.URL(), "is shard 0/2")
	refused(s1.URL(), "list every shard")
	// An instance that is no shard of the store (a wrong URL, an empty
	// database) in the place of one: its threads would be apart from the
	// others' nodes'. Refused without writing anything.
	refused(s1.URL()+","+s3.URL(), "no shard record")
	refused(s3.URL()+","+s1.URL(), "is shard 0/2")
	if keys := s3.Client(t).Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Fatalf("refused opens wrote %q", keys)
	}
	refused(s1.URL()+","+s1.URL(), "repeated")
	// s3 holds the data of a single Redis store.
	one := openStore(t, s3, Options{})
	must[store.Entry](t)(one.Append(ctx, "00000000000000aa", store.NewMessage{Text: "hi"}))
	refused(s3.URL()+","+s2.URL(), "not sharded")
	keys := s3.Client(t).Keys(ctx, "*").Val()
	if slices.Contains(keys, chatrelay.DefaultKeyPrefix+"shard") {
		t.Fatal("a refused open wrote the shard record")
	}
	b, err := store.Open(ctx, s1.URL()+","+s2.URL(), store.Options{Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := must[store.Page](t)(b.Since(ctx, "0123456789abcdef", 0, 0))
	if len(p.Messages) != 1 {
		t.Fatalf("reopened shards: %+v", p)
	}
}

// TestSingleURLKeepsTheLayout: a store written by Open on one Redis (the
// layout of every release before shards) opens unchanged through
// store.Open of its redis:// URL: the same keys, byte for byte, nothing
// added, every message read back.
func TestSingleURLKeepsTheLayout(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	ctx := t.Context()
	old := openStore(t, srv, Options{})
	for i := range 3 {
		must[store.Entry](t)(old.Append(ctx, fmt.Sprintf("%016x", i+1), store.NewMessage{Text: "hi"}))
	}
	old.Close()
	c := srv.Client(t)
	dump := func() map[string]string {
		out := map[string]string{}
		for _, k := range c.Keys(ctx, "*").Val() {
			out[k] = c.Dump(ctx, k).Val()
		}
		return out
	}
	before := dump()
	b, err := store.Open(ctx, srv.URL(), store.Options{Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Store.(*Store); !ok {
		t.Fatalf("one redis:// URL opened a %T", b.Store)
	}
	infos, err := b.Threads(ctx)
	if err != nil || len(infos) != 3 {
		t.Fatalf("threads %+v %v", infos, err)
	}
	b.Close()
	after := dump()
	if len(after) != len(before) {
		t.Fatalf("keys before %d, after %d", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("key %s changed", k)
		}
	}
}

// TestShardDown: with one of two instances gone, the other shard's threads
// go on; the dead shard's threads, the readers that need every shard and
// the readiness check answer StoreUnavailable; all is well once it is
// back (persistence on: nothing lost).
func TestShardDown(t *testing.T) {
	t.Parallel()
	s1 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s2 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	sh := openSharded(t, s1.URL()+","+s2.URL(), Options{Timeout: time.Second})
	ctx := t.Context()
	var on0, on1 string
	for i := 0; on0 == "" || on1 == ""; i++ {
		th := fmt.Sprintf("%016x", 0xd0e0+i)
		if sh.ShardOf(th) == 0 {
			on0 = th
		} else {
			on1 = th
		}
	}
	must[store.Entry](t)(sh.Append(ctx, on0, store.NewMessage{Text: "before"}))
	must[store.Entry](t)(sh.Append(ctx, on1, store.NewMessage{Text: "before"}))
	s2.Kill()
	must[store.Entry](t)(sh.Append(ctx, on0, store.NewMessage{Text: "during"}))
	_, err := sh.Append(ctx, on1, store.NewMessage{Text: "during"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	_, err = sh.Threads(ctx)
	wantCode(t, err, chatrelay.StoreUnavailable)
	_, err = sh.Pending(ctx)
	wantCode(t, err, chatrelay.StoreUnavailable)
	wantCode(t, sh.Check(ctx), chatrelay.StoreUnavailable)
	s2.Restart(t)
	assert.Eventually(t, 10*time.Second, "the shard back", func() bool { return sh.Check(ctx) == nil })
	must[store.Entry](t)(sh.Append(ctx, on1, store.NewMessage{Text: "after"}))
	if infos := must[[]store.ThreadInfo](t)(sh.Threads(ctx)); len(infos) != 2 || infos[0].Messages+infos[1].Messages != 4 {
		t.Fatalf("threads %+v", infos)
	}
}

// TestShardLostDataReopens: a shard restarted without its data (no
// persistence) loses its shard record with everything else. Once a node
// noticed the new data set, the threads written there since do not make
// the next node (or the host CLI) refuse the shard as "not sharded".
func TestShardLostDataReopens(t *testing.T) {
	t.Parallel()
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	s2 := redistest.StartServer(t, redistest.ServerOptions{})
	spec := s1.URL() + "," + s2.URL()
	sh := openSharded(t, spec, Options{})
	ctx := t.Context()
	var on1 string
	for i := 0; on1 == ""; i++ {
		if th := fmt.Sprintf("%016x", 0x1a57+i); sh.ShardOf(th) == 1 {
			on1 = th
		}
	}
	before := must[store.Entry](t)(sh.Append(ctx, on1, store.NewMessage{Text: "before"}))
	must[store.Page](t)(sh.Since(ctx, on1, 0, 0)) // this node saw the data
	// No persistence: the shard record is gone too.
	s2.Restart(t)
	assert.Eventually(t, 10*time.Second, "the shard back", func() bool { return sh.Check(ctx) == nil })
	if p := must[store.Page](t)(sh.Since(ctx, on1, before.Epoch, 0)); !p.Reset {
		t.Fatalf("a cursor into the lost data: %+v, want Reset", p)
	}
	must[store.Entry](t)(sh.Append(ctx, on1, store.NewMessage{Text: "after"}))
	b, err := store.Open(ctx, spec, store.Options{Log: testLogger(t)})
	if err != nil {
		t.Fatalf("a node opening the shards after the loss: %v", err)
	}
	defer b.Close()
	if p := must[store.Page](t)(b.Since(ctx, on1, 0, 0)); len(p.Messages) != 1 {
		t.Fatalf("after the loss: %+v", p)
	}
	if _, err := store.Open(ctx, s2.URL()+","+s1.URL(), store.Options{Log: testLogger(t)}); err == nil {
		t.Fatal("the shards in another order opened after the loss")
	}
	// The node-wide keys live on shard 0 only: noticing shard 1's loss
	// puts back its shard record, not a ticket key of its own (before, a
	// fresh random one, which no node reads).
	if keys := s2.Client(t).Keys(ctx, chatrelay.DefaultKeyPrefix+"ticket-key").Val(); len(keys) != 0 {
		t.Fatalf("shard 1, after its loss was noticed, holds %q", keys)
	}
}
