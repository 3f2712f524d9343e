package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The feed may be silent for chatrelay.DefaultFeedPing (Store.pingEvery)
// before Follow pings Redis; a pong that does not come within the store's
// timeout (Options.Timeout) counts as a lost connection (a peer that
// vanished without closing it, a connection a NAT or a firewall dropped):
// the node's streams would get nothing meanwhile, so the bound is a few
// seconds, as for any other call.

// maxBackoff bounds the wait between two attempts to subscribe again. An
// attempt while Redis is down costs a refused dial (go-redis logs nothing
// for it), so the bound is short: a node whose own calls do not find Redis
// back first (see answerHook) is live again within it.
const maxBackoff = 250 * time.Millisecond

// Follow implements store.Store. It receives every node's changes (new
// messages, changed messages in their new state, and participants
// changes) through the feed channel, in the order Redis ran them, on a
// connection of its own, and calls fn from the calling goroutine. The
// first call is Batch{Ready: true}, once the subscription is confirmed.
//
// When the connection is lost, Follow subscribes again, backing off up to
// maxBackoff while Redis is unreachable, and at once when any call of the
// store finds Redis answering again. Once subscribed it catches up from the
// store before it hands on anything newer: for every thread whose rev is
// past what Follow last announced (or past the thread's rev when Follow
// started), it calls fn with the messages changed after that, each in its
// current state, in change order, marked Reset only if retention dropped
// some of them meanwhile; and it calls fn with Batch{Participants: true}
// for every thread that has grants. A thread that went away gets a Reset
// batch. If Redis lost its data (a new generation, gen.go), every thread
// Follow knew gets a Reset batch. If the connection stays lost longer than
// Options.ResetAfter, every thread Follow knows gets a Reset batch then,
// so that streams end instead of waiting silently. From the loss until it
// has caught up, FeedLive is false.
// Follow returns nil when ctx is done, and ErrClosed if the store is closed.
func (s *Store) Follow(ctx context.Context, fn func(store.Batch)) error {
	if !s.members.Enter() {
		return ErrClosed
	}
	defer s.members.Leave()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()

	conn := &feedConn{s: s}
	var subErr error
	conn.ps, conn.node, subErr = s.subscribe(ctx)
	defer conn.close()
	defer context.AfterFunc(ctx, conn.close)()

	f := &follower{s: s, fn: fn, announced: make(map[string]int64)}
	// Another call of the store that finds Redis's data lost closes the
	// connection, so that the feed subscribes again and resets its threads.
	s.feedsMu.Lock()
	s.kicks[f] = conn.close
	s.feedsMu.Unlock()
	defer func() {
		s.feedsMu.Lock()
		delete(s.kicks, f)
		s.feedsMu.Unlock()
	}()
	// FeedLive: this call is down until it has subscribed and caught up.
	s.feedsDown.Add(1)
	l := &feedLoop{s: s, f: f, conn: conn, cur: conn.ps, subErr: subErr}
	defer l.setLive(true) // this call no longer counts
	return l.run(ctx)
}

// feedConn is a Follow's subscription: the loop replaces it, a kick or
// the end of Follow closes it.
type feedConn struct {
	s    *Store
	mu   sync.Mutex // guards ps and node
	ps   *redis.PubSub
	node *redis.Client // a cluster shard's: the node subscribed to (nil if none was known)
}

func (c *feedConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ps.Close()
}

// renew subscribes on a fresh connection: it forgets a stale one. It
// returns the failure of a cluster shard's subscription (subscribe).
func (c *feedConn) renew(ctx context.Context) (*redis.PubSub, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ps.Close()
	c.s.reloadSlots()
	var err error
	c.ps, c.node, err = c.s.subscribe(ctx)
	return c.ps, err
}

// feedLoop is the state of a Follow's receive loop; only its goroutine
// uses it.
type feedLoop struct {
	s       *Store
	f       *follower
	conn    *feedConn
	cur     *redis.PubSub // the subscription being read
	backoff time.Duration
	live    bool      // counted live in FeedLive
	synced  bool      // the current connection is subscribed and caught up
	pinged  bool      // a ping is unanswered
	subErr  error     // the current subscription failed before it was sent: subscribe again
	lost    bool      // a loss was logged and not yet followed by a resume
	lostAt  time.Time // when
	// resetSent says the threads were reset during this loss.
	resetSent bool
}

