package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// TestClusterFailoverLosesNothing: while two nodes post without pause to
// threads on every shard, the primary of a shard's slot hands over to its
// replica (CLUSTER FAILOVER). No post is refused: the old primary holds
// writes while its replica catches up, then answers MOVED, which the
// store follows (22 posts answered 503 store_unavailable in a run before
// it did); every post acknowledged is stored once and reaches the other
// node's feed once.
func TestClusterFailoverLosesNothing(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1})
	refused := trafficDuring(t, c, func(prefix string) {
		primary := c.PrimaryOf(t, prefix+"{s0}:threads")
		took := c.Failover(t, primary)
		assert.Eventually(t, 10*time.Second, "every node to see the replica serve shard 0", func() bool {
			return c.PrimaryOf(t, prefix+"{s0}:threads") == took
		})
	})
	noneRefused(t, refused, "the failover")
}

// TestClusterReshardLosesNothing: the same traffic while the slot of a
// shard moves, keys and all, to another primary (MIGRATE, as redis-cli
// --cluster reshard does it).
func TestClusterReshardLosesNothing(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	refused := trafficDuring(t, c, func(prefix string) { moveAway(t, c, prefix+"{s0}:threads") })
	noneRefused(t, refused, "the migration")
}

// moveAway migrates the slot of key to another primary (MoveSlot) and
// waits until every node says so.
func moveAway(t *testing.T, c *redistest.Cluster, key string) {
	from := c.PrimaryOf(t, key)
	var to string
	for _, n := range c.Nodes {
		if n.Addr() != from {
			to = n.Addr()
			break
		}
	}
	slot := int(c.Nodes[0].Client(t).ClusterKeySlot(t.Context(), key).Val())
	c.MoveSlot(t, slot, to)
	assert.Eventually(t, 10*time.Second, "every node to see the slot on its new primary", func() bool {
		return c.PrimaryOf(t, key) == to
	})
}

// TestClusterReshardRefusesNoPost: while two nodes post without pause to
// two threads of shard 0, its slot migrates to another primary, keys and
// all, in many MIGRATE batches (the slot holds other keys too): posts
// meet MOVED, ASK (a key gone already) and TRYAGAIN (a post's keys split
// between the two nodes). Redis ran none of them, so the store sends each
// again where Redis says: no post is refused (each of these answered 503
// store_unavailable before: 72 and 40 in two runs), none is lost or
// stored twice.
func TestClusterReshardRefusesNoPost(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	shard := 0
	refused := trafficOn(t, c, 2, &shard, func(prefix string) {
		cl := c.Client(t)
		p := cl.Pipeline()
		for i := range 5000 {
			p.Set(t.Context(), fmt.Sprintf("fill:{s0}:%d", i), "x", 0) // shard 0's slot ({s0})
		}
		if _, err := p.Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		moveAway(t, c, prefix+"{s0}:threads")
	})
	noneRefused(t, refused, "the migration")
}

// trafficDuring runs posts from two nodes over every shard, calls disrupt
// once some are acknowledged, goes on until more are acknowledged after
// it, and checks that nothing acknowledged is lost or doubled, in the
// store and in a feed.
func trafficDuring(t *testing.T, c *redistest.Cluster, disrupt func(prefix string)) (refused []error) {
	return trafficOn(t, c, ClusterShards*2, nil, disrupt)
}

// noneRefused fails t if any post was refused.
func noneRefused(t *testing.T, refused []error, during string) {
	t.Helper()
	if len(refused) > 0 {
		t.Fatalf("%d posts refused during %s, the first: %v", len(refused), during, refused[0])
	}
}

