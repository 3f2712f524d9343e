package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Opening a sharded store: the shard list or cluster URL, and the
// checks that every node sees the same shards.

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
	if opt.Timeout <= 0 {
		opt.Timeout = chatrelay.DefaultStoreTimeout
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
	sh := &Sharded{opt: opt, node: randomHex(8), creating: make(chan struct{}, 1), createWait: maxCreateWait * opt.Timeout, down: make([]atomic.Bool, len(urls))}
	names := make([]string, len(urls))
	errs := make([]error, len(urls)) // the shards that did not answer: why (sharded_late.go)
	late := 0
	for k, u := range urls {
		u = strings.TrimSpace(u)
		names[k] = where(u)
		o := opt // each URL's own wait-replicas
		u, err := takeWaitParams(u, &o)
		if err != nil {
			sh.Close()
			return nil, err
		}
		rdb, err := newClient(u)
		if err != nil {
			sh.Close()
			return nil, err
		}
		s := newStore(rdb, o, shardOf{other: k > 0})
		sh.shards = append(sh.shards, s)
		if err := s.setup(ctx); err != nil {
			if chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
				sh.Close()
				return nil, err
			}
			errs[k] = err
			late++
		}
	}
	sh.where = strings.Join(names, ",")
	var err error
	switch late {
	case 0:
		err = claimInstances(ctx, sh.shards, names)
	case len(urls):
		err = errs[0]
	default:
		err = sh.openLate(ctx, names, errs)
	}
	if err != nil {
		sh.Close()
		return nil, err
	}
	return sh, nil
}

// openLate opens sh while the shards whose errs are set did not answer:
// the others' records are read and claimed as claimInstances does
// (claimRecords); those claimed are used at once, and the rest wait
// behind a gate (sharded_late.go) until they answer and their record is
// there, or may be written. It fails if no shard can be used now.
func (sh *Sharded) openLate(ctx context.Context, names []string, errs []error) error {
	n := len(sh.shards)
	l := &lateShards{sh: sh, names: names, gates: make([]*shardGate, n), recs: make([]shardRecord, n),
		mu: make(chan struct{}, 1), changed: make(chan struct{}), done: make(chan struct{})}
	if err := claimRecords(ctx, sh.shards, names, l.recs, func(k int) bool { return errs[k] == nil }); err != nil {
		return err
	}
	usable, why := 0, errs[0]
	for k, s := range sh.shards {
		switch {
		case errs[k] != nil:
			why = cmp.Or(why, errs[k])
			s.log.Warn("redis store: a shard does not answer; its threads answer 503 until it does", "shard", names[k], "err", errs[k])
			l.gates[k] = &shardGate{l: l, k: k, err: errs[k], said: errs[k].Error()}
		case l.recs[k].claimed:
			usable++
		default: // its record is to be written once every shard answers
			l.gates[k] = &shardGate{l: l, k: k, setUp: true}
		}
	}
	if usable == 0 {
		// A store's first start (no shard has its record yet) needs every
		// shard: the records are written together, shard 0's last.
		return unreachable(fmt.Errorf("no shard that answers has its shard record yet, and a store's first start needs every shard: %w", why))
	}
	for k, g := range l.gates {
		if g != nil {
			sh.shards[k].gate = g
		}
	}
	sh.late = l
	ctx, l.stop = context.WithCancel(context.Background())
	go l.retry(ctx)
	return nil
}

// claimInstances checks every instance's shard record, then records it on
// those that have none, shard 0 last: a list in another order or of
// another length would place threads where they are not, and so would an
// instance without a record (a wrong URL, another database) listed beside
// a shard 0 that has one, since shard 0 is recorded only once every other
// shard is. Nothing is written unless every instance passes.
func claimInstances(ctx context.Context, shards []*Store, names []string) error {
	return claimRecords(ctx, shards, names, make([]shardRecord, len(shards)), func(int) bool { return true })
}

// shardRecord is what a store of instances knows of one shard's record
// (claimRecords).
type shardRecord struct {
	read    bool   // the last checkShard succeeded
	got     string // the record it read ("" if none), or claimed
	claimed bool   // claimShard succeeded: the instance is this list's shard k
	err     error  // why it is not claimed, if that failed (nil while it waits for every shard)
}

