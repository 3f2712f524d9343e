package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// # Shards
//
// A Sharded store places threads over several shards by a stable hash of
// the thread id (FNV-1a, 32 bits, modulo the number of shards). A shard is
// a Store of its own: every key of a thread and every index of the threads
// it holds (threads, pending, grant-index, the generation, the webhook
// events) is on the shard, so every script stays what it is, atomic on one
// Redis (or one cluster slot). Two forms:
//
//   - Instances (--store redis://a,redis://b,…): shard k is the k-th
//     Redis, with the key layout of a single Redis under the same prefix.
//     Each instance records which shard it is, <prefix>shard = "k/N"
//     (written once); a node whose list puts it elsewhere, or has another
//     length, refuses to start. A single redis:// URL is not a Sharded
//     store: it is today's Store, byte for byte.
//   - Redis Cluster (--store redis+cluster://host:port,host:port,…):
//     ClusterShards virtual shards on one cluster client; shard k's prefix
//     is <prefix>{s<k>}: so that all of its keys hash to one slot (Redis
//     hashes the first {…} of a key: <prefix>{s3}:{T}:log and
//     <prefix>{s3}:threads share a slot). Resharding moves whole slots, so
//     a shard always lives on one primary. The number is recorded at
//     <prefix>{s0}:shards.
//
// The readers of the shared indexes (Threads, Pending, Resolve, Sweep)
// ask every shard and merge the answers; Follow follows every shard's feed
// and hands on one feed: on a cluster the scripts SPUBLISH on the shard's
// channel, in its slot, and Follow SSUBSCRIBEs to it (no broadcast over
// the cluster bus); instances PUBLISH and SUBSCRIBE. The node-wide singletons (the ticket key, the
// VAPID key, the agent keys, push claims) live on shard 0; the limiters'
// keys ({rl}, {sl}) on shard 0 for instances and in their own slots (the
// prefix without a shard tag) on a cluster. Webhook events are queued per
// shard (the append script queues on its own shard) and taken from every
// shard.
//
// The thread limit (MaxThreads) holds for all shards together: an append
// runs its script with no room for a new thread; only one that would
// create its thread (answered thread_limit) takes the creation lock (a
// SET NX key on shard 0), counts the other shards' threads (one ZCARD
// each, at once) and runs again with the room they leave (Append).

// ClusterShards is the number of virtual shards of a Redis Cluster store:
// threads spread over 16 slots, so over at most 16 primaries. It is
// recorded in the cluster; changing it needs a new prefix.
const ClusterShards = 16

// Sharded is a store whose threads are spread over several shards. It
// implements the same interfaces as Store.
type Sharded struct {
	shards  []*Store
	cluster redis.UniversalClient // the cluster client the shards share; nil for instances
	opt     Options
	where   string

	outOnce sync.Once
	out     *shardedOutbox
	once    sync.Once
}

var (
	_ store.Store        = (*Sharded)(nil)
	_ store.Participants = (*Sharded)(nil)
	_ store.Push         = (*Sharded)(nil)
	_ store.Agents       = (*Sharded)(nil)
	_ store.Attachments  = (*Sharded)(nil)
	_ store.Checker      = (*Sharded)(nil)
	_ store.FeedStater   = (*Sharded)(nil)
)

// IsSharded reports whether spec names a sharded store: several redis://
// URLs separated by commas, or a redis+cluster:// URL.
func IsSharded(spec string) bool {
	return strings.Contains(spec, ",") || strings.HasPrefix(spec, "redis+cluster:") || strings.HasPrefix(spec, "rediss+cluster:")
}