// trafficOn is trafficDuring on n threads, those of shard only (nil:
// every shard), and returns the errors of the posts that failed (and were
// sent again).
func trafficOn(t *testing.T, c *redistest.Cluster, n int, shard *int, disrupt func(prefix string)) (refused []error) {
	const prefix = "t:"
	spec := c.URL()
	opt := Options{Prefix: prefix, Retention: chatrelay.Retention{Messages: 1 << 20}} // retention drops nothing
	a, b := openSharded(t, spec, opt), openSharded(t, spec, opt)
	rec := follow(t, b)
	ctx := t.Context()
	var threads []string
	for i := 0; len(threads) < n; i++ {
		th := fmt.Sprintf("%016x", 0xfa110+i)
		if shard == nil || a.ShardOf(th) == *shard {
			threads = append(threads, th)
		}
	}
	var (
		mu      sync.Mutex
		acked   = map[string][]store.Entry{}
		count   atomic.Int64
		retried atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for w, node := range []*Sharded{a, b, a, b} {
		wg.Go(func() {
			// Paced (500 posts/s per writer at most), so that the test's
			// load stays bounded on a busy machine.
			pace := time.NewTicker(2 * time.Millisecond)
			defer pace.Stop()
			for n := 0; !stop.Load(); n++ {
				<-pace.C
				th := threads[(w*7+n)%len(threads)]
				m := store.NewMessage{Text: fmt.Sprintf("w%d-%d", w, n), ClientID: fmt.Sprintf("w%d:%d", w, n)}
				deadline := time.Now().Add(30 * time.Second)
				for {
					e, err := node.Append(ctx, th, m)
					if err == nil {
						mu.Lock()
						acked[th] = append(acked[th], e)
						mu.Unlock()
						count.Add(1)
						break
					}
					if ctx.Err() != nil {
						return // the test ended (failed)
					}
					if chatrelay.CodeOf(err) != chatrelay.StoreUnavailable || time.Now().After(deadline) {
						t.Errorf("post %s: %v", m.ClientID, err)
						return
					}
					retried.Add(1)
					mu.Lock()
					refused = append(refused, err)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond) // a client's retry, as Retry-After asks
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // if the test fails before it stops them
	assert.Eventually(t, 30*time.Second, "posts before the disruption", func() bool { return count.Load() >= 200 })
	disrupt(prefix)
	after := count.Load()
	assert.Eventually(t, 30*time.Second, "posts after the disruption", func() bool { return count.Load() >= after+200 })
	stop.Store(true)
	wg.Wait()
	t.Logf("%d posts acknowledged, %d attempts failed and were sent again", count.Load(), retried.Load())

	for _, th := range threads {
		p := must[store.Page](t)(a.Since(ctx, th, 0, 0))
		stored := map[string]int{}
		for _, e := range p.Messages {
			stored[e.Text]++
			if stored[e.Text] > 1 {
				t.Fatalf("thread %s: %q stored twice", th, e.Text)
			}
		}
		for _, e := range acked[th] {
			if stored[e.Text] != 1 {
				t.Fatalf("thread %s: acknowledged %q (%s) is not stored", th, e.Text, e.ID)
			}
		}
		assert.Eventually(t, 15*time.Second, "the feed hands on every stored message", func() bool {
			return len(rec.messages(th)) >= len(p.Messages)
		})
		checkDelivered(t, rec, th, p.Messages)
		if rec.resets(th) != 0 {
			t.Fatalf("thread %s: Reset batches", th)
		}
	}
	return refused
}

// TestClusterPrimaryKilled: the primary of a shard's slot dies (SIGKILL);
// its replica takes over (cluster-node-timeout 1s), and within seconds the
// nodes post to that shard's threads again and their feeds hand on every
// post, on every shard, once. (Writes the dead primary acknowledged last
// may be lost with it: Redis replicates asynchronously; not checked here.)
func TestClusterPrimaryKilled(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1})
	const prefix = "k:"
	opt := Options{Prefix: prefix}
	a, b := openSharded(t, c.URL(), opt), openSharded(t, c.URL(), opt)
	rec := follow(t, b)
	ctx := t.Context()
	var threads []string
	for i := range ClusterShards * 2 {
		threads = append(threads, fmt.Sprintf("%016x", 0xdead0+i))
	}
	var on0 string
	for _, th := range threads {
		must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "before"}))
		if a.ShardOf(th) == 0 {
			on0 = th
		}
	}
	if on0 == "" {
		t.Fatal("no thread on shard 0")
	}
	// The writes so far are on the replica before the primary dies: the
	// test is the failover's, not Redis's asynchronous replication's
	// (a primary killed a few milliseconds after a write may take it
	// along, and then each node finds a new data set: TestRedisLostData…
	// cover that).
	primary := c.PrimaryOf(t, prefix+"{s0}:threads")
	c.WaitReplicated(t, primary)
	c.Server(t, primary).Kill()
	start := time.Now()
	assert.Eventually(t, 20*time.Second, "a post on shard 0 after the failover", func() bool {
		_, err := a.Append(ctx, on0, store.NewMessage{Text: "back", ClientID: "back"})
		return err == nil
	})
	t.Logf("shard 0 took posts again %s after its primary died", time.Since(start).Round(time.Millisecond))
	for i, th := range threads {
		text := fmt.Sprintf("after-%d", i)
		var e store.Entry
		var err error
		assert.Eventually(t, 10*time.Second, "a post after the failover", func() bool {
			e, err = a.Append(ctx, th, store.NewMessage{Text: text, ClientID: text})
			if err != nil {
				t.Logf("thread %s (shard %d): %v", th, a.ShardOf(th), err)
			}
			return err == nil
		})
		assert.Eventually(t, 10*time.Second, "the post on the other node's feed", func() bool {
			n := 0
			for _, m := range rec.messages(th) {
				if m.ID == e.ID {
					n++
				}
			}
			return n > 0
		})
	}
	for _, th := range threads {
		seen := map[string]int{}
		for _, m := range rec.messages(th) {
			if seen[m.ID]++; seen[m.ID] > 1 {
				t.Fatalf("thread %s: %s delivered twice", th, m.ID)
			}
		}
	}
}

