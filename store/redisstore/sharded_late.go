package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
)

// # Shards that do not answer at open
//
// A store of instances opens while some of its shards do not answer, as
// long as one does: the node starts and the host CLI writes the threads
// of the shards that answer. A shard that did not answer is "late": its
// Store is made (its client, its batcher) but not set up, and its gate
// holds every call of it (answerHook) until it is set up, as a start
// would have: its shard record checked first, which is only read (and
// written when the store's records are being written for the first
// time: claimInstances), then its library loaded and its webhooks
// recorded, so that nothing is written to an instance in the wrong
// place. A call of a late shard
// tries that first (one attempt at a time; the others wait for it within
// their bound), and so does a goroutine of the Sharded store, from every
// lateRetry to every lateRetryMax while a shard is late, so that a shard
// that comes back is set up whether or not anything calls it; Close
// stops it.
//
// A shard whose record is missing is used only once every shard has
// answered (the first start of a store: the records are written as
// claimInstances writes them, shard 0's last). A shard whose record is
// not what this node's list says (found once it answers) stays closed:
// every call of it answers StoreUnavailable and the cause is logged at
// error level, as a start would have refused it; its record is read
// again at each attempt, so that one put right (SET <prefix>shard k/n,
// as the error says) is used then, with no restart.
//
// The feed: a Follow that starts while a shard is late follows it too,
// from the moment it can subscribe; the shard opens only once every such
// Follow has subscribed to its feed and read where its threads stand
// (its Ready). A reader that reads a thread of the shard once it is open
// therefore misses nothing of it (Store.Follow's contract), and a
// thread's subscribers on the other shards never waited for it.

// lateRetry and lateRetryMax bound how often the Sharded store tries
// to set up its late shards by itself (each failed try is a warn line).
const (
	lateRetry    = 250 * time.Millisecond
	lateRetryMax = 4 * time.Second
)

// shardGate is a late shard's state.
type shardGate struct {
	l    *lateShards
	k    int
	open atomic.Bool // set up and followed: calls pass

	// Guarded by lateShards.mu (the settle in progress writes them).
	setUp bool   // setup succeeded (once its record is this node's)
	err   error  // why it is not set up (the last attempt)
	said  string // the last cause logged

	// Guarded by lateShards.stateMu.
	claimed  bool // its record is this node's: it only waits for the feeds
	unjoined int  // Follow calls that started while it was closed and have not read its feed's start yet
}

// lateShards are the late shards of a Sharded store of instances.
type lateShards struct {
	sh    *Sharded
	names []string
	gates []*shardGate  // one per shard: nil for a shard set up at open
	recs  []shardRecord // one per shard: its record (claimRecords); guarded by mu

	mu   chan struct{} // held by the settle in progress
	last time.Time     // when the last settle ended (guarded by mu)

	stateMu sync.Mutex    // guards the gates' claimed and unjoined, and changed
	changed chan struct{} // closed (and replaced) when a gate opens

	stop context.CancelFunc
	done chan struct{} // closed when the retry goroutine has returned
}

// bypassKey marks the context of the calls a late shard makes to set
// itself up: the gate lets them through. feedKey marks a Follow's that
// started while the shard was late: the gate lets them through once
// the shard is set up and its record is this node's, before it opens,
// which waits for them.
type (
	bypassKey struct{}
	feedKey   struct{}
)

// pass returns nil once the shard is open, after trying to set it up if
// it is not: StoreUnavailable if it cannot be, within Options.Timeout
// (or ctx's deadline, if sooner).
func (g *shardGate) pass(ctx context.Context) error {
	if g.open.Load() || ctx.Value(bypassKey{}) != nil {
		return nil
	}
	feed := ctx.Value(feedKey{}) != nil
	s := g.l.sh.shards[g.k]
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for {
		changed := g.l.watch()
		if g.open.Load() || feed && g.l.claimed(g) {
			return nil
		}
		err := g.l.settle(ctx, g)
		if g.open.Load() {
			return nil
		}
		if err == nil && feed {
			return nil
		}
		if err == nil { // set up and claimed: its feed is being read
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				err = errors.New("its feed is not followed yet")
			}
		}
		var he *chatrelay.Error
		if errors.As(err, &he) && he.Code == chatrelay.StoreUnavailable && he.Err != nil {
			err = he.Err // said once
		}
		return unreachable(fmt.Errorf("redis shard %s: %w", g.l.names[g.k], err))
	}
}