// run receives the feed until ctx is done: nil, or ErrClosed if the
// store is closed.
func (l *feedLoop) run(ctx context.Context) error {
	for {
		if err := l.subErr; err != nil && ctx.Err() == nil {
			l.subErr = nil
			l.resubscribe(ctx, err)
			continue
		}
		wait := l.s.pingEvery
		if l.pinged {
			wait = l.s.opt.Timeout // the pong is a call's answer
		}
		msg, err := l.cur.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			if l.s.closing.Err() != nil {
				return ErrClosed
			}
			return nil
		}
		if err = l.take(ctx, msg, err); err != nil {
			l.resubscribe(ctx, err)
		}
	}
}

// take handles what the connection brought: a confirmed subscription (the
// catch-up), a message of the feed, or a silence (a ping). It returns the
// failure that makes the loop subscribe again, if any.
func (l *feedLoop) take(ctx context.Context, msg any, err error) error {
	if err == nil {
		l.pinged = false
	}
	if err != nil && isTimeout(err) && l.synced && !l.pinged {
		l.pinged = true
		if err = l.cur.Ping(ctx); err == nil {
			return nil
		}
	}
	if err != nil {
		return err
	}
	if sub, ok := msg.(*redis.Subscription); ok && sub.Kind == "sunsubscribe" && sub.Channel == l.s.feed {
		// The cluster moved the shard's slot (a failover, a reshard): its
		// new primary has the channel now.
		return errors.New("the feed's slot moved")
	}
	if sub, ok := msg.(*redis.Subscription); !ok || (sub.Kind != "subscribe" && sub.Kind != "ssubscribe") || sub.Channel != l.s.feed {
		if m, ok := msg.(*redis.Message); ok && l.synced && m.Channel == l.s.feed {
			l.f.deliver(m.Payload)
		}
		return nil
	}
	if l.s.spub {
		if err := l.conn.verify(ctx); err != nil {
			return err
		}
	}
	if err := l.f.sync(ctx); err != nil {
		return err
	}
	if l.lost {
		l.s.log.Info("redis store: feed resumed", "after", time.Since(l.lostAt).Round(time.Millisecond))
		l.lost, l.lostAt, l.resetSent = false, time.Time{}, false
	}
	l.synced, l.backoff = true, 0
	l.setLive(true)
	return nil
}

// setLive counts this Follow in or out of FeedLive's down feeds.
func (l *feedLoop) setLive(v bool) {
	if v != l.live {
		l.live = v
		if v {
			l.s.feedsDown.Add(-1)
		} else {
			l.s.feedsDown.Add(1)
		}
	}
}

// resubscribe follows a failure: the connection failed, went silent, or
// the catch-up failed. A new subscription (never the old connection, which
// may be dead without being closed, or still subscribed after an error
// reply) is what brings the confirmation that starts the catch-up. It
// waits a backoff first, or until a call of the store finds Redis
// answering, and resets every known thread once the loss lasts past
// Options.ResetAfter.
func (l *feedLoop) resubscribe(ctx context.Context, err error) {
	s := l.s
	l.setLive(false)
	if !l.lost {
		s.log.Warn("redis store: feed subscription lost; resubscribing", "err", err)
		l.lost, l.lostAt = true, time.Now()
	}
	// The first call that finds Redis answering wakes the wait below.
	wake := s.wakeup()
	s.down.Store(true)
	l.cur, l.subErr = l.conn.renew(ctx)
	l.synced, l.pinged = false, false
	if s.onLost != nil {
		s.onLost(ctx)
	}
	wait := min(max(2*l.backoff, 50*time.Millisecond), maxBackoff)
	l.backoff = wait
	if ra := s.opt.ResetAfter; ra > 0 && !l.resetSent {
		if left := ra - time.Since(l.lostAt); left <= 0 {
			s.log.Warn("redis store: feed still lost; resetting every known thread", "after", ra)
			l.f.resetAll()
			l.resetSent = true
		} else {
			wait = min(wait, left)
		}
	}
	t := time.NewTimer(wait)
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	}
	t.Stop()
}