// OpenSharded opens the sharded store of spec: "redis://a,redis://b,…"
// (one shard per Redis) or "redis+cluster://[user:pass@]host:port[,host:port…][?query]"
// (a Redis Cluster; the query parameters of redis.ParseClusterURL apply,
// rediss+cluster:// for TLS).
func OpenSharded(ctx context.Context, spec string, opt Options) (*Sharded, error) {
	if opt.Prefix == "" {
		opt.Prefix = chatrelay.DefaultKeyPrefix
	}
	if opt.MaxThreads <= 0 {
		opt.MaxThreads = chatrelay.DefaultMaxThreads
	}
	if strings.HasPrefix(spec, "redis+cluster:") || strings.HasPrefix(spec, "rediss+cluster:") {
		return openCluster(ctx, spec, opt)
	}
	return openInstances(ctx, strings.Split(spec, ","), opt)
}

func openInstances(ctx context.Context, urls []string, opt Options) (*Sharded, error) {
	seen := map[string]bool{}
	for _, u := range urls {
		w := where(strings.TrimSpace(u))
		if u == "" || seen[w] {
			return nil, store.ConfigErrorf("store: the list of Redis instances has an empty or repeated entry %q", w)
		}
		seen[w] = true
	}
	sh := &Sharded{opt: opt}
	names := make([]string, len(urls))
	for k, u := range urls {
		u = strings.TrimSpace(u)
		names[k] = where(u)
		s, err := Open(ctx, u, opt)
		if err != nil {
			sh.Close()
			return nil, err
		}
		sh.shards = append(sh.shards, s)
		if err := s.claimShard(ctx, names[k], k, len(urls)); err != nil {
			sh.Close()
			return nil, err
		}
	}
	sh.where = strings.Join(names, ",")
	return sh, nil
}

// claimShard records on an instance that it is shard k of n, or checks
// that it is: a list in another order or of another length would place
// threads where they are not.
func (s *Store) claimShard(ctx context.Context, name string, k, n int) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key, want := s.prefix+"shard", fmt.Sprintf("%d/%d", k, n)
	var get *redis.StringCmd
	var held *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		held = p.ZCard(ctx, s.index)
		get = p.Get(ctx, key)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.unavailable("shard", err)
	}
	got := get.Val()
	if got == "" {
		if held.Val() > 0 {
			return store.ConfigErrorf("store: %s holds the threads of a store that is not sharded (under the prefix %q): "+
				"its threads would be looked for on other shards; open it alone, or give the shards a new --redis-prefix", name, s.prefix)
		}
		if err := s.rdb.SetNX(ctx, key, want, 0).Err(); err != nil {
			return s.unavailable("shard", err)
		}
		if got, err = s.rdb.Get(ctx, key).Result(); err != nil {
			return s.unavailable("shard", err)
		}
	}
	if got != want {
		return store.ConfigErrorf("store: %s is shard %s (shard/shards, under the prefix %q), but this --store lists it as %s: "+
			"list the instances in the order and number they were first listed in", name, got, s.prefix, want)
	}
	return nil
}

func openCluster(ctx context.Context, spec string, opt Options) (*Sharded, error) {
	co, err := parseClusterSpec(spec)
	if err != nil {
		return nil, err
	}
	// An append is not idempotent: never send it twice. go-redis's
	// cluster client resends a command after a lost connection or a
	// redirection within MaxRedirects, whatever MaxRetries says; with
	// none, a moved slot fails the call (StoreUnavailable, Retry 1s) and
	// the client reloads the slot map for the next one.
	co.MaxRetries = -1
	co.MaxRedirects = -1
	co.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	co.ContextTimeoutEnabled = true
	if co.ClientName == "" {
		co.ClientName = "chatrelay"
	}
	rdb := redis.NewClusterClient(co)
	sh := &Sharded{opt: opt, cluster: rdb, where: where(strings.SplitN(spec, ",", 2)[0])}
	base := opt.Prefix
	for k := range ClusterShards {
		o := opt
		o.Prefix = base + "{s" + strconv.Itoa(k) + "}:"
		s, err := openOn(ctx, rdb, o, shardOf{shared: true, limits: base, spub: true})
		if err != nil {
			sh.Close()
			return nil, err
		}
		sh.shards = append(sh.shards, s)
	}
	if err := sh.shards[0].claimShards(ctx, ClusterShards); err != nil {
		sh.Close()
		return nil, err
	}
	return sh, nil
}

