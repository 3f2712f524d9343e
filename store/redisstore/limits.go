package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// RateLimiter is the rate windows of the contract counted in Redis, so
// that every node shares them: at most perThread accepted posts per thread
// and perIP per client IP in any sliding window. It implements
// chatrelay.RateLimiter and is safe for concurrent use.
//
// Each window is a list of the times of the posts it counted, checked
// and added to in one script with both keys (takeScript); the keys share
// the hash tag {rl}, so that script also runs on a cluster. The times are
// those of the Redis that holds the window (TIME, in the script), not the
// node's: nodes whose clocks disagree count each window on one clock, so
// that a window passes at most its limit and its wait is at most the
// window, whichever nodes count its posts. The scripts of a post send no
// time (the node's clock still stamps its message: Store.Append).
//
// On shards that are Redis instances (Sharded.NewRateLimiter), a thread's
// window is on the thread's shard and an address's on the shard its hash
// picks, so that the windows' work is spread as the threads' is, and a
// post's append counts it in its thread's window in the same script. A
// post whose two windows are on two shards is counted in the address's
// first, then in the thread's (Take, Sharded.AppendLimited): in both or,
// refused by either, in neither; each is counted on its own shard's clock
// (as each window is on one Redis's).
type RateLimiter struct {
	s                *Store
	shards           []*Store // the shards the windows are placed on (nil: all on s)
	perThread, perIP int
	window           time.Duration
	// clock, in tests only, is the windows' clock instead of Redis's,
	// so that a test can move it.
	clock func() time.Time
}

// NewRateLimiter returns a limiter of windows w (zero fields take the
// defaults) on s's Redis.
func NewRateLimiter(s *Store, w chatrelay.Windows) *RateLimiter {
	w = w.WithDefaults()
	return &RateLimiter{s: s, perThread: w.PerThread, perIP: w.PerIP, window: w.Window}
}

// Take counts one post against thread and ip if both are under their
// windows. Over a window it returns *chatrelay.Error RateLimited with the wait;
// if Redis cannot be reached, StoreUnavailable. settle(false) uncounts the
// post (it was then not stored); settle(true) does nothing: the places a
// post holds meanwhile are not told apart from stored ones across nodes.
func (l *RateLimiter) Take(ctx context.Context, thread, ip string) (settle func(stored bool), err error) {
	t := l.take(thread, ip)
	if t.split() {
		// The address's window, then the thread's, each on its shard; a
		// post the thread's refuses is taken out of the address's.
		if err := t.part(1).count(ctx); err != nil {
			if chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
				return nil, err
			}
			t = t.addressDown()
		}
	}
	if t.split() {
		if err := t.part(0).count(ctx); err != nil {
			if chatrelay.CodeOf(err) == chatrelay.RateLimited {
				t.undo(context.WithoutCancel(ctx))
			} else {
				l.s.undoLater(t) // not waiting on a Redis that may be stalled
			}
			return nil, err
		}
	} else if err := t.count(ctx); err != nil {
		return nil, err
	}
	var once sync.Once
	return func(stored bool) {
		if !stored {
			once.Do(func() { t.undo(context.WithoutCancel(ctx)) })
		}
	}, nil
}

// count runs takeScript on t's windows (on one Redis).
func (t *rateTake) count(ctx context.Context) error {
	s := t.at()
	tctx, cancel := s.bound(ctx)
	defer cancel()
	args := make([]any, 0, 5)
	args = append(args, t.l.clockArg(), t.l.window.Milliseconds(), t.id)
	for _, w := range t.w {
		args = append(args, w.limit)
	}
	wait, err := s.runScript(tctx, takeScript, t.keys(), args...).Int64()
	if err != nil {
		return s.unavailable("rate limit", err)
	}
	if wait > 0 {
		return t.l.refusal(wait)
	}
	return nil
}

// refusal is the error of a post over a window, to wait ms.
func (l *RateLimiter) refusal(wait int64) error {
	return &chatrelay.Error{Code: chatrelay.RateLimited, Retry: time.Duration(wait) * time.Millisecond,
		Message: fmt.Sprintf("rate limit: at most %d posts per thread and %d per client address every %s", l.perThread, l.perIP, l.window)}
}

// clockArg is the scripts' argument for the windows' clock: "" (Redis's
// own), or l.clock's time (tests).
func (l *RateLimiter) clockArg() string {
	if l.clock == nil {
		return ""
	}
	return strconv.FormatInt(l.clock().UnixMilli(), 10)
}