// claimRecords is the one way a store of instances checks and claims its
// shards' records (claimInstances says why), at a start with every shard
// answering, one with some not answering (openLate), and as the late
// ones answer (lateShards.attempt). It reads the record of each shard
// not claimed yet that ask allows (one that answered), again each time,
// then claims (claimShard) those that have one; one that has none is
// refused beside a shard 0 that has one (unrecorded), written once every
// record was read and shard 0 has none (a store's first start: shard 0's
// last, none after a write that failed), and otherwise waits. Each
// shard's outcome is in recs; the error is the first met (the reads',
// in order, before the claims', from the last shard down).
func claimRecords(ctx context.Context, shards []*Store, names []string, recs []shardRecord, ask func(k int) bool) error {
	n := len(shards)
	var first error
	fail := func(r *shardRecord, err error) {
		r.err = err
		if first == nil {
			first = err
		}
	}
	for k := range recs {
		r := &recs[k]
		if r.claimed || !ask(k) {
			continue
		}
		var err error
		r.got, err = shards[k].checkShard(ctx, names[k], k, n)
		r.read, r.err = err == nil, nil
		if err != nil {
			fail(r, err)
		}
	}
	all := true // every record was read: the missing ones may be written
	for _, r := range recs {
		all = all && (r.claimed || r.read)
	}
	zero := recs[0]
	known := zero.claimed || zero.read // shard 0's record
	write := all && zero.got == ""
	for k := n - 1; k >= 0; k-- {
		r := &recs[k]
		if r.claimed || !r.read {
			continue
		}
		switch {
		case r.got != "" || write:
			if err := shards[k].claimShard(ctx, names[k], k, n); err != nil {
				write = false // shard 0 is written last, or not at all
				fail(r, err)
				continue
			}
			r.claimed, r.got = true, fmt.Sprintf("%d/%d", k, n)
		case known && zero.got != "":
			fail(r, unrecorded(names[k], shards[k].prefix, names[0], k, n))
		}
	}
	return first
}

// checkShard answers the shard record of an instance listed as shard k of
// n ("" if it has none), or a configuration error if the record says
// otherwise or the instance holds the threads of a store that is not
// sharded.
func (s *Store) checkShard(ctx context.Context, name string, k, n int) (string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	want := fmt.Sprintf("%d/%d", k, n)
	// A pipeline, not a MULTI (which a full Redis refuses, reads and all),
	// in this order: an instance records its shard before it holds a
	// thread, so a thread counted here has a record the GET sees.
	var get *redis.StringCmd
	var held *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		held = p.ZCard(ctx, s.index)
		get = p.Get(ctx, s.prefix+"shard")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", s.unavailable("shard", err)
	}
	got := get.Val()
	if got == "" && held.Val() > 0 {
		return "", store.ConfigErrorf("store: %s holds the threads of a store that is not sharded (under the prefix %q): "+
			"its threads would be looked for on other shards; open it alone, or give the shards a new --redis-prefix", name, s.prefix)
	}
	if got != "" && got != want {
		return "", mislisted(name, got, s.prefix, want)
	}
	return got, nil
}

// unrecorded refuses the instance name listed as shard k of n, which has
// no shard record while shard 0 (first) has one.
func unrecorded(name, prefix, first string, k, n int) error {
	return store.ConfigErrorf("store: %s has no shard record (under the prefix %q), but %s is shard 0/%d: "+
		"it is not the instance first listed as shard %d, or it lost its data while no node ran (then SET %sshard %d/%d on it)",
		name, prefix, first, n, k, prefix, k, n)
}

func mislisted(name, got, prefix, want string) error {
	return store.ConfigErrorf("store: %s is shard %s (shard/shards, under the prefix %q), but this --store lists it as %s: "+
		"list the instances in the order and number they were first listed in", name, got, prefix, want)
}

// claimShard records on an instance that it is shard k of n, or checks
// that it is (another node may have recorded it since checkShard). A
// record that is there is read without a write, which a full Redis would
// refuse, and with it a node starting then.
func (s *Store) claimShard(ctx context.Context, name string, k, n int) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key, want := s.prefix+"shard", fmt.Sprintf("%d/%d", k, n)
	got, err := s.rdb.Get(ctx, key).Result()
	if err == redis.Nil {
		if err := s.rdb.SetNX(ctx, key, want, 0).Err(); err != nil {
			return s.unavailable("shard", err)
		}
		got, err = s.rdb.Get(ctx, key).Result()
	}
	if err != nil {
		return s.unavailable("shard", err)
	}
	if got != want {
		return mislisted(name, got, s.prefix, want)
	}
	s.shard.Store(&want)
	return nil
}