// claimShards records the number of virtual shards of a cluster on shard
// 0, or checks it.
func (s *Store) claimShards(ctx context.Context, n int) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key := s.prefix + "shards"
	if err := s.rdb.SetNX(ctx, key, n, 0).Err(); err != nil {
		return s.unavailable("shards", err)
	}
	got, err := s.rdb.Get(ctx, key).Result()
	if err != nil {
		return s.unavailable("shards", err)
	}
	if got != strconv.Itoa(n) {
		return store.ConfigErrorf("store: the cluster's data (prefix %q) has %s shards, this chatrelay makes %d", s.prefix, got, n)
	}
	return nil
}

// parseClusterSpec reads redis+cluster://[user:pass@]host:port[,host:port…][/][?query].
func parseClusterSpec(spec string) (*redis.ClusterOptions, error) {
	scheme, rest, _ := strings.Cut(spec, "://")
	scheme = strings.TrimSuffix(scheme, "+cluster")
	rest, query, _ := strings.Cut(rest, "?")
	auth, hosts := "", rest
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		auth, hosts = rest[:at+1], rest[at+1:]
	}
	hosts = strings.TrimSuffix(hosts, "/")
	addrs := strings.Split(hosts, ",")
	if len(addrs) == 0 || slices.Contains(addrs, "") || strings.Contains(hosts, "/") {
		return nil, store.ConfigErrorf("store: %q: want redis+cluster://host:port[,host:port…]", where(spec))
	}
	u := scheme + "://" + auth + addrs[0]
	var params []string
	if query != "" {
		params = append(params, query)
	}
	for _, a := range addrs[1:] {
		params = append(params, "addr="+a)
	}
	if len(params) > 0 {
		u += "?" + strings.Join(params, "&")
	}
	co, err := redis.ParseClusterURL(u)
	if err != nil {
		return nil, store.ConfigErrorf("store: %q: %v", where(spec), err)
	}
	return co, nil
}

// Shards returns the shards (for tests and tools).
func (sh *Sharded) Shards() []*Store { return sh.shards }

// ShardOf returns the index of the shard that holds thread.
func (sh *Sharded) ShardOf(thread string) int { return shardIndex(thread, len(sh.shards)) }

func shardIndex(thread string, n int) int {
	h := fnv.New32a()
	io.WriteString(h, thread)
	return int(h.Sum32() % uint32(n))
}

func (sh *Sharded) of(thread string) *Store { return sh.shards[sh.ShardOf(thread)] }

// Prefix returns the key prefix of the shard that holds thread.
func (sh *Sharded) Prefix(thread string) string { return sh.of(thread).prefix }

// Close closes every shard, then the cluster client they share.
func (sh *Sharded) Close() error {
	var err error
	sh.once.Do(func() {
		for _, s := range sh.shards {
			err = errors.Join(err, s.Close())
		}
		if sh.cluster != nil {
			err = errors.Join(err, sh.cluster.Close())
		}
	})
	return err
}

