package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// openWaiting opens a store on primary with the URL's wait-replicas.
func openWaiting(t *testing.T, primary *redistest.Server, query string) *Store {
	t.Helper()
	s, err := Open(t.Context(), primary.URL()+query, Options{Log: testLogger(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// onReplica reports whether the replica's copy of thread's log holds the
// entry of epoch: what a replica that took over now would serve.
func onReplica(t *testing.T, rc *redis.Client, s *Store, thread string, epoch int64) bool {
	t.Helper()
	id := strconv.FormatInt(epoch, 10) + "-0"
	got, err := rc.XRange(context.Background(), s.logKey(thread), id, id).Result()
	if err != nil {
		t.Fatalf("XRANGE on the replica: %v", err)
	}
	return len(got) == 1
}

// TestWaitReplicasRefusesUnreplicated: with wait-replicas=1 and the only
// replica stopped (SIGSTOP, as a frozen VM), a post is not acknowledged:
// StoreUnavailable (503), after the wait's timeout. Without the setting,
// the same post is acknowledged though no replica holds it: the write a
// failover would lose.
func TestWaitReplicasRefusesUnreplicated(t *testing.T) {
	t.Parallel()
	primary := redistest.StartServer(t, redistest.ServerOptions{})
	replica := primary.StartReplica(t)
	// A second for the wait: the first post, with the replica running,
	// is acknowledged within it on a loaded machine (at 200 ms, one was
	// refused, the replica's acknowledgement late).
	waiting := openWaiting(t, primary, "?wait-replicas=1&wait-timeout=1s")
	plain := openWaiting(t, primary, "")
	if waiting.opt.WaitReplicas != 1 || waiting.opt.WaitTimeout != time.Second || plain.opt.WaitReplicas != 0 {
		t.Fatalf("options: %+v / %+v", waiting.opt, plain.opt)
	}
	ctx := t.Context()
	const th = "a1b2c3d4e5f60001"
	first := must[store.Entry](t)(waiting.Append(ctx, th, store.NewMessage{Text: "while the replica runs"}))

	replica.Stop(t)
	_, err := waiting.Append(ctx, th, store.NewMessage{Text: "lost to a failover", ClientID: "c-1"})
	if he := wantCode(t, err, chatrelay.StoreUnavailable); he.Retry <= 0 {
		t.Fatalf("503 without Retry: %+v", he)
	}
	_, err = waiting.Change(ctx, th, store.Change{Op: store.React, MessageID: first.ID, Emoji: "👍", By: chatrelay.Hermes})
	wantCode(t, err, chatrelay.StoreUnavailable)
	err = waiting.Audit(ctx, th, chatrelay.AuditEvent{At: 1, Event: chatrelay.AuditIssued, Participant: "p1"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	// A write whose answer is nil (a script with no return) is refused
	// too, alone and in a pipeline, not answered redis.Nil.
	var nr *notReplicatedError
	nilScript := redis.NewScript("redis.call('SET', KEYS[1], '1')")
	if err := nilScript.Run(ctx, waiting.rdb, []string{"w:nil"}).Err(); !errors.As(err, &nr) {
		t.Fatalf("a write answered nil, alone: %v", err)
	}
	cmds, err := waiting.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		nilScript.Run(ctx, p, []string{"w:nil"})
		return nil
	})
	if !errors.As(err, &nr) || !errors.As(cmds[0].Err(), &nr) {
		t.Fatalf("a write answered nil, in a pipeline: %v / %v", err, cmds[0].Err())
	}
	// Reads and the readiness probe do not wait.
	must[store.Page](t)(waiting.Since(ctx, th, 0, 10))
	assert.Success(t, waiting.Check(ctx))

	// Without the setting the same post is acknowledged.
	must[store.Entry](t)(plain.Append(ctx, th, store.NewMessage{Text: "acknowledged, on the primary only"}))

	// Once the replica is back, the retry of the refused post (its
	// client_id) is a replay of what the primary stored, and acknowledged
	// now that the replica holds it.
	replica.Cont()
	var again store.Entry
	assert.Eventually(t, 10*time.Second, "the retry acknowledged once the replica is back", func() bool {
		e, err := waiting.Append(ctx, th, store.NewMessage{Text: "lost to a failover", ClientID: "c-1"})
		again = e
		return err == nil // else StoreUnavailable: the replica still catching up, retried as a client would
	})
	if !onReplica(t, replica.Client(t), waiting, th, again.Epoch) {
		t.Fatalf("acknowledged %s, not on the replica", again.ID)
	}
}

// TestWaitReplicasAcknowledgedOnReplica: with wait-replicas=1 and a
// healthy replica, every acknowledged write is on the replica when it is
// acknowledged: posts alone and in the batcher's pipelines (many at once),
// a change, an audit event.
func TestWaitReplicasAcknowledgedOnReplica(t *testing.T) {
	t.Parallel()
	primary := redistest.StartServer(t, redistest.ServerOptions{})
	replica := primary.StartReplica(t)
	rc := replica.Client(t)
	s := openWaiting(t, primary, "?wait-replicas=1")
	ctx := t.Context()
	const th = "a1b2c3d4e5f60002"
	e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "one"}))
	if !onReplica(t, rc, s, th, e.Epoch) {
		t.Fatalf("acknowledged %s, not on the replica", e.ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				th := fmt.Sprintf("a1b2c3d4e5f6%04x", w)
				e, err := s.Append(ctx, th, store.NewMessage{Text: "many"})
				if err == nil && !onReplica(t, rc, s, th, e.Epoch) {
					err = fmt.Errorf("post %d of %d: acknowledged %s, not on the replica", i, w, e.ID)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r := must[store.Entry](t)(s.Change(ctx, th, store.Change{Op: store.React, MessageID: e.ID, Emoji: "👍", By: chatrelay.Hermes}))
	if v, err := rc.HGet(ctx, s.v2Key(th), strconv.FormatInt(e.Epoch, 10)).Result(); err != nil || v == "" {
		t.Fatalf("reaction (rev %d) not on the replica: %q %v", r.Rev, v, err)
	}
	assert.Success(t, s.Audit(ctx, th, chatrelay.AuditEvent{At: 1, Event: chatrelay.AuditIssued, Participant: "p1"}))
	if n, err := rc.LLen(ctx, s.auditKey(th)).Result(); err != nil || n != 1 {
		t.Fatalf("audit event not on the replica: %d %v", n, err)
	}
}

func TestWaitParams(t *testing.T) {
	for _, tc := range []struct {
		spec, rest string
		n          int
		d          time.Duration
		bad        bool
	}{
		{spec: "redis://h:1/0", rest: "redis://h:1/0"},
		{spec: "redis://h:1/0?wait-replicas=2", rest: "redis://h:1/0", n: 2, d: time.Second},
		{spec: "redis://h:1/0?dial_timeout=3s&wait-replicas=1&wait-timeout=250ms", rest: "redis://h:1/0?dial_timeout=3s", n: 1, d: 250 * time.Millisecond},
		{spec: "redis+cluster://a:1,b:2?wait-replicas=1", rest: "redis+cluster://a:1,b:2", n: 1, d: time.Second},
		{spec: "redis://h:1/0?wait-replicas=x", bad: true},
		{spec: "redis://h:1/0?wait-replicas=1&wait-timeout=2s", bad: true}, // not under the store's 2s
		{spec: "redis://h:1/0?wait-replicas=1&wait-timeout=0", bad: true},
	} {
		var opt Options
		rest, err := takeWaitParams(tc.spec, &opt)
		if (err != nil) != tc.bad {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if !tc.bad && (rest != tc.rest || opt.WaitReplicas != tc.n || opt.WaitTimeout != tc.d) {
			t.Errorf("%s: %q %d %v, want %q %d %v", tc.spec, rest, opt.WaitReplicas, opt.WaitTimeout, tc.rest, tc.n, tc.d)
		}
	}
}

// TestClusterWaitReplicasPerNode: on a 3-primary cluster with one
// replica each, wait-replicas=1 waits on each node for its own replica.
// Posts to threads of every primary at once (the batcher's pipelines span
// the nodes, go-redis splits them by node) are each on their primary's
// replica when acknowledged; with one primary's replica stopped, that
// primary's posts are refused StoreUnavailable and the others' are still
// acknowledged.
func TestClusterWaitReplicasPerNode(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1})
	sh := openSharded(t, c.URL()+"?wait-replicas=1&wait-timeout=300ms", Options{Prefix: "w:"})
	ctx := t.Context()

	// A thread on each primary.
	type place struct {
		thread, primary string
		replica         *redistest.Server
		ro              *redis.Conn // a READONLY connection to the replica
	}
	var places []*place
	seen := map[string]bool{}
	for i := 0; len(places) < 3 && i < 1000; i++ {
		th := fmt.Sprintf("%016x", 0xc1a5+i)
		p := c.PrimaryOf(t, sh.of(th).logKey(th))
		if seen[p] {
			continue
		}
		seen[p] = true
		r := c.ReplicaOf(t, p)
		ro := r.Client(t).Conn()
		t.Cleanup(func() { ro.Close() })
		if err := ro.ReadOnly(ctx).Err(); err != nil {
			t.Fatalf("READONLY: %v", err)
		}
		places = append(places, &place{thread: th, primary: p, replica: r, ro: ro})
	}
	if len(places) < 3 {
		t.Fatalf("threads on %d primaries, want 3", len(places))
	}
	held := func(p *place, e store.Entry) bool {
		id := strconv.FormatInt(e.Epoch, 10) + "-0"
		got, err := p.ro.XRange(ctx, sh.of(p.thread).logKey(p.thread), id, id).Result()
		if err != nil {
			t.Fatalf("XRANGE on the replica of %s: %v", p.primary, err)
		}
		return len(got) == 1
	}
	// posts posts n times to every place at once; it returns each
	// place's errors.
	posts := func(n int) [][]error {
		errs := make([][]error, len(places))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for k, p := range places {
			for range 4 {
				wg.Go(func() {
					for range n {
						e, err := sh.Append(ctx, p.thread, store.NewMessage{Text: "per node"})
						if err == nil && !held(p, e) {
							err = fmt.Errorf("acknowledged %s, not on the replica of %s", e.ID, p.primary)
						}
						mu.Lock()
						errs[k] = append(errs[k], err)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		return errs
	}
	for k, errs := range posts(20) {
		for _, err := range errs {
			if err != nil {
				t.Errorf("healthy, primary %s: %v", places[k].primary, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	places[0].replica.Stop(t)
	for k, errs := range posts(3) {
		for _, err := range errs {
			if k == 0 {
				wantCode(t, err, chatrelay.StoreUnavailable)
			} else if err != nil {
				t.Errorf("replica of another primary stopped, primary %s: %v", places[k].primary, err)
			}
		}
	}
}

// TestClusterStoppedPrimaryLosesNothingAcknowledged: the failover that
// lost acknowledged posts (docs/operations.md, "Failover and
// resharding"): under load, the primary of shard 0 is stopped (SIGSTOP)
// until its replica has taken over, then continued: it runs the commands
// that waited on its connections before it learns that it is a replica
// now. With wait-replicas=1, none of them is acknowledged (its replica is
// gone, so WAIT answers 0), and every post acknowledged is stored.
func TestClusterStoppedPrimaryLosesNothingAcknowledged(t *testing.T) {
	acked, lost := stoppedPrimaryTraffic(t, "?wait-replicas=1&wait-timeout=300ms")
	if lost != 0 {
		t.Fatalf("%d of %d acknowledged posts lost", lost, acked)
	}
}

// stoppedPrimaryTraffic posts from two nodes of the cluster store of
// query while shard 0's primary is stopped past the node timeout and its
// replica takes over, retrying each post (same client_id) on
// StoreUnavailable as a client would; it returns how many posts were
// acknowledged and how many of those the store lacks afterwards.
func stoppedPrimaryTraffic(t *testing.T, query string) (acked, lost int) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1})
	const prefix = "f:"
	opt := Options{Prefix: prefix, Retention: chatrelay.Retention{Messages: 1 << 20}}
	a, b := openSharded(t, c.URL()+query, opt), openSharded(t, c.URL()+query, opt)
	ctx := t.Context()
	var threads []string
	for i := 0; len(threads) < 4 && i < 10000; i++ {
		if th := fmt.Sprintf("%016x", 0xf0f0+i); a.ShardOf(th) == 0 {
			threads = append(threads, th)
		}
	}
	var (
		mu    sync.Mutex
		done  = map[string]store.Entry{} // client_id -> the acknowledged entry
		stop  atomic.Bool
		count atomic.Int64
		wg    sync.WaitGroup
	)
	for w, node := range []*Sharded{a, b, a, b} {
		wg.Go(func() {
			pace := time.NewTicker(2 * time.Millisecond) // at most 500 posts/s per writer
			defer pace.Stop()
			for n := 0; !stop.Load(); n++ {
				<-pace.C
				th := threads[(w+n)%len(threads)]
				m := store.NewMessage{Text: fmt.Sprintf("w%d-%d", w, n), ClientID: fmt.Sprintf("w%d:%d", w, n)}
				deadline := time.Now().Add(30 * time.Second)
				for {
					e, err := node.Append(ctx, th, m)
					if err == nil {
						mu.Lock()
						done[m.ClientID] = e
						mu.Unlock()
						count.Add(1)
						break
					}
					if ctx.Err() != nil {
						return
					}
					if chatrelay.CodeOf(err) != chatrelay.StoreUnavailable || time.Now().After(deadline) {
						t.Errorf("post %s: %v", m.ClientID, err)
						return
					}
					time.Sleep(20 * time.Millisecond) // a client's retry, as Retry-After asks
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	assert.Eventually(t, 30*time.Second, "posts before the stop", func() bool { return count.Load() >= 200 })

	old := c.PrimaryOf(t, prefix+"{s0}:threads")
	c.Server(t, old).Stop(t)
	var other *redistest.Server // a node that answers, to ask who serves shard 0
	for _, s := range c.Nodes {
		if s.Addr() != old {
			other = s
			break
		}
	}
	slot := must[int64](t)(other.Client(t).ClusterKeySlot(ctx, prefix+"{s0}:threads").Result())
	assert.Eventually(t, 30*time.Second, "the replica to take over shard 0", func() bool {
		for _, sh := range must[[]redis.ClusterShard](t)(other.Client(t).ClusterShards(ctx).Result()) {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range sh.Nodes {
						if n.Role == "master" && n.Health == "online" {
							return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)) != old
						}
					}
				}
			}
		}
		return false
	})
	c.Server(t, old).Cont()
	assert.Eventually(t, 30*time.Second, "the old primary to turn replica", func() bool {
		return c.Server(t, old).Role(t) == "slave"
	})
	after := count.Load()
	assert.Eventually(t, 30*time.Second, "posts after the failover", func() bool { return count.Load() >= after+200 })
	stop.Store(true)
	wg.Wait()

	stored := map[string]bool{}
	for _, th := range threads {
		for _, e := range must[store.Page](t)(a.Since(ctx, th, 0, 0)).Messages {
			stored[e.ID] = true
		}
	}
	for id, e := range done {
		if !stored[e.ID] {
			t.Logf("acknowledged %s (%s) is not stored", id, e.ID)
			lost++
		}
	}
	t.Logf("%d posts acknowledged, %d lost", len(done), lost)
	return len(done), lost
}

// TestShardsWaitReplicasPerURL: on a list of instances, each URL says
// whether its shard waits: with the first shard's replica stopped, its
// threads' posts are refused StoreUnavailable, the second shard's (no
// wait-replicas) acknowledged.
func TestShardsWaitReplicasPerURL(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t, redistest.ServerOptions{}), redistest.StartServer(t, redistest.ServerOptions{})
	replica := a.StartReplica(t)
	sh := openSharded(t, a.URL()+"?wait-replicas=1&wait-timeout=200ms,"+b.URL(), Options{})
	if sh.shards[0].opt.WaitReplicas != 1 || sh.shards[1].opt.WaitReplicas != 0 {
		t.Fatalf("wait-replicas of the shards: %d, %d", sh.shards[0].opt.WaitReplicas, sh.shards[1].opt.WaitReplicas)
	}
	var on [2]string
	for i := 0; (on[0] == "" || on[1] == "") && i < 1000; i++ {
		th := fmt.Sprintf("%016x", 0x5a5a+i)
		on[sh.ShardOf(th)] = th
	}
	ctx := t.Context()
	replica.Stop(t)
	_, err := sh.Append(ctx, on[0], store.NewMessage{Text: "on the waiting shard"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	must[store.Entry](t)(sh.Append(ctx, on[1], store.NewMessage{Text: "on the other"}))
}

// TestWaitReplicasGatesOnce: with wait-replicas on, a post alone (sent
// as a pipeline of itself and its WAIT) reaches the store's gate once,
// not once as a command and again as the pipeline that carries its WAIT.
func TestWaitReplicasGatesOnce(t *testing.T) {
	t.Parallel()
	primary := redistest.StartServer(t, redistest.ServerOptions{})
	replica := primary.StartReplica(t)
	const th = "a1b2c3d4e5f60003"
	var (
		mu    sync.Mutex
		gated [][]string // the calls naming th that reached the gate
	)
	opt := Options{Log: testLogger(t), onGate: func(cmds []redis.Cmder) {
		var names []string
		mentions := false
		for _, c := range cmds {
			names = append(names, c.Name())
			for _, a := range c.Args() {
				if strings.Contains(argText(a), "{"+th+"}") {
					mentions = true
				}
			}
		}
		if mentions {
			mu.Lock()
			gated = append(gated, names)
			mu.Unlock()
		}
	}}
	s, err := Open(t.Context(), primary.URL()+"?wait-replicas=1", opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	e := must[store.Entry](t)(s.Append(t.Context(), th, store.NewMessage{Text: "one"}))
	if !onReplica(t, replica.Client(t), s, th, e.Epoch) {
		t.Fatalf("acknowledged %s, not on the replica", e.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(gated) != 1 || !slices.Contains(gated[0], "wait") {
		t.Fatalf("one post reached the gate %d times: %v (want once, with its WAIT)", len(gated), gated)
	}
}