// rateTake is one post's count in the windows of a thread and an
// address (or in one of them: part): their keys, where each is, and the
// post's id. Its entry in a window is "<time ms> <id>", the time on the
// clock of the Redis that holds the window (luaRate): the id alone
// finds it again (undo).
type rateTake struct {
	l  *RateLimiter
	w  []rateWindow // the thread's window first
	id string
	// take's two windows, which w slices: held in the take's own
	// allocation (take runs at every post).
	two [2]rateWindow
}

// rateWindow is one window a post is counted in.
type rateWindow struct {
	key   string
	at    *Store // the Redis that holds it
	limit int
}

func (l *RateLimiter) take(thread, ip string) *rateTake {
	ts, as := l.s, l.s
	if n := len(l.shards); n > 1 {
		a := shardIndex(ip, n)
		ts, as = l.shards[shardIndex(thread, n)], l.shards[a]
		if as.down.Load() {
			// A call to it failed (a post's count, a check's write, its
			// feed) and none answered since: the address's window on the
			// thread's shard at once, as addressDown does after trying it,
			// rather than a refused dial, or a stall's whole store timeout,
			// at every post until a check (/readyz) ran. Its first answer
			// (a call of its threads, its feed, a check) sends the posts
			// back to it.
			as = ts
		}
	}
	// Both keys in one string, each a slice of it: one allocation.
	keys := ts.limits + "{rl}:tl:" + thread + as.limits + "{rl}:il:" + ip
	n := len(ts.limits) + len("{rl}:tl:") + len(thread)
	t := &rateTake{l: l, id: randomHex(8), two: [2]rateWindow{
		{key: keys[:n], at: ts, limit: l.perThread},
		{key: keys[n:], at: as, limit: l.perIP},
	}}
	t.w = t.two[:]
	return t
}

// addressDown is t with its address's window on the thread's shard, for
// a post whose address's shard (t.part(1)) did not answer: the post is
// counted there meanwhile rather than refused 503, which one address in
// N met on every thread while one shard of N was down. Every node counts
// the address's posts to the threads of a shard in one window on it, so
// the address's limit then holds per shard. An entry the failed count
// may have made (a stall, not a refused connection) is left: one post
// more in one window, gone with it, and no undo sent to a shard that
// does not answer at each post. Once a check found the shard down, the
// posts do not try it until it answers again (take).
func (t *rateTake) addressDown() *rateTake {
	a, ts := t.part(1), t.at()
	return &rateTake{l: t.l, id: t.id, w: []rateWindow{
		t.w[0],
		{key: ts.limits + "{rl}:il:" + strings.TrimPrefix(t.w[1].key, a.at().limits+"{rl}:il:"), at: ts, limit: t.w[1].limit},
	}}
}

// split reports whether t's windows are on two Redis.
func (t *rateTake) split() bool { return len(t.w) == 2 && t.w[0].at != t.w[1].at }

// part is t counted in its i-th window alone.
func (t *rateTake) part(i int) *rateTake {
	return &rateTake{l: t.l, id: t.id, w: t.w[i : i+1]}
}

// at is the Redis of t's (first) window.
func (t *rateTake) at() *Store { return t.w[0].at }

func (t *rateTake) keys() []string {
	keys := make([]string, len(t.w))
	for i, w := range t.w {
		keys[i] = w.key
	}
	return keys
}

// undo takes the post's entry out of its windows (undoScript, which
// finds it by t's id), within chatrelay.DefaultStoreTimeout unless ctx
// ends first.
func (t *rateTake) undo(ctx context.Context) {
	if t.split() {
		t.part(0).undo(ctx)
		t.part(1).undo(ctx)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, chatrelay.DefaultStoreTimeout)
	defer cancel()
	if err := undoScript.Run(ctx, t.at().rdb, t.keys(), t.id).Err(); err != nil {
		t.l.s.log.Warn("redis rate limit: undo", "err", err)
	}
}

// undoLater undoes t in the background, owned by the store (Close
// ends and waits for it): the post that failed is answered at once, as
// when its Take's undo came after a failed append, without waiting on
// a Redis that may be stalled.
func (s *Store) undoLater(t *rateTake) {
	s.inBackground(func() { t.undo(s.closing) })
}

// inBackground runs f in a goroutine the store owns (members: Close ends
// and waits for it) and its tests wait for (later); not at all once the
// store is closing.
func (s *Store) inBackground(f func()) {
	if !s.members.Enter() {
		return
	}
	s.later.Add(1)
	go func() {
		defer s.members.Leave()
		defer s.later.Done()
		f()
	}()
}

