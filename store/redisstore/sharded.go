package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

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
// VAPID key, the agent keys, push claims) live on shard 0; the stream
// leases ({sl}) on shard 0 for instances, the rate windows ({rl}) on the
// shard of their key's hash (a thread's on the thread's: RateLimiter),
// and both in their own slots (the prefix without a shard tag) on a
// cluster. Webhook events are queued per
// shard (the append script queues on its own shard) and taken from every
// shard.
//
// The thread limit (MaxThreads) holds for all shards together: an append
// runs its script with no room for a new thread; only one that would
// create its thread (answered thread_limit) takes the creation lock (a
// SET NX key on shard 0, in one script with shard 0's thread count),
// counts the other shards' threads (their index and att-places, one round
// trip each, at once) and runs again with the room they leave (Append);
// the lock is released in the background. A post that creates a thread
// on another shard than 0 of two is so four round trips after the rate
// windows' (the append, the lock and count, the append again): the lock's
// release is not waited for. An upload that would start its thread (one
// with no place in the limit: attach.go) is committed the same way
// (commitNew), so that every new place is taken under the lock.

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

	// creating is held by the post of this node that takes the creation
	// lock, until the lock is released (lockCreate).
	creating chan struct{}
	// node names this node to the creation lock's script: the node of the
	// last turn yields the lock to another node's waiting post.
	node string

	// moved is closed, and replaced, each time the creation lock moves
	// on as this node sees it: a turn of the node's ends (the lock was
	// taken and released), or the node's post that asks for it takes it
	// or finds it in other hands than holder, the last it saw
	// (lockCreate). Made on first use.
	movedMu sync.Mutex
	moved   chan struct{}
	holder  string

	// turn, if set (tests), runs in each turn of this node's, once it
	// holds the creation lock: a holder slowed, or one that hangs.
	turn func()
	// createWait bounds a post's whole wait for the creation lock:
	// maxCreateWait store timeouts (lockCreate). Tests shorten it, to see
	// the bound end a wait whose every call to Redis has a generous
	// timeout.
	createWait time.Duration

	outOnce sync.Once
	out     *shardedOutbox
	once    sync.Once

	late *lateShards // the shards that did not answer at open (sharded_late.go); nil if none

	down []atomic.Bool // by shard: the last Check found it down (FeedLive)
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
		if sh.late != nil {
			sh.late.stop()
			<-sh.late.done
		}
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

// Check implements store.Checker: every shard takes a write (Store.Check).
// A shard that fails otherwise than full is reported before one that is
// full (store.Full), so that a full shard does not hide one that is gone.
// On instances, shards that fail so while shard 0 (the node-wide keys)
// and at least one other answer (take writes, or are full) are a
// partialError (store.Partial):
// every node finds them alike, and the other shards' threads go on.
// FeedLive excuses the feeds of the shards the last Check found down.
func (sh *Sharded) Check(ctx context.Context) error {
	errs := make([]error, len(sh.shards))
	since := make([]uint64, len(sh.shards)) // each check's start, after its gate (Store.check)
	sh.each(func(k int, s *Store) error { since[k], errs[k] = s.check(ctx); return errs[k] })
	var full, gone error
	down := 0
	for k, err := range errs {
		s := sh.shards[k]
		// A shard that answered another call since the check began is
		// not down: that answer is newer than the check's failure; nor
		// is one whose check its caller gave up (a probe that hung up).
		sh.down[k].Store(err != nil && !store.Full(err) && !errors.Is(err, context.Canceled) && s.answers.Load() == since[k])
		if sh.down[k].Load() {
			// Failed since it last answered, if a gate (sharded_late.go)
			// refused the check before Redis could fail it: the rate
			// windows count on that (RateLimiter.take).
			s.markDown(since[k])
		}
		switch {
		case err == nil:
		case !store.Full(err):
			down++
			if gone == nil {
				gone = err
			}
		case full == nil:
			full = err
		}
	}
	switch {
	case gone == nil:
		return full
	case sh.cluster == nil && (errs[0] == nil || store.Full(errs[0])) && down < len(sh.shards):
		return &partialError{down: down, of: len(sh.shards), err: gone}
	}
	return gone
}

// partialError is a Check's: down of the shards do not answer (err is the
// first one's), the others and shard 0 do.
type partialError struct {
	down, of int
	err      error
}