func openCluster(ctx context.Context, spec string, opt Options) (*Sharded, error) {
	spec, err := takeWaitParams(spec, &opt)
	if err != nil {
		return nil, err
	}
	co, err := parseClusterSpec(spec)
	if err != nil {
		return nil, err
	}
	// An append is not idempotent: never send it twice. go-redis's
	// cluster client resends a command after a lost connection or a
	// redirection within MaxRedirects, whatever MaxRetries says, and its
	// pipeline loop is not sound (redirect.go): it follows none, one
	// attempt each, and reloads the slot map after a MOVED; redirectHook
	// follows MOVED, ASK and TRYAGAIN (CLUSTERDOWN briefly), and only
	// those.
	co.MaxRetries = -1
	co.MaxRedirects = -1
	co.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	co.ContextTimeoutEnabled = true
	if co.ClientName == "" {
		co.ClientName = "chatrelay"
	}
	if co.DialTimeout == 0 {
		// A dial is bounded as a call is, also where no call's deadline
		// bounds it: the slot map's reloads, the feed's subscriptions (a
		// primary that stalls takes connections it never answers).
		co.DialTimeout = opt.Timeout
	}
	if opt.dial != nil {
		co.Dialer = opt.dial
	}
	rdb := redis.NewClusterClient(co)
	nodes := &nodeClients{m: map[string]*redis.Client{}}
	rdb.OnNewNode(nodes.add)
	// The outer hook: before every shard's answerHook (newStore).
	rdb.AddHook(redirectHook{nodes: nodes, onRound: opt.onRedirect})
	if opt.WaitReplicas > 0 {
		// WAIT counts one connection's writes: it goes in each node's
		// share of a pipeline, on that node's connection (replicas.go).
		rdb.OnNewNode(func(c *redis.Client) { c.AddHook(newWaitHook(c, opt)) })
	}
	if err := notPlainRedis(ctx, rdb, opt.Timeout); err != nil {
		rdb.Close()
		return nil, err
	}
	sh := &Sharded{opt: opt, node: randomHex(8), cluster: rdb, creating: make(chan struct{}, 1), createWait: maxCreateWait * opt.Timeout, where: where(strings.SplitN(spec, ",", 2)[0]), down: make([]atomic.Bool, ClusterShards)}
	base := opt.Prefix
	// The library once for all the shards, on every primary. A cluster is
	// Redis 7, which has functions: a primary that does not answer now
	// (one failing over) is given the library by the first call that
	// misses it there.
	// evalOnly (tests) runs the scripts with EVALSHA and loads nothing,
	// as on a single Redis.
	fcall := new(atomic.Bool)
	if !opt.evalOnly {
		lctx, cancel := context.WithTimeout(ctx, opt.Timeout)
		refused, err := loadLibrary(lctx, rdb)
		cancel()
		fcall.Store(refused == nil)
		if refused != nil {
			cmp.Or(opt.Log, slog.Default()).Info("redis: the library of functions was refused; posts run as scripts (EVALSHA)", "err", refused)
		}
		if err != nil {
			cmp.Or(opt.Log, slog.Default()).Warn("redis: the library of functions could not be loaded on every primary", "err", err)
		}
	}
	for k := range ClusterShards {
		o := opt
		o.Prefix = base + "{s" + strconv.Itoa(k) + "}:"
		s, err := openOn(ctx, rdb, o, shardOf{shared: true, other: k > 0, limits: base, spub: true, fcall: fcall})
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
// 0, or checks it (read first, as claimShard does: a full Redis refuses
// the write).
func (s *Store) claimShards(ctx context.Context, n int) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key := s.prefix + "shards"
	got, err := s.rdb.Get(ctx, key).Result()
	if err == redis.Nil {
		if err := s.rdb.SetNX(ctx, key, n, 0).Err(); err != nil {
			return s.unavailable("shards", err)
		}
		got, err = s.rdb.Get(ctx, key).Result()
	}
	if err != nil {
		return s.unavailable("shards", err)
	}
	if got != strconv.Itoa(n) {
		return store.ConfigErrorf("store: the cluster's data (prefix %q) has %s shards, this chatrelay makes %d", s.prefix, got, n)
	}
	return nil
}

// notPlainRedis refuses a Redis that is no cluster node given as a
// cluster (redis+cluster://host, for redis://host): its first call's
// answer says so (Redis's "ERR This instance has cluster support
// disabled", to the slot map's CLUSTER SLOTS). Any other failure is left
// to the open's own calls, which tell a cluster that does not answer.
func notPlainRedis(ctx context.Context, rdb *redis.ClusterClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := rdb.Ping(ctx).Err()
	if err == nil || !isReply(err) || !strings.Contains(err.Error(), "cluster support disabled") {
		return nil
	}
	scheme, addr := "redis", rdb.Options().Addrs[0]
	if rdb.Options().TLSConfig != nil {
		scheme = "rediss"
	}
	return store.ConfigErrorf("store: the Redis at %s is not a node of a Redis Cluster (%v): give it as %s://%s/0, or give the nodes of a cluster", addr, err, scheme, addr)
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