// admit passes s's gate, if it has one: before a call that reads what
// setup sets (Store.hooks) before its first command goes through the
// gate (answerHook), as an append does.
func (s *Store) admit(ctx context.Context) error {
	if s.gate == nil {
		return nil
	}
	return s.gate.pass(ctx)
}

// watch returns a channel closed when a gate next opens.
func (l *lateShards) watch() <-chan struct{} {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	return l.changed
}

// settle tries to set up every late shard, one attempt at a time (a
// caller that finds one in progress waits for it), and answers g's
// state (if g is not nil): nil once it is set up and claimed, else why
// not.
func (l *lateShards) settle(ctx context.Context, g *shardGate) error {
	select {
	case l.mu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.mu }()
	// An attempt that just ended answers for this one: a shard that is
	// down is dialled once per few milliseconds, not once per call.
	if time.Since(l.last) >= 20*time.Millisecond {
		l.attempt(ctx)
		l.last = time.Now()
	}
	if g == nil {
		return nil
	}
	return g.err
}

// attempt is one try at setting up the late shards (l.mu held).
func (l *lateShards) attempt(ctx context.Context) {
	ctx = context.WithValue(ctx, bypassKey{}, true)
	// The records first, which are only read: an instance in the wrong
	// place is refused before anything is written to it (the library,
	// the webhooks' groups). A refused one is read again each time: its
	// record may have been put right.
	claimRecords(ctx, l.sh.shards, l.names, l.recs, func(int) bool { return true })
	for k, g := range l.gates {
		if g == nil || l.claimed(g) {
			continue
		}
		switch r := l.recs[k]; {
		case r.claimed:
			g.err = nil
			if !g.setUp {
				g.err = l.sh.shards[k].setup(ctx)
				g.setUp = g.err == nil
			}
			if g.err == nil {
				l.claim(g)
			}
		case r.err != nil:
			g.err = r.err
		default:
			g.err = unreachable(errors.New("it has no shard record yet, which is written once every shard answers"))
		}
	}
	if ctx.Err() != nil {
		return // the caller gave up, or the store closes: nothing to tell
	}
	for k, g := range l.gates {
		if g == nil || g.err == nil || g.err.Error() == g.said {
			continue
		}
		g.said = g.err.Error()
		log := l.sh.shards[k].log
		if chatrelay.CodeOf(g.err) == chatrelay.StoreUnavailable {
			log.Warn("redis store: a shard is not set up yet; its threads answer 503", "shard", l.names[k], "err", g.err)
		} else {
			log.Error("redis store: a shard is refused; its threads answer 503", "shard", l.names[k], "err", g.err)
		}
	}
}

func (l *lateShards) claimed(g *shardGate) bool {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	return g.claimed
}

// claim marks g's record as this node's: it opens once no Follow waits
// for its feed.
func (l *lateShards) claim(g *shardGate) {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	g.claimed = true
	l.openIfReady(g)
	l.sh.shards[g.k].log.Info("redis store: a shard that did not answer at start is set up; its threads are served", "shard", l.names[g.k])
}

// openIfReady opens g if it is claimed and followed (l.stateMu held).
func (l *lateShards) openIfReady(g *shardGate) {
	if g.claimed && g.unjoined == 0 && !g.open.Load() {
		g.open.Store(true)
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// following counts a Follow call in on the closed gates: it answers the
// shards whose feed the call is to read before they open.
func (l *lateShards) following() []bool {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	late := make([]bool, len(l.gates))
	for k, g := range l.gates {
		if g != nil && !g.open.Load() {
			g.unjoined++
			late[k] = true
		}
	}
	return late
}

// joined says that a Follow call read the start of shard k's feed, or
// ended before it did.
func (l *lateShards) joined(k int) {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	g := l.gates[k]
	g.unjoined--
	l.openIfReady(g)
}

// retry tries to set up the late shards, after lateRetry, then less and
// less often (up to lateRetryMax: a call of a late shard tries at once
// anyway), until every one is open or ctx (the store's Close) ends.
func (l *lateShards) retry(ctx context.Context) {
	defer close(l.done)
	wait := lateRetry
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		open := true
		for _, g := range l.gates {
			open = open && (g == nil || g.open.Load())
		}
		if open {
			return
		}
		actx, cancel := context.WithTimeout(ctx, time.Duration(len(l.gates))*l.sh.shards[0].opt.Timeout)
		l.settle(actx, nil)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wait = min(2*wait, lateRetryMax)
		t.Reset(wait)
	}
}