// kickFeeds makes every Follow of the store but except (nil: none)
// subscribe again, and so compare the generation.
func (s *Store) kickFeeds(except *follower) {
	s.feedsMu.Lock()
	defer s.feedsMu.Unlock()
	for f, kick := range s.kicks {
		if f != except {
			kick()
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// follower is the state of one Follow call; only its goroutine uses it.
type follower struct {
	s         *Store
	fn        func(store.Batch)
	ready     bool             // Ready was sent
	gen       string           // the generation id when the feed last caught up
	announced map[string]int64 // the newest rev handed to fn, per thread
	base      map[string]int64 // each thread's rev when the feed was registered (or Redis lost its data)
}

// sync runs once the feed's subscription is confirmed: the first time it
// records where every thread stood and sends Ready; after a reconnection it
// catches up from the store.
func (f *follower) sync(ctx context.Context) error {
	idx, g, err := f.s.threadIndex(ctx)
	if err != nil {
		return err
	}
	g = f.s.checkGen(ctx, g, f)
	if !f.ready {
		f.base, f.gen = idx, g.id
		f.seeAll(idx)
		f.ready = true
		f.fn(store.Batch{Ready: true})
		return nil
	}
	if g.id != f.gen {
		return f.lostData(ctx, idx, g)
	}
	for thread, newest := range idx {
		from, known := f.announced[thread]
		if !known {
			from = f.base[thread]
		}
		if newest < from {
			// The store went backwards: what subscribers hold is not in it.
			f.s.log.Warn("redis store: a thread is older than what the feed announced; resetting it", "thread", thread)
			f.fn(store.Batch{Thread: thread, Reset: true})
			f.announced[thread] = newest
			continue
		}
		if newest == from {
			continue
		}
		if err := f.catchUp(ctx, thread, from); err != nil {
			return err
		}
	}
	// A thread that went away (the sweep removed it): its subscribers hold
	// messages that are gone.
	for thread := range f.announced {
		if _, ok := idx[thread]; !ok {
			f.fn(store.Batch{Thread: thread, Reset: true})
			delete(f.announced, thread)
		}
	}
	for thread := range f.base {
		if _, ok := idx[thread]; !ok {
			if _, announced := f.announced[thread]; !announced {
				f.fn(store.Batch{Thread: thread, Reset: true})
			}
			delete(f.base, thread)
		}
	}
	return f.participantsChanged(ctx)
}

// catchUp hands on thread's changes after from (each changed message in
// its current state, in change order), marked Reset if retention dropped
// a message changed after from.
func (f *follower) catchUp(ctx context.Context, thread string, from int64) error {
	ctx, cancel := f.s.bound(ctx)
	defer cancel()
	p, _, err := f.s.changes(ctx, thread, from, 0)
	if err != nil {
		return err
	}
	if from == 0 { // the whole thread, oldest first: also in change order
		slices.SortFunc(p.Messages, func(a, b store.Entry) int { return cmp.Compare(a.Rev, b.Rev) })
	}
	if p.Cursor > f.announced[thread] {
		f.announced[thread] = p.Cursor
		f.s.see(p.Cursor)
	}
	if len(p.Messages) == 0 && !p.Reset {
		return nil
	}
	f.fn(store.Batch{Thread: thread, Messages: p.Messages, Reset: p.Reset})
	return nil
}

// participantsChanged tells fn that the participants of every thread that
// has grants, and the agent keys, may have changed while the feed was lost.
func (f *follower) participantsChanged(ctx context.Context) error {
	f.fn(store.Batch{Thread: store.AgentsTopic, Agents: true}) // and the agent keys
	ctx, cancel := f.s.bound(ctx)
	defer cancel()
	threads, err := f.s.rdb.HVals(ctx, f.s.gindex).Result()
	if err != nil && err != redis.Nil {
		return f.s.unavailable("participants", err)
	}
	slices.Sort(threads)
	for _, thread := range slices.Compact(threads) {
		if chatrelay.ValidThread(thread) {
			f.fn(store.Batch{Thread: thread, Participants: true})
		}
	}
	return nil
}

// lostData handles a new generation: Redis lost every message the feed
// knew. Each thread the feed knew gets a Reset batch: its subscribers
// resume from the store, which tells them to reset too (Since). A thread
// that only has messages of the new data set is caught up from its start.
func (f *follower) lostData(ctx context.Context, idx map[string]int64, g generation) error {
	known := make(map[string]bool, len(f.base)+len(f.announced))
	for thread := range f.base {
		known[thread] = true
	}
	for thread := range f.announced {
		known[thread] = true
	}
	for thread := range known {
		f.fn(store.Batch{Thread: thread, Reset: true})
	}
	f.s.log.Warn("redis store: feed reset every thread it knew: Redis lost its data", "threads", len(known))
	f.base, f.announced, f.gen = make(map[string]int64, len(idx)), make(map[string]int64), g.id
	for thread, newest := range idx {
		if known[thread] {
			f.base[thread] = newest // its subscribers read it from the store
			continue
		}
		if err := f.catchUp(ctx, thread, 0); err != nil {
			return err
		}
	}
	f.seeAll(idx)
	return f.participantsChanged(ctx)
}

func (f *follower) seeAll(idx map[string]int64) {
	for _, e := range idx {
		f.s.see(e)
	}
}

// resetAll gives every thread the feed knows (those that existed when it
// started and those it announced since) a Reset batch. A thread created
// meanwhile that has no message yet has nothing to resume.
func (f *follower) resetAll() {
	for thread := range f.announced {
		f.fn(store.Batch{Thread: thread, Reset: true})
	}
	for thread := range f.base {
		if _, ok := f.announced[thread]; !ok {
			f.fn(store.Batch{Thread: thread, Reset: true})
		}
	}
}

// deliver hands on one feed message: a change, "<thread> <the thread's
// rev before it> <the newest epoch or rev retention dropped> <JSON>" (the
// message's v1 JSON if it has no v2 state, else its v2 object);
// "<thread> P": the thread's participants record changed; or "<thread> X
// <v2 JSON>": retention dropped an interaction while pending, closed
// expired (store.Batch.Closed: no change of the thread, no cursor moves).
func (f *follower) deliver(payload string) {
	if payload == "A" { // the agent keys changed (agents.go)
		f.fn(store.Batch{Thread: store.AgentsTopic, Agents: true})
		return
	}
	thread, rest, ok1 := strings.Cut(payload, " ")
	if ok1 && rest == "P" && chatrelay.ValidThread(thread) {
		f.fn(store.Batch{Thread: thread, Participants: true})
		return
	}
	if js, ok := strings.CutPrefix(rest, "X "); ok1 && ok && chatrelay.ValidThread(thread) {
		e, err := entryOfJSON(js)
		if err != nil {
			f.s.log.Error("redis store: feed message does not parse; ignored", "thread", thread)
			return
		}
		f.fn(store.Batch{Thread: thread, Closed: []store.Entry{e}})
		return
	}
	prevS, rest, ok2 := strings.Cut(rest, " ")
	trimS, js, ok3 := strings.Cut(rest, " ")
	prev, err1 := strconv.ParseInt(prevS, 10, 64)
	trimmed, err2 := strconv.ParseInt(trimS, 10, 64)
	e, err3 := entryOfJSON(js)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || err3 != nil {
		f.s.log.Error("redis store: feed message does not parse; ignored", "thread", thread)
		return
	}
	a, known := f.announced[thread]
	if known && e.Rev <= a {
		return // a catch-up already handed it on
	}
	if !known && e.Rev <= f.base[thread] {
		return // stored before the feed's baseline was read: subscribers read it from the store
	}
	f.announced[thread] = e.Rev
	f.s.see(e.Rev)
	f.fn(store.Batch{Thread: thread, Messages: []store.Entry{e}, Reset: known && (prev > a || trimmed > a)})
}

// subscribe subscribes to the feed: SUBSCRIBE, or on a Redis Cluster
// shard SSUBSCRIBE on the node that the client's slot map says is the
// primary of the shard's slot (the scripts SPUBLISH there), which verify
// then checks. The SSUBSCRIBE's connection (its dial, its handshake, the
// command's write) is bounded by the store timeout, as a call is, and its
// failure returned, so that the loop subscribes again at once with a
// slot map reloaded meanwhile: a primary that stalled (SIGSTOP, a frozen
// VM) while its replica took over its slot would otherwise hold each new
// subscription that the slot map still sends to it for go-redis's dial
// timeout (5 s), twice (the subscribe, then the first receive).
func (s *Store) subscribe(ctx context.Context) (*redis.PubSub, *redis.Client, error) {
	if !s.spub {
		return s.rdb.Subscribe(ctx, s.feed), nil, nil
	}
	cc := s.rdb.(*redis.ClusterClient)
	node, err := cc.MasterForKey(ctx, s.feed)
	if err != nil {
		return cc.SSubscribe(ctx, s.feed), nil, nil
	}
	ps := node.SSubscribe(ctx) // no channel: no connection yet
	sctx, cancel := s.bound(ctx)
	defer cancel()
	return ps, node, ps.SSubscribe(sctx, s.feed)
}

// verify checks, once a cluster shard's subscription is confirmed, that
// its node is the primary serving the shard's slot: a command of the slot
// sent to it is answered, not redirected. Redis accepts SSUBSCRIBE on a
// replica, and a primary demoted by a failover is one before its new
// primary counts it in its shard: it would hear nothing for a while. A
// node that is verified and later loses the slot ends the subscription
// (sunsubscribe), so the feed subscribes again.
func (c *feedConn) verify(ctx context.Context) error {
	c.mu.Lock()
	node := c.node
	c.mu.Unlock()
	cc := c.s.rdb.(*redis.ClusterClient)
	if node == nil {
		cc.ReloadState(ctx)
		return errors.New("no primary known for the feed's slot")
	}
	vctx, cancel := c.s.bound(ctx)
	defer cancel()
	if err := node.Exists(vctx, c.s.index).Err(); err != nil {
		cc.ReloadState(ctx)
		return fmt.Errorf("the feed's node does not serve its slot: %w", err)
	}
	return nil
}