// settleLater settles, in the background (owned by s, a's store), the
// address's count a of a post whose append failed without a definite
// answer (StoreUnavailable): the append's script counts the post in its
// thread's window (th) and keeps that entry only if it stored the post,
// so a is taken out if th's window does not hold the post, and left if
// it does (the post is stored: it counts) or if the thread's shard does
// not say (one post more in one window, gone with it, as addressDown's).
// An append still on its way to the thread's shard when this looks (a
// stalled link that delivers it later) is taken out all the same.
func (s *Store) settleLater(th, a *rateTake) {
	s.inBackground(func() {
		ctx, cancel := context.WithTimeout(s.closing, chatrelay.DefaultStoreTimeout)
		defer cancel()
		held, err := heldScript.Run(ctx, th.at().rdb, th.keys(), th.id).Int()
		if err != nil {
			s.log.Warn("redis rate limit: whether a failed append stored its post, left counted", "err", err)
			return
		}
		if held == 0 {
			a.undo(s.closing)
		}
	})
}

// AppendLimited is lim.Take(ctx, thread, ip) and, if the post is under the
// windows, Append(ctx, thread, m), in one script (one Redis round trip
// instead of two), with the same answers: a replay of a stored client_id
// first (counted in no window, even a full one), then RateLimited, then
// the append's own. A post that is refused or not stored counts in no
// window. It does so when lim is a RateLimiter on this store (one Redis:
// the windows' keys and the thread's are on it) and m is neither a
// participant's post nor one with attachments, which read the thread
// before their script; otherwise it does nothing and answers done false,
// and the caller takes and appends as two calls.
func (s *Store) AppendLimited(ctx context.Context, lim chatrelay.RateLimiter, thread, ip string, m store.NewMessage) (e store.Entry, done bool, err error) {
	l, ok := lim.(*RateLimiter)
	if !ok || l.s != s || l.shards != nil || s.spub || m.Participant != "" || len(m.Attachments) > 0 {
		return store.Entry{}, false, nil
	}
	e, err = s.appendRated(ctx, thread, m, l.take(thread, ip))
	return e, true, err
}

// StreamLimiter bounds the open streams per thread and per client IP, and
// the participants' share of a thread's streams, across every node. It
// implements chatrelay.StreamLimiter and is safe for concurrent use.
//
// Each open stream holds a lease: a member of the thread's and the IP's
// sorted sets (hash tag {sl}), and of the thread's participants' set for a
// participant's stream, whose score is its expiry on Redis's clock.
// Acquire drops expired leases and counts the rest, in one script. This
// node renews all its leases every lease/3, one script per 512 leases and
// one ZADD per set (renewScript),
// so a node that crashed stops renewing and its streams are forgotten
// within one lease period. A release while Redis is unreachable is not
// lost either: the lease is no longer renewed and expires.
type StreamLimiter struct {
	s     *Store
	lim   chatrelay.StreamLimits
	lease time.Duration
	node  string // prefix of this limiter's lease members

	mu   sync.Mutex // guards live and seq
	live map[uint64]streamLease
	seq  uint64

	stop context.CancelFunc
}

// streamLease is one stream's member of its sets: the thread's, the IP's
// and, for a participant's stream, the thread's participants'.
type streamLease struct {
	keys   []string
	member string
}

// NewStreamLimiter returns a limiter of lim (zero fields take the
// defaults) on s's Redis, each lease lasting lease (chatrelay.DefaultStreamLease if zero)
// unless renewed. It starts the renewal goroutine, which Close or the
// Store's Close stops.
func NewStreamLimiter(s *Store, lim chatrelay.StreamLimits, lease time.Duration) *StreamLimiter {
	lim = lim.WithDefaults()
	if lease <= 0 {
		lease = chatrelay.DefaultStreamLease
	}
	l := &StreamLimiter{s: s, lim: lim, lease: max(lease, 30*time.Millisecond),
		node: randomHex(8), live: make(map[uint64]streamLease)}
	ctx, cancel := context.WithCancel(s.closing)
	l.stop = cancel
	if s.members.Enter() {
		go l.run(ctx)
	}
	return l
}

// Close stops renewing this node's leases; they expire within one lease
// period unless released first. It does not wait for Redis.
func (l *StreamLimiter) Close() error {
	l.stop()
	return nil
}