// TestClusterCreateLockReleasedAcrossFailover: a post that took the
// creation lock just before shard 0's primary handed over to its replica
// (CLUSTER FAILOVER) releases it on the new primary. Its release met
// MOVED and was dropped: the lock stayed until it lapsed (3 × the store
// timeout), and every node's new threads meanwhile answered 503
// store_unavailable (4 to 6 s in clusterprobe, after each failover of
// shard 0's primary).
func TestClusterCreateLockReleasedAcrossFailover(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1})
	const prefix = "l:"
	// A long timeout: the lock would lapse after 30 s, long after the
	// release has had its chance.
	a := openSharded(t, c.URL(), Options{Prefix: prefix, Timeout: 10 * time.Second})
	lock := prefix + "{s0}:create-lock"
	unlock, _, err := a.lockCreate(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	primary := c.PrimaryOf(t, lock)
	c.WaitReplicated(t, primary)
	c.Failover(t, primary)
	unlock()
	a.Close() // waits for the release, which runs in the background
	if n := c.Client(t).Exists(t.Context(), lock).Val(); n != 0 {
		t.Fatalf("the creation lock is still held after its post released it (PTTL %v): every new thread waits for it to lapse",
			c.Client(t).PTTL(t.Context(), lock).Val())
	}
}

// TestCheckNamesAnUnreachableRedis: /readyz's check names why Redis takes
// no write when it is not there at all, as it names a full or read-only
// one: a Redis that refuses connections is "Redis unreachable", a Redis
// Cluster one of whose slots has no primary "Redis cluster down". Both
// said "not writable", as for any other refusal (clusterprobe).
func TestCheckNamesAnUnreachableRedis(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	one := openStore(t, srv, Options{Prefix: "u:"})
	assert.Success(t, one.Check(t.Context()))
	srv.Kill()
	assert.Equal(t, "a killed Redis", store.Reason(one.Check(t.Context())), "Redis unreachable")

	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	sh := openSharded(t, c.URL(), Options{Prefix: "u:"})
	assert.Success(t, sh.Check(t.Context()))
	c.Server(t, c.PrimaryOf(t, "u:{s2}:readyz")).Kill() // not shard 0's
	// Shard 0 (the first the check names) is on another primary: it
	// answers CLUSTERDOWN once the cluster marks the dead one failed (the
	// shards on the dead one are unreachable until then).
	assert.Eventually(t, 20*time.Second, "the cluster to say a slot has no primary", func() bool {
		return store.Reason(sh.Check(t.Context())) == "Redis cluster down"
	})
}