// each runs fn on every shard at once and returns the first error.
func (sh *Sharded) each(fn func(k int, s *Store) error) error {
	errs := make([]error, len(sh.shards))
	var wg sync.WaitGroup
	for k, s := range sh.shards {
		wg.Go(func() { errs[k] = fn(k, s) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Ping reports whether every shard answers.
func (sh *Sharded) Ping(ctx context.Context) error {
	return sh.each(func(_ int, s *Store) error { return s.Ping(ctx) })
}

// Check implements store.Checker.
func (sh *Sharded) Check(ctx context.Context) error { return sh.Ping(ctx) }

// FeedLive implements store.FeedStater: every shard's feed is live.
func (sh *Sharded) FeedLive() bool {
	for _, s := range sh.shards {
		if !s.FeedLive() {
			return false
		}
	}
	return true
}

// TicketKey is shard 0's (Store.TicketKey).
func (sh *Sharded) TicketKey(ctx context.Context) ([]byte, error) { return sh.shards[0].TicketKey(ctx) }

// limiters is the Store whose limiter keys every node uses: shard 0
// (whose limiter prefix is the base prefix on a cluster).
func (sh *Sharded) limiters() *Store { return sh.shards[0] }

// NewRateLimiter is NewRateLimiter on the store's limiter keys.
func (sh *Sharded) NewRateLimiter(w chatrelay.Windows) *RateLimiter {
	return NewRateLimiter(sh.limiters(), w)
}

// NewStreamLimiter is NewStreamLimiter on the store's limiter keys.
func (sh *Sharded) NewStreamLimiter(l chatrelay.StreamLimits, renew time.Duration) *StreamLimiter {
	return NewStreamLimiter(sh.limiters(), l, renew)
}

// --- threads ---

type limitKey struct{}

// threadLimit is the MaxThreads an append's script checks: the store's,
// or the room a Sharded store computed for this call.
func (s *Store) threadLimit(ctx context.Context) int {
	if n, ok := ctx.Value(limitKey{}).(int); ok {
		return n
	}
	return s.opt.MaxThreads
}

// room returns ctx carrying the thread limit for creating a thread on
// shard k: the limit less the threads of the other shards.
func (sh *Sharded) room(ctx context.Context, k int) (context.Context, error) {
	var others atomic.Int64
	err := sh.each(func(j int, s *Store) error {
		if j == k {
			return nil
		}
		cctx, cancel := s.bound(ctx)
		defer cancel()
		n, err := s.rdb.ZCard(cctx, s.index).Result()
		if err != nil {
			return s.unavailable("threads", err)
		}
		others.Add(n)
		return nil
	})
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, limitKey{}, max(sh.opt.MaxThreads-int(others.Load()), 0)), nil
}

// Append implements store.Store on the thread's shard. It is first tried
// with no room for a new thread (limit 0), which an existing thread never
// needs: one script, as on one Redis. Only an append that would create the
// thread goes on: under the creation lock (shard 0's create-lock, so that
// two nodes creating threads on two shards do not both take the last
// place), it counts the other shards' threads and tries again with the
// room they leave.
func (sh *Sharded) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	k := sh.ShardOf(thread)
	s := sh.shards[k]
	if len(sh.shards) == 1 {
		return s.Append(ctx, thread, m)
	}
	e, err := s.Append(context.WithValue(ctx, limitKey{}, 0), thread, m)
	if chatrelay.CodeOf(err) != chatrelay.ThreadLimit {
		return e, err
	}
	unlock, err := sh.lockCreate(ctx)
	if err != nil {
		return store.Entry{}, err
	}
	defer unlock()
	rctx, err := sh.room(ctx, k)
	if err != nil {
		return store.Entry{}, err
	}
	return s.Append(rctx, thread, m)
}

// unlockScript deletes the creation lock if it is still the caller's.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// lockCreate takes the creation lock: SET NX PX on shard 0, tried again
// every few milliseconds within Options.Timeout. The lock lapses by
// itself after three Timeouts (a node that died holding it).
func (sh *Sharded) lockCreate(ctx context.Context) (func(), error) {
	s := sh.shards[0]
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key, token := s.prefix+"create-lock", randomHex(8)
	wait := time.Millisecond
	for {
		ok, err := s.rdb.SetNX(ctx, key, token, 3*s.opt.Timeout).Result()
		if err != nil {
			return nil, s.unavailable("create lock", err)
		}
		if ok {
			return func() {
				ctx, cancel := s.bound(context.WithoutCancel(ctx))
				defer cancel()
				unlockScript.Run(ctx, s.rdb, []string{key}, token)
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, s.unavailable("create lock", ctx.Err())
		case <-time.After(wait): // another node creates a thread: wait for it to finish
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// Since implements store.Store.
func (sh *Sharded) Since(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	return sh.of(thread).Since(ctx, thread, since, limit)
}

// Changes implements store.Store.
func (sh *Sharded) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	return sh.of(thread).Changes(ctx, thread, since, limit)
}

// Change implements store.Store.
func (sh *Sharded) Change(ctx context.Context, thread string, c store.Change) (store.Entry, error) {
	return sh.of(thread).Change(ctx, thread, c)
}

// Pending implements store.Store: every shard's, by deadline.
func (sh *Sharded) Pending(ctx context.Context) ([]store.PendingInteraction, error) {
	return gather(sh, func(s *Store) ([]store.PendingInteraction, error) { return s.Pending(ctx) },
		func(a, b store.PendingInteraction) int {
			return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Thread, b.Thread), cmp.Compare(a.InteractionID, b.InteractionID))
		})
}

// Threads implements store.Store: every shard's, newest rev first.
func (sh *Sharded) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	return gather(sh, func(s *Store) ([]store.ThreadInfo, error) { return s.Threads(ctx) },
		func(a, b store.ThreadInfo) int {
			return cmp.Or(cmp.Compare(b.Rev, a.Rev), cmp.Compare(a.Thread, b.Thread))
		})
}

// gather is every shard's list, as list reads it, in one, sorted (stably)
// by order.
func gather[T any](sh *Sharded, list func(s *Store) ([]T, error), order func(a, b T) int) ([]T, error) {
	parts := make([][]T, len(sh.shards))
	err := sh.each(func(k int, s *Store) (err error) {
		parts[k], err = list(s)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := slices.Concat(parts...)
	slices.SortStableFunc(out, order)
	return out, nil
}

// Sweep implements store.Store: every shard, the counts added.
func (sh *Sharded) Sweep(ctx context.Context) (store.SweepStats, error) {
	var mu sync.Mutex
	var sum store.SweepStats
	err := sh.each(func(_ int, s *Store) error {
		st, err := s.Sweep(ctx)
		mu.Lock()
		sum.Threads += st.Threads
		sum.Dropped += st.Dropped
		sum.ThreadsRemoved += st.ThreadsRemoved
		mu.Unlock()
		return err
	})
	return sum, err
}

// Follow implements store.Store: it follows every shard's feed and hands
// their batches on as one feed, one call of fn at a time. Ready comes
// once every shard's feed is registered (a shard's batches wait for it);
// the agents' batches come from shard 0, which holds the agent keys.
func (sh *Sharded) Follow(ctx context.Context, fn func(store.Batch)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // one call of fn at a time
	ready := make(chan struct{})
	var waiting atomic.Int32
	waiting.Store(int32(len(sh.shards)))
	errs := make([]error, len(sh.shards))
	var wg sync.WaitGroup
	for k, s := range sh.shards {
		wg.Go(func() {
			defer cancel() // one feed ending ends them all
			errs[k] = s.Follow(ctx, func(b store.Batch) {
				if b.Ready {
					if waiting.Add(-1) == 0 {
						mu.Lock()
						fn(b)
						mu.Unlock()
						close(ready)
					}
					select {
					case <-ready:
					case <-ctx.Done():
					}
					return
				}
				if b.Agents && k != 0 {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if ctx.Err() == nil {
					fn(b)
				}
			})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// --- participants ---

// Invite implements store.Participants.
func (sh *Sharded) Invite(ctx context.Context, thread string, g chatrelay.Grant) error {
	return sh.of(thread).Invite(ctx, thread, g)
}

// Grants implements store.Participants.
func (sh *Sharded) Grants(ctx context.Context, thread string) ([]chatrelay.Grant, error) {
	return sh.of(thread).Grants(ctx, thread)
}

// Grant implements store.Participants.
func (sh *Sharded) Grant(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	return sh.of(thread).Grant(ctx, thread, id)
}

// Revoke implements store.Participants.
func (sh *Sharded) Revoke(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	return sh.of(thread).Revoke(ctx, thread, id)
}

// MarkUsed implements store.Participants.
func (sh *Sharded) MarkUsed(ctx context.Context, thread, id string) (bool, error) {
	return sh.of(thread).MarkUsed(ctx, thread, id)
}

// Seen implements store.Participants.
func (sh *Sharded) Seen(ctx context.Context, thread, id string, at int64) (bool, error) {
	return sh.of(thread).Seen(ctx, thread, id, at)
}

// NoteExpired implements store.Participants.
func (sh *Sharded) NoteExpired(ctx context.Context, thread, id string) (bool, error) {
	return sh.of(thread).NoteExpired(ctx, thread, id)
}

// Audit implements store.Participants.
func (sh *Sharded) Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) error {
	return sh.of(thread).Audit(ctx, thread, ev)
}

// AuditLog implements store.Participants.
func (sh *Sharded) AuditLog(ctx context.Context, thread string) ([]chatrelay.AuditEvent, error) {
	return sh.of(thread).AuditLog(ctx, thread)
}

// Resolve implements store.Participants: every shard's grant index is
// asked at once (a token does not say its thread). A shard that cannot
// answer makes it StoreUnavailable unless another shard knows the token.
func (sh *Sharded) Resolve(ctx context.Context, digest string) (string, chatrelay.Grant, error) {
	type found struct {
		thread string
		g      chatrelay.Grant
	}
	res := make([]found, len(sh.shards))
	errs := make([]error, len(sh.shards))
	sh.each(func(k int, s *Store) error {
		res[k].thread, res[k].g, errs[k] = s.Resolve(ctx, digest)
		return nil
	})
	for k, r := range res {
		if errs[k] == nil && r.thread != "" {
			return r.thread, r.g, nil
		}
	}
	for _, err := range errs {
		if err != nil && chatrelay.CodeOf(err) != chatrelay.Unauthorized {
			return "", chatrelay.Grant{}, err
		}
	}
	return "", chatrelay.Grant{}, errs[0]
}

// --- push ---

// PushSubscribe implements store.Push.
func (sh *Sharded) PushSubscribe(ctx context.Context, thread string, sub chatrelay.PushSubscription) (chatrelay.PushSubscription, bool, error) {
	return sh.of(thread).PushSubscribe(ctx, thread, sub)
}

// PushSubscriptions implements store.Push.
func (sh *Sharded) PushSubscriptions(ctx context.Context, thread string) ([]chatrelay.PushSubscription, error) {
	return sh.of(thread).PushSubscriptions(ctx, thread)
}

// PushUnsubscribe implements store.Push.
func (sh *Sharded) PushUnsubscribe(ctx context.Context, thread, id string) (chatrelay.PushSubscription, error) {
	return sh.of(thread).PushUnsubscribe(ctx, thread, id)
}

// VAPIDKey implements store.Push: shard 0's.
func (sh *Sharded) VAPIDKey(ctx context.Context) ([]byte, error) { return sh.shards[0].VAPIDKey(ctx) }

// RotateVAPIDKey implements store.Push: shard 0's.
func (sh *Sharded) RotateVAPIDKey(ctx context.Context) ([]byte, error) {
	return sh.shards[0].RotateVAPIDKey(ctx)
}

// ClaimPush implements store.Push: on shard 0.
func (sh *Sharded) ClaimPush(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	return sh.shards[0].ClaimPush(ctx, id, ttl)
}

// --- agents (shard 0) ---

// AddAgent implements store.Agents.
func (sh *Sharded) AddAgent(ctx context.Context, k chatrelay.AgentKey) error {
	return sh.shards[0].AddAgent(ctx, k)
}

// AgentKeys implements store.Agents.
func (sh *Sharded) AgentKeys(ctx context.Context) ([]chatrelay.AgentKey, error) {
	return sh.shards[0].AgentKeys(ctx)
}

// RevokeAgent implements store.Agents.
func (sh *Sharded) RevokeAgent(ctx context.Context, id string) (chatrelay.AgentKey, error) {
	return sh.shards[0].RevokeAgent(ctx, id)
}

// ResolveAgent implements store.Agents.
func (sh *Sharded) ResolveAgent(ctx context.Context, digest string) (chatrelay.AgentKey, error) {
	return sh.shards[0].ResolveAgent(ctx, digest)
}

// --- attachments ---

// PutAttachment implements store.Attachments.
func (sh *Sharded) PutAttachment(ctx context.Context, thread string, up store.Upload) (chatrelay.Attachment, error) {
	return sh.of(thread).PutAttachment(ctx, thread, up)
}

// OpenAttachment implements store.Attachments.
func (sh *Sharded) OpenAttachment(ctx context.Context, thread, id string) (chatrelay.Attachment, io.ReadSeekCloser, error) {
	return sh.of(thread).OpenAttachment(ctx, thread, id)
}

// --- webhooks ---

// Outbox returns the queue of webhook events of every shard.
func (sh *Sharded) Outbox() store.Outbox {
	sh.outOnce.Do(func() {
		o := &shardedOutbox{}
		for _, s := range sh.shards {
			o.parts = append(o.parts, s.Outbox())
		}
		sh.out = o
	})
	return sh.out
}

// shardedOutbox takes events from every shard's queue, starting with the
// one after where the last Take started, so that no shard waits behind
// another. An event's id is "evt_s<k>-" and the shard's stream entry id.
type shardedOutbox struct {
	parts []store.Outbox
	next  atomic.Uint32
}

// shardToken is a Due's handle: its shard and that shard's handle.
type shardToken struct {
	k     int
	inner any
}

// Take implements store.Outbox.
func (o *shardedOutbox) Take(ctx context.Context, dest string, now time.Time, max int) ([]store.Due, error) {
	var out []store.Due
	var errs error
	start := int(o.next.Add(1))
	for i := range o.parts {
		if len(out) >= max {
			break
		}
		k := (start + i) % len(o.parts)
		got, err := o.parts[k].Take(ctx, dest, now, max-len(out))
		errs = errors.Join(errs, err)
		for _, d := range got {
			// A shard's event id is its stream entry's id, which another
			// shard may give too: the shard makes it unique (webhook-id).
			d.ID = "evt_s" + strconv.Itoa(k) + "-" + strings.TrimPrefix(d.ID, "evt_")
			out = append(out, d.WithToken(shardToken{k, d.Token()}))
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	return nil, errs
}

// Done implements store.Outbox.
func (o *shardedOutbox) Done(ctx context.Context, dest string, d store.Due) error {
	t, ok := d.Token().(shardToken)
	if !ok {
		return fmt.Errorf("redisstore: a webhook event of another queue")
	}
	return o.parts[t.k].Done(ctx, dest, d.WithToken(t.inner))
}

// Retry implements store.Outbox.
func (o *shardedOutbox) Retry(ctx context.Context, dest string, d store.Due, at time.Time) error {
	t, ok := d.Token().(shardToken)
	if !ok {
		return fmt.Errorf("redisstore: a webhook event of another queue")
	}
	return o.parts[t.k].Retry(ctx, dest, d.WithToken(t.inner), at)
}

// notAShard refuses a Redis that is one shard of a sharded store, opened
// alone: the other shards' threads would be missing.
func (s *Store) notAShard(ctx context.Context, name string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	got, err := s.rdb.Get(ctx, s.prefix+"shard").Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return s.unavailable("shard", err)
	}
	return store.ConfigErrorf("store: %s is shard %s (shard/shards, under the prefix %q) of a sharded store: list every shard in --store", name, got, s.prefix)
}

// reloadSlots has a cluster client read the slot map again, in the
// background (one reload at a time), after a call failed: a primary that
// died answers nothing, so no MOVED would tell the client that its replica
// took over, and the client's own reload comes once a minute. It does
// nothing on one Redis.
func (s *Store) reloadSlots() {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}