func (e *partialError) Error() string      { return fmt.Sprintf("%d of %d shards: %v", e.down, e.of, e.err) }
func (e *partialError) Unwrap() error      { return e.err }
func (e *partialError) StorePartial() bool { return true }
func (e *partialError) StoreReason() string {
	return fmt.Sprintf("%d of %d Redis shards: %s", e.down, e.of, store.Reason(e.err))
}

// FeedLive implements store.FeedStater: every shard's feed is live, but
// for the shards the last Check found down (their threads answer 503 on
// every node alike: not this node's fault). The readiness probe checks
// the store first.
func (sh *Sharded) FeedLive() bool {
	for k, s := range sh.shards {
		if !s.FeedLive() && !sh.down[k].Load() {
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

// NewRateLimiter is NewRateLimiter on the store's limiter keys: on
// instances, each window on the shard its key's hash picks, a thread's
// on the thread's shard (RateLimiter); on a cluster, in the limiters' slot.
func (sh *Sharded) NewRateLimiter(w chatrelay.Windows) *RateLimiter {
	l := NewRateLimiter(sh.limiters(), w)
	if sh.cluster == nil {
		l.shards = sh.shards
	}
	return l
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
// shard k: the limit less the threads of the other shards. Shard 0's
// count, if it is one of them, came with the lock (lockCreate: n0).
func (sh *Sharded) room(ctx context.Context, k int, n0 int64) (context.Context, error) {
	others, err := sh.threadsBut(ctx, k, 0)
	if err != nil {
		return ctx, err
	}
	others += n0
	return context.WithValue(ctx, limitKey{}, max(sh.opt.MaxThreads-int(others), 0)), nil
}

// threadsBut answers the places taken in the thread limit (Store.threads:
// the index's threads and those of uploads alone) on every shard but
// those of but, counted at once.
func (sh *Sharded) threadsBut(ctx context.Context, but ...int) (int64, error) {
	var n atomic.Int64
	err := sh.each(func(j int, s *Store) error {
		if slices.Contains(but, j) {
			return nil
		}
		c, err := s.threads(ctx)
		n.Add(c)
		return err
	})
	return n.Load(), err
}

// commitNew commits an upload that would start its thread on shard s
// (commitScript answered thread_limit with no room), as appendRated
// creates a thread: under the creation lock, with the room the other
// shards leave.
func (sh *Sharded) commitNew(ctx context.Context, s *Store, thread string, commit func(ctx context.Context, limit int) (string, error)) (string, error) {
	k := sh.ShardOf(thread)
	unlock, n0, err := sh.lockCreate(ctx, k != 0)
	if err != nil {
		return "", err
	}
	defer unlock()
	rctx, err := sh.room(ctx, k, n0)
	if err != nil {
		return "", err
	}
	cctx, cancel := s.bound(rctx)
	defer cancel()
	return commit(cctx, s.threadLimit(rctx))
}

// Append implements store.Store on the thread's shard. It is first tried
// with no room for a new thread (limit 0), which an existing thread never
// needs: one script, as on one Redis. Only an append that would create the
// thread goes on: under the creation lock (shard 0's create-lock, so that
// two nodes creating threads on two shards do not both take the last
// place), it counts the other shards' threads and tries again with the
// room they leave.
func (sh *Sharded) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	return sh.appendRated(ctx, thread, m, nil)
}

// AppendLimited is Store.AppendLimited on instances, with the windows of
// sh.NewRateLimiter: the append counts the post in its thread's window,
// on the thread's shard, in its script; the address's window, when it
// is on another shard, first counts it in a script of its own (a post it
// refuses is left to the caller's two calls, done false, which answer a
// replay before the refusal; a post the append then does not store is
// taken out of it). A thread to create takes the same steps as Append.
// On a cluster (whose windows are in a slot of their own) it does
// nothing and answers done false.
func (sh *Sharded) AppendLimited(ctx context.Context, lim chatrelay.RateLimiter, thread, ip string, m store.NewMessage) (store.Entry, bool, error) {
	l, ok := lim.(*RateLimiter)
	s := sh.of(thread)
	if !ok || sh.cluster != nil || s.spub || m.Participant != "" || len(m.Attachments) > 0 {
		return store.Entry{}, false, nil
	}
	rt := l.take(thread, ip)
	if rt.at() != s {
		return store.Entry{}, false, nil // a limiter of another layout
	}
	if !rt.split() {
		e, err := sh.appendRated(ctx, thread, m, rt)
		return e, true, err
	}
	a := rt.part(1)
	if err := a.count(ctx); err != nil {
		switch chatrelay.CodeOf(err) {
		case chatrelay.RateLimited:
			return store.Entry{}, false, nil // counted nowhere: Take and Append answer it, a replay first
		case chatrelay.StoreUnavailable: // the address's shard: its window on the thread's meanwhile
			e, err := sh.appendRated(ctx, thread, m, rt.addressDown())
			return e, true, err
		}
		return store.Entry{}, true, err
	}
	e, err := sh.appendRated(ctx, thread, m, rt.part(0))
	if err != nil || e.Replayed {
		if chatrelay.CodeOf(err) == chatrelay.StoreUnavailable {
			a.at().settleLater(rt.part(0), a) // its answer may be lost after it stored the post
		} else {
			a.undo(context.WithoutCancel(ctx))
		}
	}
	return e, true, err
}

func (sh *Sharded) appendRated(ctx context.Context, thread string, m store.NewMessage, rt *rateTake) (store.Entry, error) {
	k := sh.ShardOf(thread)
	s := sh.shards[k]
	if len(sh.shards) == 1 {
		return s.appendRated(ctx, thread, m, rt)
	}
	if err := s.admit(ctx); err != nil { // an append reads what setup sets before its script
		return store.Entry{}, err
	}
	e, err := s.appendRated(context.WithValue(ctx, limitKey{}, 0), thread, m, rt)
	if chatrelay.CodeOf(err) != chatrelay.ThreadLimit {
		return e, err
	}
	unlock, n0, err := sh.lockCreate(ctx, k != 0)
	if err != nil {
		return store.Entry{}, err
	}
	defer unlock()
	rctx, err := sh.room(ctx, k, n0)
	if err != nil {
		return store.Entry{}, err
	}
	return s.appendRated(rctx, thread, m, rt)
}

// lockScript takes the creation lock (KEYS[1]) for ARGV[1] for ARGV[2]
// ms if it is free, and answers the places taken in shard 0's thread
// limit (its index, KEYS[2], and att-places, KEYS[3]: Store.threads) if
// ARGV[3] is "1" (the lock and the count in one round trip: all are in
// shard 0's slot), else 0; if the lock is held, it answers its holder's
// token (a string), so that a waiter sees the lock change hands.
//
// The lock is handed over between nodes: a node whose post finds it held
// is recorded as waiting (KEYS[4], the node ARGV[4] scored by the time of
// its last try; a try older than ARGV[5] ms is forgotten), and the node
// of the last turn (KEYS[5]) does not take the free lock while another
// node waits: it answers lockYielded, and the waiting node's next try
// takes it. Without it the node whose turn just ended took the lock back
// at once (its next post asked as the turn ended; the other node's polled
// every 20 ms): a node with a burst of new threads held it turn after
// turn while the other node's posts waited, to the wait's bound.
var lockScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[5]))
local holder = redis.call('GET', KEYS[1])
local others = redis.call('ZCARD', KEYS[4])
if redis.call('ZSCORE', KEYS[4], ARGV[4]) then others = others - 1 end
if holder or (others > 0 and redis.call('GET', KEYS[5]) == ARGV[4]) then
  redis.call('ZADD', KEYS[4], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  return holder or '` + lockYielded + `'
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[4])
if ARGV[3] == '1' then return redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) end
return 0`)

// lockYielded is lockScript's answer to the node of the last turn when the
// lock is free and another node waits for it (no token: those are hex).
const lockYielded = "yielded"

// waiterFresh is how long a node's try for the creation lock counts it as
// waiting: its posts try every 20 ms at most while they wait, so one that
// gave up stops counting soon (the last turn's node yields to it no longer).
const waiterFresh = 250 * time.Millisecond

// unlockScript deletes the creation lock if it is still the caller's.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// errNoTurn is why a post that waited for the creation lock gave up: the
// lock did not move on within the store timeout.
var errNoTurn = errors.New("no turn of the creation lock ended within the store timeout")

// maxCreateWait bounds a post's whole wait for the creation lock, in store
// timeouts, however the lock moves on: a node whose posts keep losing the
// lock to other nodes' endless turns refuses them, retryable, rather
// than hold their requests, which have no deadline of their own, for ever.
const maxCreateWait = 10

// errWaitTooLong is why a post that waited for the creation lock gave up
// while the lock moved on: its wait reached maxCreateWait store timeouts.
var errWaitTooLong = errors.New("no turn of the creation lock came to this post within its wait's bound")

// lockCreate takes the creation lock: a SET NX PX on shard 0, tried again
// every few milliseconds, with shard 0's thread count in the same script
// if count. The lock lapses by itself after three Timeouts (a node that
// died holding it). The unlock it returns releases the lock in the
// background, owned by shard 0's Store (its Close waits for it): the post
// that created a thread is answered without waiting for one more round
// trip. One post of a node at a time asks for the lock (sh.creating, held
// until the lock is released): the node's others wait for it in turn,
// rather than each asking shard 0 again and again, which in a burst of
// new threads took the pool's connections.
//
// A post waits as long as the lock moves on (sh.moved): a turn of its
// node's ends, or the lock on shard 0 changes hands or is released. It
// fails store_unavailable when the lock did not move on for
// Options.Timeout (a holder that hangs, or a call to shard 0 that is not
// answered within it), when its whole wait reaches maxCreateWait
// Timeouts (the lock moves on, never to it), and when ctx ends. A burst of new threads is so
// answered as long as each post's turn comes within maxCreateWait
// Timeouts (before, the whole wait
// counted in one store timeout, and a burst of 300 on a loaded machine
// had half of them refused while the lock changed hands all the time).
func (sh *Sharded) lockCreate(ctx context.Context, count bool) (unlock func(), n0 int64, err error) {
	s := sh.shards[0]
	ctx, cancel := context.WithTimeoutCause(ctx, sh.createWait, errWaitTooLong)
	defer cancel()
	idle := time.NewTimer(s.opt.Timeout) // the time since the lock last moved on
	defer idle.Stop()
	if err := sh.queue(ctx, idle); err != nil {
		return nil, 0, s.waitFailed(err)
	}
	key, token := s.prefix+"create-lock", randomHex(8)
	taken := false
	unlock = func() {
		if !s.members.Enter() {
			sh.leave(taken)
			return
		}
		go func() {
			defer s.members.Leave()
			defer sh.leave(taken)
			ctx, cancel := s.bound(context.WithoutCancel(s.closing))
			defer cancel()
			// Sent again until Redis takes it (it deletes only this
			// lock, so twice is harmless): a release that met a moved
			// slot (a failover of shard 0's primary: MOVED) or a lost
			// connection left the lock to lapse, and every node's new
			// threads waited for it.
			wait := 10 * time.Millisecond
			for unlockScript.Run(ctx, s.rdb, []string{key}, token).Err() != nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				wait = min(2*wait, 200*time.Millisecond)
			}
		}()
	}
	c := "0"
	if count {
		c = "1"
	}
	wait := time.Millisecond
	for {
		cctx, cancel := s.bound(ctx)
		v, err := lockScript.Run(cctx, s.rdb, []string{key, s.index, s.places, key + ":waiters", key + ":last"},
			token, (3 * s.opt.Timeout).Milliseconds(), c, sh.node, waiterFresh.Milliseconds()).Result()
		cancel()
		if err != nil {
			// Redis may have taken the lock for this call all the same
			// (its answer came too late): release it rather than leave
			// every node's new threads waiting for it to lapse.
			unlock()
			if cause := ended(ctx); cause != nil { // the wait's end, not Redis's silence
				return nil, 0, s.waitFailed(cause)
			}
			return nil, 0, s.unavailable("create lock", err)
		}
		if n, ok := v.(int64); ok {
			taken = true
			sh.lockSeen(token)
			if sh.turn != nil {
				sh.turn()
			}
			return unlock, n, nil
		}
		if h, _ := v.(string); sh.lockSeen(h) { // another turn: the lock moved on
			idle.Reset(s.opt.Timeout)
		}
		select {
		case <-ctx.Done():
			sh.leave(false)
			return nil, 0, s.waitFailed(context.Cause(ctx))
		case <-idle.C:
			sh.leave(false)
			return nil, 0, s.waitFailed(errNoTurn)
		case <-time.After(wait): // another node creates a thread: wait for it to finish
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// ended is why ctx ended (context.Cause), or nil if it has not: also
// once its deadline has passed and its timer has yet to cancel it. A
// call to Redis that ctx's deadline cut short fails "i/o timeout" (the
// client sets the connection's deadline from ctx's) as the deadline
// passes, and on a loaded machine before the goroutine of ctx's timer
// runs: the wait's bound, not Redis's silence (a CI run saw it).
func ended(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok && ctx.Err() == nil && !time.Now().Before(dl) {
		<-ctx.Done() // its timer is due: the cause is set at once
	}
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// queue waits for this node's turn to ask for the creation lock
// (sh.creating), as long as the lock moves on: idle fires when it has not
// for the store timeout (it is reset each time it does).
func (sh *Sharded) queue(ctx context.Context, idle *time.Timer) error {
	for {
		moved := sh.watchMoved()
		select {
		case sh.creating <- struct{}{}:
			return nil
		case <-moved:
			idle.Reset(sh.shards[0].opt.Timeout)
		case <-idle.C:
			return errNoTurn
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// leave ends this node's turn (sh.creating); one that took the lock (and
// released it) moves the lock on for the node's waiters. One that did
// not leaves their wait as it was: a holder that gave up waiting, for a
// lock that did not move, is no progress.
func (sh *Sharded) leave(took bool) {
	<-sh.creating
	if took {
		sh.lockSeen("")
	}
}

// watchMoved returns a channel closed when the creation lock next moves
// on (lockSeen).
func (sh *Sharded) watchMoved() <-chan struct{} {
	sh.movedMu.Lock()
	defer sh.movedMu.Unlock()
	if sh.moved == nil {
		sh.moved = make(chan struct{})
	}
	return sh.moved
}

// lockSeen records that the creation lock is held by holder ("": by
// none, after a turn of this node's ended) and reports whether that is
// news: the lock moved on since this node last saw it, which this node's
// posts that wait for it are told.
func (sh *Sharded) lockSeen(holder string) bool {
	sh.movedMu.Lock()
	defer sh.movedMu.Unlock()
	if holder == sh.holder && holder != "" {
		return false
	}
	sh.holder = holder
	if sh.moved != nil {
		close(sh.moved)
	}
	sh.moved = make(chan struct{})
	return true
}

// waitFailed is the error of a post that gave up waiting for the creation
// lock (errNoTurn, or its context's end): 503 store_unavailable, which
// marks no Redis down: shard 0 may have answered all the while (a holder
// that hangs, or a caller that left).
func (s *Store) waitFailed(err error) error {
	if !errors.Is(err, context.Canceled) {
		// Redis may have answered all along: no "redis store unavailable".
		s.log.Warn("redis store: a new thread's wait for the creation lock gave up", "err", err)
	}
	return unreachable(fmt.Errorf("redis create lock: %w", err))
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
	infos, _, err := sh.ThreadsReport(ctx)
	return infos, err
}

var _ store.ThreadsReporter = (*Sharded)(nil)

// ThreadsReport implements store.ThreadsReporter: every shard's.
func (sh *Sharded) ThreadsReport(ctx context.Context) ([]store.ThreadInfo, []store.ThreadError, error) {
	var mu sync.Mutex
	var bad []store.ThreadError
	infos, err := gather(sh, func(s *Store) ([]store.ThreadInfo, error) {
		infos, b, err := s.ThreadsReport(ctx)
		mu.Lock()
		bad = append(bad, b...)
		mu.Unlock()
		return infos, err
	}, store.ThreadOrder)
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(bad, func(a, b store.ThreadError) int { return cmp.Compare(a.Thread, b.Thread) })
	return infos, bad, nil
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
// once every shard's feed is registered (a shard's batches wait for it),
// but for the shards that are not set up yet (sharded_late.go): their
// feeds are followed from when they answer, and they open once they are
// registered. The agents' batches come from shard 0, which holds the
// agent keys.
func (sh *Sharded) Follow(ctx context.Context, fn func(store.Batch)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // one call of fn at a time
	ready := make(chan struct{})
	late := make([]bool, len(sh.shards))
	if sh.late != nil {
		late = sh.late.following()
	}
	var waiting atomic.Int32
	for _, l := range late {
		if !l {
			waiting.Add(1)
		}
	}
	errs := make([]error, len(sh.shards))
	var wg sync.WaitGroup
	for k, s := range sh.shards {
		wg.Go(func() {
			defer cancel() // one feed ending ends them all
			fctx, join := ctx, func() {}
			if late[k] {
				// Its feed reads the shard before the gate opens, which
				// waits for its Ready (once the shard is set up).
				fctx = context.WithValue(ctx, feedKey{}, true)
				var once sync.Once
				join = func() { once.Do(func() { sh.late.joined(k) }) }
				defer join() // a Follow that ends first no longer holds the gate
			}
			errs[k] = s.Follow(fctx, func(b store.Batch) {
				if b.Ready {
					if late[k] {
						join()
					} else if waiting.Add(-1) == 0 {
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