// TestCheckNamesAStalledRedis: a Redis that accepts connections and
// answers nothing (CLIENT PAUSE: a slow command, a stalled disk) is named
// as such in /readyz's store_error, not the "not writable" that says
// nothing of why.
func TestCheckNamesAStalledRedis(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	// The check before the stall has a second (at 300 ms it failed on a
	// loaded machine); the stall lasts longer than the check's timeout.
	one := openStore(t, srv, Options{Prefix: "p:", Timeout: time.Second})
	assert.Success(t, one.Check(t.Context()))
	srv.Pause(t, 3*time.Second)
	assert.Equal(t, "a stalled Redis", store.Reason(one.Check(t.Context())), "Redis not answering")
}

// TestCheckFullShardHidesNoDeadOne: with shards, a full shard (OOM: the
// server stays ready, store.Full) is reported after a shard that fails
// otherwise, so that shard 0 full does not hide shard 1 gone (whose
// threads' reads fail too): the check names it, as a shard down
// (store.Partial: ready, shard 0 answering its reads).
func TestCheckFullShardHidesNoDeadOne(t *testing.T) {
	s0 := redistest.StartServer(t, redistest.ServerOptions{})
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	sh := openSharded(t, s0.URL()+","+s1.URL(), Options{Prefix: "f:"})
	assert.Success(t, sh.Check(t.Context()))
	redistest.Fill(t, s0.Client(t))
	err := sh.Check(t.Context())
	assert.True(t, store.Full(err) && store.Reason(err) == "Redis out of memory", "shard 0 full: %v", err)
	s1.Kill()
	err = sh.Check(t.Context())
	assert.True(t, !store.Full(err) && store.Reason(err) == "1 of 2 Redis shards: Redis unreachable", "shard 0 full, shard 1 killed: %v (%s)", err, store.Reason(err))
	// Shard 0 full answers its reads and holds the node-wide keys: the
	// node stays ready, as with shard 0 up (store.Partial).
	assert.True(t, store.Partial(err), "shard 0 full, shard 1 killed: %v is not store.Partial", err)
}

// TestCheckShardDownIsPartial: on instances, a shard that does not
// answer while shard 0 (the node-wide keys) and others take writes is
// store.Partial, with the shard's reason: every node finds it alike, and
// the other shards' threads go on. Shard 0 down, or every shard, is not.
func TestCheckShardDownIsPartial(t *testing.T) {
	s0 := redistest.StartServer(t, redistest.ServerOptions{})
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	s2 := redistest.StartServer(t, redistest.ServerOptions{})
	sh := openSharded(t, s0.URL()+","+s1.URL()+","+s2.URL(), Options{Prefix: "p:"})
	assert.Success(t, sh.Check(t.Context()))
	s2.Kill()
	err := sh.Check(t.Context())
	assert.True(t, store.Partial(err) && store.Reason(err) == "1 of 3 Redis shards: Redis unreachable", "shard 2 killed: %v (%s)", err, store.Reason(err))
	s0.Kill()
	err = sh.Check(t.Context())
	assert.True(t, err != nil && !store.Partial(err) && store.Reason(err) == "Redis unreachable", "shards 0 and 2 killed: %v (%s)", err, store.Reason(err))
}

// TestClusterNodeAsOneRedisRefused: a node of a Redis Cluster given as one
// Redis (redis://node, a new user's slip for redis+cluster://node), alone
// or as an instance of a list, is refused at open with a configuration
// error that names the cluster URL, and nothing is written to it. Before,
// the node that serves the webhooks' slot opened (an empty list of threads,
// posts refused MOVED), and the others failed store_unavailable, "the store
// cannot be reached: MOVED …", a retryable error for a wrong URL.
func TestClusterNodeAsOneRedisRefused(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	ctx := t.Context()
	refused := func(spec, words string) {
		t.Helper()
		b, err := store.Open(ctx, spec, store.Options{Log: testLogger(t)})
		if err == nil {
			b.Close()
			t.Fatalf("%s, a node of a Redis Cluster, opened as one Redis", spec)
		}
		var ce *store.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), words) {
			t.Fatalf("%s: %v, want a configuration error saying %q", spec, err, words)
		}
	}
	for _, n := range c.Nodes {
		refused(n.URL(), "redis+cluster://"+n.Addr())
	}
	refused(c.Nodes[0].URL()+","+c.Nodes[1].URL(), "redis+cluster://"+c.Nodes[0].Addr())
	for _, n := range c.Nodes {
		if keys := n.Client(t).Keys(ctx, "*").Val(); len(keys) != 0 {
			t.Fatalf("the refused opens wrote %q on %s", keys, n.Addr())
		}
	}
}