// Acquire counts one open stream, or returns *chatrelay.Error TooManyStreams (with
// Retry) past a limit, or StoreUnavailable. release must be called once
// when the stream ends; later calls do nothing.
func (l *StreamLimiter) Acquire(ctx context.Context, thread, ip string, holder chatrelay.StreamHolder) (release func(), err error) {
	l.mu.Lock()
	l.seq++
	seq := l.seq
	l.mu.Unlock()
	ls := streamLease{
		keys:   []string{l.s.limits + "{sl}:t:" + thread, l.s.limits + "{sl}:i:" + ip},
		member: l.node + ":" + strconv.FormatUint(seq, 10),
	}
	args := []any{ls.member, l.lease.Milliseconds(), l.lim.PerThread, l.lim.PerIP}
	if holder == chatrelay.ParticipantStream {
		ls.keys = append(ls.keys, l.s.limits+"{sl}:p:"+thread)
		args = append(args, l.lim.Participants())
	}
	actx, cancel := l.s.bound(ctx)
	defer cancel()
	ok, err := acquireScript.Run(actx, l.s.rdb, ls.keys, args...).Int64()
	if err != nil {
		return nil, l.s.unavailable("stream limit", err)
	}
	if ok != 1 {
		return nil, l.lim.Refusal()
	}
	// Renewed from now on; the script's lease lasts until the next renewal.
	l.mu.Lock()
	l.live[seq] = ls
	l.mu.Unlock()
	// The release keeps nothing of ctx: a request's context reaches its
	// connection's buffers and headers, which an open stream would hold
	// for its whole life (about 12 KiB a stream).
	var once sync.Once
	return func() { once.Do(func() { l.forget(seq, ls) }) }, nil
}

// forget stops renewing a lease and removes it from Redis.
func (l *StreamLimiter) forget(seq uint64, ls streamLease) {
	l.mu.Lock()
	delete(l.live, seq)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), chatrelay.DefaultStoreTimeout)
	defer cancel()
	l.remove(ctx, []streamLease{ls})
}

// remove takes leases out of their sets. It is a plain pipeline, not a
// MULTI: a full Redis (maxmemory, noeviction) refuses every MULTI but
// still takes ZREM, and a lease it kept would hold its stream's place for
// a whole lease after the stream failed.
func (l *StreamLimiter) remove(ctx context.Context, ls []streamLease) {
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	// No WAIT (replicas.go): a lease a failover brings back expires.
	_, err := l.s.rdb.Pipelined(noWait(ctx), func(p redis.Pipeliner) error {
		for _, x := range ls {
			for _, k := range x.keys {
				p.ZRem(ctx, k, x.member)
			}
		}
		return nil
	})
	if err != nil {
		l.s.log.Warn("redis stream limit: release (the lease will expire)", "err", err)
	}
}

func (l *StreamLimiter) run(ctx context.Context) {
	defer l.s.members.Leave()
	t := time.NewTicker(l.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.renew(ctx)
		}
	}
}

// renew extends every live lease of this node. A lease released while the
// renewal ran may have been added back by it: it is removed again.
func (l *StreamLimiter) renew(ctx context.Context) {
	l.mu.Lock()
	snap := make(map[uint64]streamLease, len(l.live))
	for k, v := range l.live {
		snap[k] = v
	}
	l.mu.Unlock()
	if len(snap) == 0 {
		return
	}
	// The members of each set, renewed together: a thread's streams share
	// its set, and an address's (often one for many streams) its own.
	sets := make(map[string][]string)
	var order []string
	for _, ls := range snap {
		for _, k := range ls.keys {
			if _, ok := sets[k]; !ok {
				order = append(order, k)
			}
			sets[k] = append(sets[k], ls.member)
		}
	}
	const chunk = 512 // members per script
	keys := make([]string, 0, chunk)
	args := make([]any, 0, 1+2*chunk)
	members := 0
	flush := func() {
		if len(keys) == 0 {
			return
		}
		rctx, cancel := l.s.bound(ctx)
		err := renewScript.Run(rctx, l.s.rdb, keys, args...).Err()
		cancel()
		if err != nil && ctx.Err() == nil {
			l.s.log.Warn("redis stream limit: renew leases", "err", err)
		}
		keys, args, members = keys[:0], args[:0], 0
	}
	for _, k := range order {
		for ms := sets[k]; len(ms) > 0; {
			if len(args) == 0 {
				args = append(args, l.lease.Milliseconds())
			}
			part := ms[:min(len(ms), chunk-members)]
			ms = ms[len(part):]
			keys = append(keys, k)
			args = append(args, len(part))
			for _, m := range part {
				args = append(args, m)
			}
			if members += len(part); members == chunk {
				flush()
			}
		}
	}
	flush()
	var gone []streamLease
	l.mu.Lock()
	for k, v := range snap {
		if _, ok := l.live[k]; !ok {
			gone = append(gone, v)
		}
	}
	l.mu.Unlock()
	if len(gone) > 0 {
		l.remove(ctx, gone)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