// TestPlainRedisAsClusterRefused: the converse slip, a Redis that is no
// cluster node given as redis+cluster://, is refused at open with a
// configuration error that names its redis:// URL. Before, it failed
// 'internal: internal error: redis open: ERR This instance has cluster
// support disabled', a failure of chatrelay's own by its words.
func TestPlainRedisAsClusterRefused(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t, redistest.ServerOptions{})
	spec := "redis+cluster://" + s.Addr()
	b, err := store.Open(t.Context(), spec, store.Options{Log: testLogger(t)})
	if err == nil {
		b.Close()
		t.Fatalf("%s, a Redis with no cluster support, opened as a cluster", spec)
	}
	var ce *store.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "redis://"+s.Addr()) {
		t.Fatalf("%s: %v, want a configuration error naming redis://%s", spec, err, s.Addr())
	}
	if keys := s.Client(t).Keys(t.Context(), "*").Val(); len(keys) != 0 {
		t.Fatalf("the refused open wrote %q", keys)
	}
}

// TestClusterStoppedPrimaryFeedDialsBounded: a primary stopped (SIGSTOP,
// a frozen VM) rather than killed takes connections it never answers. The
// feed comes back on its replica while it stays stopped, and every
// connection the store's client opens to it, the feed's new subscriptions
// and the slot map's reloads included, gives up within the store timeout,
// as every call does. Before, each of the feed's new subscriptions that
// the slot map still sent to the stopped primary dialled it twice with
// go-redis's own 5 s (its subscribe, then its first receive): the feed came
// back 10 s after it noticed the loss, 4 s after the store took posts again
// (probe16, from outside: /readyz 503 "feed not live" on every node, and
// the posts acknowledged reached the streams that much later).
func TestClusterStoppedPrimaryFeedDialsBounded(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1})
	const timeout = time.Second
	var (
		mu      sync.Mutex
		stopped string          // the stopped primary's address, once stopped
		long    []time.Duration // the dials to it allowed longer than the store timeout (-1: no deadline)
	)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		if addr == stopped {
			if d, ok := ctx.Deadline(); !ok {
				long = append(long, -1)

			} else if left := time.Until(d); left > timeout {
				long = append(long, left)
			}
		}
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	const prefix = "fd:"
	a := openSharded(t, c.URL(), Options{Prefix: prefix, Timeout: timeout})
	b := openSharded(t, c.URL(), Options{Prefix: prefix, Timeout: timeout, dial: dial})
	rec := follow(t, b)
	ctx := t.Context()
	var th string
	for i := 0; th == ""; i++ {
		if x := fmt.Sprintf("%016x", 0xfd00+i); a.ShardOf(x) == 0 {
			th = x
		}
	}
	must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "before"}))
	assert.Eventually(t, 10*time.Second, "the feed to hand on the first post", func() bool { return len(rec.messages(th)) == 1 })

	old := c.PrimaryOf(t, prefix+"{s0}:threads")
	mu.Lock()
	stopped = old
	mu.Unlock()
	c.Server(t, old).Stop(t) // continued when the test ends
	var after store.Entry
	assert.Eventually(t, 60*time.Second, "a post stored on the replica that took over", func() bool {
		e, err := a.Append(ctx, th, store.NewMessage{Text: "after", ClientID: "after"})
		after = e
		return err == nil
	})
	assert.Eventually(t, 60*time.Second, "the feed to hand on the post, the old primary still stopped", func() bool {
		for _, e := range rec.messages(th) {
			if e.Epoch == after.Epoch {
				return true
			}
		}
		return false
	})
	mu.Lock()
	defer mu.Unlock()
	if len(long) > 0 {
		t.Fatalf("%d dials to the stopped primary allowed longer than the store timeout (%v): %v (-1: no deadline)", len(long), timeout, long)
	}
}
