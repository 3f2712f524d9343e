package transport

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webpush"
)

// Push delivery (contract Part 5). Run hands each batch of the store's
// feed to the pusher (note), after the write and whoever wrote it (this
// server, the host CLI in another process, another node), without ever
// waiting: a change that finds the queue full, and the changes a feed's
// Reset says may have been missed, are read again from the store once
// the queue has room (pushcatchup.go).
// A fixed set of workers, started and waited for by Run, takes each
// change: it is pushed if it is an interaction that opens or closes, or a
// message hermes posts; the node that claims it in the store (ClaimPush:
// a lease, with the change journaled until settled) sends it to the
// thread's subscriptions that want it. Pushes stay out of the posts' way:
// a push's CPU work (encryption, signing and the write of its request, ~250 µs) is done under a turn of
// the background lane it shares with uploads (background, see do), so
// pushes and uploads together never take more than one fewer P than
// GOMAXPROCS however many are due at once, and its answer is then awaited on its own
// (at most pushInFlight at once, over the push client's connections:
// one HTTP/2 connection per push service origin where it offers HTTP/2).
// A push service's 429 or 5xx (or no answer) is tried again, at most
// pushAttempts times within pushWindow, honouring Retry-After, by one
// goroutine that holds the retries in time order; 404 and 410 delete the
// subscription. Every outcome is counted in chatrelay_push_total{result}.

const (
	pushAttempts  = chatrelay.DefaultPushAttempts
	pushWindow    = chatrelay.DefaultPushWindow
	pushReplyTTL  = int(chatrelay.DefaultPushReplyTTL / time.Second)
	pushClaimOpen = chatrelay.DefaultPushClaim
)

// pushClaimClosed is a closed interaction's claim: it outlives the
// longest deadline, so that a later change of the message (a reaction)
// does not push "closed" again.
var pushClaimClosed = time.Duration(chatrelay.LimitApprovalTime.Max)*time.Second + 3*time.Hour

// pushInFlight bounds the pushes sent and not yet answered, of every
// push service: a worker with more to send waits for one to end.
const pushInFlight = 64

// pushHandoverRead bounds a stop's reads and claims of what its
// catch-ups had not queued (handOver); pushHandoverWrite the handover's
// write, after them.
const (
	pushHandoverRead  = 2 * time.Second
	pushHandoverWrite = 5 * time.Second
)

// pushWaiting bounds the pushes waiting behind another to the same
// subscription (start), of every subscription.
const pushWaiting = 4096

// pushBackoff is the wait before each retry (at least Retry-After).
var pushBackoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 5 * time.Minute}

// The results counted in chatrelay_push_total.
const (
	pushSent     = "sent"     // the push service took it (2xx)
	pushRetried  = "retried"  // 429, 5xx or no answer: tried again later
	pushGone     = "gone"     // 404 or 410: the subscription is deleted
	pushRejected = "rejected" // another 4xx, or a 3xx (never followed): not tried again
	pushFailed   = "failed"   // no attempt left within the window
	pushBlocked  = "blocked"  // the endpoint now resolves to an address the guard refuses
	pushDropped  = "dropped"  // the claim could not be made, or its handover was too old
	pushRevoked  = "revoked"  // a participant's or a device's subscription whose grant ended: deleted, not sent
	// an opening push (a retry, or a first attempt its closing change
	// overtook) whose interaction closed since: not sent (after the
	// closing push, with its Topic, it would replace it)
	pushSuperseded = "superseded"
)

// pusher sends the pushes of one Server.
type pusher struct {
	s           *Server
	st          store.Push
	guard       *webpush.Guard
	sender      *webpush.Sender
	contact     string
	workers     int
	backoff     []time.Duration
	queue       chan pushTask
	retry       chan pushTask // to the retry goroutine
	catchUps    *catchUps     // what the feed may have missed (pushcatchup.go)
	flying      chan struct{} // held by each push in flight (pushInFlight)
	closedMu    sync.Mutex
	closed      map[string]time.Time // interaction id → when this node saw it close (kept pushWindow)
	closedSwept time.Time            // when closed was last rid of what is past pushWindow
	// openTo are the recipients of each pending interaction's opening
	// (thread/interaction id), as this node read them (every node reads
	// them, whichever sends it): a closing of an interaction retention
	// dropped with its thread finds no subscription left, and is sent
	// to these (openedTo). Guarded by closedMu; at most pushOpenTo.
	openTo      map[string]openedTo
	openToBytes int // about the bytes openTo holds (pushOpenToBytes)

	noSend    bool          // PushConfig.NoSend: the routes only
	owner     string        // this node's token in its claims (ClaimPush)
	lease     time.Duration // of its claims, renewed while they are worked on
	workMu    sync.Mutex
	working   map[string]*pushChange // the changes this node claimed and has not settled, by claim id
	left      []pushLeft             // the changes this node was to send when it stopped, not claimed: handed over too
	watch     chan *pushWatch        // to the watch goroutine: changes another node claimed
	takeovers prometheus.Counter

	busyMu  sync.Mutex
	busy    map[string][]*pushJob // thread/subscription id with a push in flight → the pushes waiting behind it
	waiting int                   // of every subscription (pushWaiting)
	sends   sync.WaitGroup
	total   *prometheus.CounterVec
	claims  *prometheus.CounterVec // won: "true" (this node sends the change's pushes) or "false" (another does)

	keyMu   sync.Mutex // guards keyRaw, key, keyRead
	keyRaw  []byte
	key     *webpush.VAPID
	keyRead time.Time // when the store's key was last read
}

// pushTask is one change to push (entry), one push to send again (job),
// or a change whose claim another node let lapse (watch).
type pushTask struct {
	thread string
	entry  store.Entry
	job    *pushJob
	watch  *pushWatch
	handed bool     // the change was handed over by a server that stopped (takeHandover)
	owed   pushOwed // handed or journaled: what is still owed of it
	// journaled: the change was in the store's push journal at the start
	// (takeHandover): claimed by a server that was killed, or by a node
	// that runs (its claim is then not won, and watched)
	journaled bool
}

// pushOwed is what a server that stopped still owed of a change it
// handed over.
type pushOwed struct {
	only  []string  // the subscriptions (ids) still owed its push; nil: every one
	since time.Time // when a server first took it to send: its pushes' window of retries starts then; zero: now
	// caught: the change was read again from the store by a catch-up
	// (pushcatchup.go), and this node has not claimed it: it may have
	// been pushed already, so a stop hands it over only if its claim is
	// won then (handOver)
	caught bool
	// dropped: an interaction's closing that retention dropped pending
	// (Batch.Closed); with its thread, the subscriptions are gone too,
	// and its recipients are those of its opening (openedTo)
	dropped bool
}

// pushLeft is a change this node was to send, unclaimed when it stopped
// (leave): it is handed over with the claimed ones (handOver).
type pushLeft struct {
	thread string
	m      chatrelay.Message
	owed   pushOwed
}

// leave keeps a change this node was to send and did not claim because
// it stopped (ctx was done), for handOver.
func (ps *pusher) leave(thread string, m chatrelay.Message, owed pushOwed) {
	ps.workMu.Lock()
	defer ps.workMu.Unlock()
	ps.left = append(ps.left, pushLeft{thread, m, owed})
}

// pushChange is a change whose pushes this node claimed: settled (in the
// store, SettlePush) once each of them had its outcome; until then the
// node renews its claim.
type pushChange struct {
	id     string        // the claim's
	keep   time.Duration // how long the settled claim is kept
	thread string        // and its message: handed over if the server stops first
	m      chatrelay.Message
	since  time.Time // when it was first taken to send (pushOwed)
	owedMu sync.Mutex
	owed   map[string]bool // the subscriptions (ids) whose push has no outcome yet: settled when none is left, handed over if the server stops first
}

// owedIDs are the subscriptions still owed c's push, in no order.
func (c *pushChange) owedIDs() []string {
	c.owedMu.Lock()
	defer c.owedMu.Unlock()
	return slices.Collect(maps.Keys(c.owed))
}

// pushWatch is a change another node claimed: once the claim's lease
// could have lapsed (due), this node claims it again, and sends its
// pushes if it wins (the other node stopped before it settled them).
type pushWatch struct {
	thread string
	m      chatrelay.Message
	typ    string
	id     string
	keep   time.Duration
	due    time.Time
	until  time.Time // after it, the change is no longer watched
	size   int       // about how many bytes it holds (pushWatchBytes)
	// handed: the change came from a handover (takeHandover), whose
	// claim the stopped server still held: no other node watches it, so
	// this one hands it over again if it stops before it is sent.
	handed bool
	owed   pushOwed
	// held: this node won its claim (takeOver), and the store could not
	// say who gets it: sent when due, without claiming it again.
	held bool
}

// pushJob is one push to one subscription.
type pushJob struct {
	thread   string
	sub      chatrelay.PushSubscription
	msg      webpush.Message
	ix       string    // an opening push's interaction, "" for another push
	deadline int64     // an interaction's deadline (epoch ms): msg.TTL counts down to it; 0 for a reply
	attempt  int       // attempts made
	first    time.Time // of the first attempt
	due      time.Time // of the next
	change   *pushChange
}

func newPusher(s *Server, cfg *PushConfig) *pusher {
	st := store.PushOf(s.cfg.Store) // the backend's own store (s.store is metered, and hides it)
	if cfg == nil || st == nil {
		return nil
	}
	// The Guard's length bound is the contract's, whatever the caller's
	// Guard said: a copy of it takes LimitPushEndpoint.
	guard := &webpush.Guard{}
	if cfg.Guard != nil {
		g := *cfg.Guard
		guard = &g
	}
	guard.MaxEndpoint = chatrelay.LimitPushEndpoint.Max
	ps := &pusher{
		s: s, st: st, guard: guard, contact: cfg.Contact,
		workers: orDefault(cfg.Workers, chatrelay.DefaultPushWorkers), backoff: orDefaults(cfg.Backoff, pushBackoff), queue: make(chan pushTask, orDefault(cfg.Queue, chatrelay.DefaultPushQueue)), retry: make(chan pushTask, orDefault(cfg.Queue, chatrelay.DefaultPushQueue)),
		sender: &webpush.Sender{Client: webpush.NewClient(guard, cfg.TLS), Now: s.cfg.Now},
		flying: make(chan struct{}, pushInFlight), busy: map[string][]*pushJob{}, closed: map[string]time.Time{}, openTo: map[string]openedTo{},
		catchUps: newCatchUps(s.cfg.Now()),
		noSend:   cfg.NoSend, owner: rand.Text(), lease: cfg.Lease, working: map[string]*pushChange{}, watch: make(chan *pushWatch, pushWatchQueue),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatrelay_push_total",
			Help: "Web Push outcomes, by result: sent, retried (429, 5xx or no answer), gone (404/410: subscription deleted), rejected (another 4xx, or a 3xx: no redirect is followed), failed (no attempt left), blocked (the endpoint's address is refused), dropped (handed over at a shutdown more than the window of retries ago, or not watched: a node watches that many changes already), revoked (a participant's or a device's subscription whose grant ended), superseded (an opening push's retry whose interaction closed since).",
		}, []string{"result"}),
	}
	ps.claims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatrelay_push_claims_total",
		Help: "Changes with push subscriptions this node claimed (won=\"true\": it sends their pushes) or left to another node (won=\"false\").",
	}, []string{"won"})
	for _, r := range []string{pushSent, pushRetried, pushGone, pushRejected, pushFailed, pushBlocked, pushDropped, pushRevoked, pushSuperseded} {
		ps.total.WithLabelValues(r)
	}
	ps.claims.WithLabelValues("true")
	ps.claims.WithLabelValues("false")
	ps.takeovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatrelay_push_takeovers_total",
		Help: "Changes whose pushes this node sent because the node that claimed them let its claim lapse unsettled (it stopped, or was killed).",
	})
	if ps.lease <= 0 {
		ps.lease = chatrelay.DefaultPushLease
	}
	s.ops.reg.MustRegister(ps.total, ps.claims, ps.takeovers)
	return ps
}

func orDefaults(v, def []time.Duration) []time.Duration {
	if len(v) > 0 {
		return v
	}
	return def
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// pushKeyRecheck is how long pushes are signed with the VAPID key last
// read before the store's is read again: a rotate by the CLI (another
// process, or another node) is picked up within it, or at once by a push
// that a push service refuses with 401 or 403 (send), or by a GET of the
// public key on this node.
const pushKeyRecheck = 30 * time.Second

// vapid reads the store's VAPID key, parsed once per key (the same
// *VAPID while the key is the same: it keeps its signed JWTs).
func (ps *pusher) vapid(ctx context.Context) (*webpush.VAPID, error) {
	raw, err := ps.st.VAPIDKey(ctx)
	if err != nil {
		return nil, err
	}
	ps.keyMu.Lock()
	defer ps.keyMu.Unlock()
	if ps.key == nil || !bytes.Equal(raw, ps.keyRaw) {
		k, err := webpush.ParseVAPID(raw, ps.contact)
		if err != nil {
			return nil, &chatrelay.Error{Code: chatrelay.Internal, Message: "internal error", Err: err}
		}
		ps.key, ps.keyRaw = k, raw
	}
	ps.keyRead = ps.s.cfg.Now()
	return ps.key, nil
}

// sendKey is the VAPID key a push is signed with: the one last read if
// that was less than pushKeyRecheck ago, else the store's (vapid).
func (ps *pusher) sendKey(ctx context.Context) (*webpush.VAPID, error) {
	ps.keyMu.Lock()
	k, age := ps.key, ps.s.cfg.Now().Sub(ps.keyRead)
	ps.keyMu.Unlock()
	if k != nil && age >= 0 && age < pushKeyRecheck {
		return k, nil
	}
	return ps.vapid(ctx)
}

// note takes a feed batch's changes to the queue, never waiting.
func (ps *pusher) note(b store.Batch) {
	if ps == nil || ps.noSend || b.Ready || b.Participants {
		return
	}
	if b.Reset { // changes may have been missed: read again from the store (pushcatchup.go)
		ps.catchUps.reset(b.Thread) // from the cursor before this batch's changes
	}
	ps.catchUps.heardOf(b.Thread, b.Messages)
	for _, e := range b.Messages {
		if pushTypeOf(e.Message) == "" {
			continue
		}
		select {
		case ps.queue <- pushTask{thread: b.Thread, entry: e}:
		default: // no room: read again from the store once there is
			ps.catchUps.add(b.Thread, max(e.Epoch, e.Rev)-1)
		}
	}
	// The interactions retention dropped pending: closed expired, and
	// pushed as any closing, claimed by the same id (once across nodes).
	// No read of the store finds them again: one the queue has no room
	// for waits for it with the catch-ups (pushcatchup.go).
	for _, e := range b.Closed {
		if pushTypeOf(e.Message) != chatrelay.PushTypeInteractionClosed {
			continue
		}
		t := pushTask{thread: b.Thread, entry: e, owed: pushOwed{dropped: true}}
		select {
		case ps.queue <- t:
		default:
			if !ps.catchUps.closedLater(t) {
				ps.total.WithLabelValues(pushDropped).Inc()
			}
		}
	}
}

// pushTypeOf is the push a change makes: "" for none.
func pushTypeOf(m chatrelay.Message) string {
	if m.Author != chatrelay.Hermes {
		return ""
	}
	isNew := m.Rev == 0 || m.Rev == m.Epoch
	switch ix := m.Interaction; {
	case ix == nil && isNew:
		return chatrelay.PushTypeReply
	case ix == nil:
		return ""
	case ix.State == chatrelay.Pending && isNew:
		return chatrelay.PushTypeInteraction
	case ix.State != chatrelay.Pending:
		return chatrelay.PushTypeInteractionClosed
	}
	return ""
}

// run runs the workers and the retries until ctx is done.
func (ps *pusher) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range ps.workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case t := <-ps.queue:
					switch {
					case t.job != nil:
						ps.start(ctx, t.job)
					case t.watch != nil:
						ps.takeOver(ctx, t.watch)
					default:
						ps.fanOut(ctx, t.thread, t.entry.Message, t.handed, t.journaled, t.owed)
					}
				}
			}
		})
	}
	wg.Go(func() { ps.retries(ctx) })
	wg.Go(func() { ps.renew(ctx) })
	wg.Go(func() { ps.watching(ctx) })
	wg.Go(func() { ps.takeHandover(ctx) })
	wg.Go(func() { ps.catchingUp(ctx) })
	wg.Wait()
	ps.sends.Wait()
	ps.handOver()
}

// pushHandover is a change whose pushes a stopping server did not send,
// handed over to the next server that starts on the store (handOver,
// takeHandover): its message as the server had it, and when.
type pushHandover struct {
	At      int64             `json:"at"` // epoch ms
	Thread  string            `json:"thread"`
	Message chatrelay.Message `json:"message"`
	// Only are the subscriptions (ids) still owed its push, those of its
	// pushes without an outcome; absent: every subscription that gets it.
	Only []string `json:"only,omitempty"`
}

// owed is what h says is still owed of its change: At is when a server
// first took it to send.
func (h pushHandover) owed() pushOwed {
	return pushOwed{only: h.Only, since: time.UnixMilli(h.At)}
}

// pushClaimID is the id of the claim of a change's pushes (ClaimPush).
func pushClaimID(thread string, m chatrelay.Message, typ string) string {
	return thread + ":" + m.ID + ":" + typ
}

// pushKeep is how long a settled claim of a change of type typ is kept.
func pushKeep(typ string) time.Duration {
	if typ == chatrelay.PushTypeInteractionClosed {
		return pushClaimClosed
	}
	return pushClaimOpen
}

// journalDoc is the document a change's claim is journaled with in the
// store (ClaimPush), the one handOver writes (owed.since set): a server that starts after
// this one was killed takes it from the journal (takeHandover). owed.since
// is set (fanOut).
func journalDoc(thread string, m chatrelay.Message, owed pushOwed) []byte {
	b, err := json.Marshal(pushHandover{At: owed.since.UnixMilli(), Thread: thread, Message: m, Only: owed.only})
	if err != nil {
		return nil
	}
	return b
}

// handOver keeps in the store, once run's workers and sends have ended,
// the changes whose pushes this server did not finish: those it claimed
// and had not settled (pushes in flight, waiting, or due for a retry),
// those it won from a node that stopped and had not started, those
// still queued, and those a catch-up had yet to read (pushcatchup.go),
// read now. What a catch-up read (queued, or left unclaimed by a worker,
// or read now) is claimed first, so that one pushed already (its claim
// held or settled) is not handed over: the next start might not know
// its claim (the file store's are the process's) and push it again. The next server to start on the store sends them
// (takeHandover): a restart loses no push. (A server killed, SIGKILL,
// hands nothing over: on several nodes another takes its claims over
// when they lapse; the next server to start takes them from the store's
// journal of claims, takeHandover. The claimed changes handed over stay
// in the journal until they are settled: the next start takes each
// once, the handed over document first.)
func (ps *pusher) handOver() {
	// The catch-ups' reads and claims have a deadline of their own, so
	// that a slow store leaves the handover's write its whole time.
	rctx, rcancel := context.WithTimeout(context.Background(), pushHandoverRead)
	defer rcancel()
	now := ps.s.cfg.Now()
	var docs [][]byte
	handed := map[string]bool{} // claim ids
	add := func(thread string, m chatrelay.Message, owed pushOwed) {
		if owed.only != nil && len(owed.only) == 0 {
			return // owed to none
		}
		handed[pushClaimID(thread, m, pushTypeOf(m))] = true
		if owed.since.IsZero() {
			owed.since = now
		}
		if b := journalDoc(thread, m, owed); b != nil {
			docs = append(docs, b)
		}
	}
	pushes := 0 // of the changes it claimed, without an outcome
	ps.workMu.Lock()
	for _, c := range ps.working {
		add(c.thread, c.m, pushOwed{only: c.owedIDs(), since: c.since})
		pushes += len(c.owedIDs())
	}
	left := ps.left
	ps.workMu.Unlock()
	// addUnclaimed adds a change read again from the store (a catch-up's)
	// if its claim is won now: one pushed already (its claim held or
	// settled) is not handed over, since the next start may not know its
	// claim (the file store's are the process's) and would push it again.
	addUnclaimed := func(thread string, m chatrelay.Message) {
		id, owed := pushClaimID(thread, m, pushTypeOf(m)), pushOwed{since: now}
		if handed[id] {
			return
		}
		won, _, err := ps.st.ClaimPush(rctx, id, ps.owner, ps.lease, journalDoc(thread, m, owed))
		if won || err != nil { // not claimed: the next start claims it
			add(thread, m, owed)
		}
	}
	for _, l := range left {
		if l.owed.caught {
			addUnclaimed(l.thread, l.m)
		} else {
			add(l.thread, l.m, l.owed)
		}
	}
	for drained := false; !drained; {
		select {
		case t := <-ps.queue:
			switch {
			case t.watch != nil:
				add(t.watch.thread, t.watch.m, t.watch.owed)
			case t.job == nil && t.owed.caught:
				addUnclaimed(t.thread, t.entry.Message)
			case t.job == nil: // a retry's job is its change's, handed over above
				add(t.thread, t.entry.Message, t.owed)
			}
		case w := <-ps.watch:
			if w.handed {
				add(w.thread, w.m, w.owed)
			}
		default:
			drained = true
		}
	}
	for _, t := range ps.catchUps.takeClosed() {
		add(t.thread, t.entry.Message, t.owed)
	}
	unread := ps.missed(rctx, ps.catchUps.take(), func(thread string, m chatrelay.Message) bool {
		addUnclaimed(thread, m)
		return rctx.Err() == nil
	})
	if len(unread) > 0 {
		ps.s.log.Warn("push: what the feed missed could not be read at shutdown; the next start reads it", "threads", len(unread))
	}
	changes := len(docs)
	// Where this pusher stopped taking the store's changes: the next start
	// reads what is written after it (the restart's gap), which no feed
	// hands on.
	if b, err := json.Marshal(ps.catchUps.stoppedAt(now.Add(-pushWindow).UnixMilli(), unread)); err == nil {
		docs = append(docs, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pushHandoverWrite)
	defer cancel()
	if err := ps.st.HandOverPushes(ctx, docs); err != nil {
		ps.s.log.Warn("push: not sent at shutdown, and not handed over to the next start", "changes", changes, "pushes", pushes, "err", err)
		return
	}
	if changes > 0 {
		ps.s.log.Info("push: handed over at shutdown to the next start", "changes", changes, "pushes", pushes)
	}
}

// takeHandover queues, at the start, the changes a server that stopped
// handed over (handOver) and those of the store's push journal (ClaimPush:
// claimed and never settled, by a server that was killed, or by a node
// that runs), each once (a change handed over is in the journal too: its
// handed over document says what was still owed), unless older than a
// push's window of retries or an opening push whose interaction closed
// since; those are settled, out of the journal. A journaled change is
// claimed as a new one: won if its claim lapsed (or, on the file store,
// whose claims are the process's, always), else watched (fanOut).
func (ps *pusher) takeHandover(ctx context.Context) {
	docs, err := ps.st.TakePushes(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		// The journal is taken all the same: a handover that cannot be
		// read (a file that does not parse is left, and refused at every
		// start) must not make a killed server's pushes lost too.
		ps.s.log.Warn("push: read the changes handed over", "err", err)
	}
	journal, err := ps.st.JournaledPushes(ctx)
	if err != nil && ctx.Err() == nil {
		ps.s.log.Warn("push: read the journal of claimed changes", "err", err)
	}
	journaled := make(map[string][]byte, len(journal))
	ps.workMu.Lock()
	for _, e := range journal {
		if ps.working[e.ID] == nil { // not this server's own, claimed since it started
			journaled[e.ID] = e.Doc
		}
	}
	ps.workMu.Unlock()
	now := ps.s.cfg.Now()
	var pending map[string]bool // the interactions pending now, read once if a change taken opens one
	type taken struct {
		h      pushHandover
		handed bool
	}
	var take []taken
	handed, fromJournal, dropped, floors := 0, 0, 0, 0
	// keep reports whether h (of claim id; "" if it does not parse) is to
	// be sent, and settles id if not, so that the journal holds it no more.
	keep := func(id string, h pushHandover, ok bool) bool {
		drop, superseded := !ok || !chatrelay.ValidThread(h.Thread) || pushTypeOf(h.Message) == "" || now.Sub(time.UnixMilli(h.At)) > pushWindow, false
		if !drop && pushTypeOf(h.Message) == chatrelay.PushTypeInteraction {
			// It may have closed since (before the stop, or while no
			// server ran): this server never saw its close, and its
			// opening push would replace the closing one.
			if pending == nil {
				pending = ps.pendingNow(ctx)
			}
			if ix := h.Message.Interaction.ID; pending != nil && !pending[ix] {
				ps.noteClosed(ix)
				superseded = true
			}
		}
		switch {
		case drop:
			ps.total.WithLabelValues(pushDropped).Inc()
		case superseded:
			ps.total.WithLabelValues(pushSuperseded).Inc()
		default:
			return true
		}
		dropped++
		if _, ok := journaled[id]; ok {
			ps.settle(ctx, &pushChange{id: id, keep: pushKeep(pushTypeOf(h.Message))})
		}
		return false
	}
	for _, d := range docs {
		if f, ok := floorOf(d); ok { // not a change: where a stopped pusher was
			ps.catchUps.after(f)
			floors++
			continue
		}
		var h pushHandover
		ok := json.Unmarshal(d, &h) == nil
		id := ""
		if ok {
			id = pushClaimID(h.Thread, h.Message, pushTypeOf(h.Message))
		}
		if keep(id, h, ok) {
			take = append(take, taken{h, true})
			handed++
		}
		delete(journaled, id) // taken once: as handed over
	}
	for id, d := range journaled {
		var h pushHandover
		ok := json.Unmarshal(d, &h) == nil && pushClaimID(h.Thread, h.Message, pushTypeOf(h.Message)) == id
		if keep(id, h, ok) {
			take = append(take, taken{h, false})
			fromJournal++
		}
	}
	slices.SortFunc(take[handed:], func(a, b taken) int { // the journal's in the order they were first sent
		return cmp.Or(cmp.Compare(a.h.At, b.h.At), cmp.Compare(a.h.Message.Epoch, b.h.Message.Epoch))
	})
	if handed+fromJournal+dropped > 0 {
		ps.s.log.Info("push: changes taken at start", "handed_over", handed, "journaled", fromJournal, "dropped", dropped)
	}
	if floors > 0 {
		ps.s.log.Debug("push: reading what was written since the last pusher stopped", "floors", floors)
	}
	for i, t := range take {
		select {
		case ps.queue <- pushTask{thread: t.h.Thread, entry: store.Entry{Message: t.h.Message}, handed: t.handed, journaled: !t.handed, owed: t.h.owed()}:
		case <-ctx.Done(): // stopping already: the rest is handed over again
			for _, t := range take[i:] {
				ps.leave(t.h.Thread, t.h.Message, t.h.owed())
			}
			return
		}
	}
}

// floorOf reads a handover document that is a pushFloor (a "floor"),
// not a change.
func floorOf(d []byte) (pushFloor, bool) {
	var f struct {
		Floor   *int64           `json:"floor"`
		Threads map[string]int64 `json:"threads"`
	}
	if json.Unmarshal(d, &f) != nil || f.Floor == nil {
		return pushFloor{}, false
	}
	return pushFloor{Floor: *f.Floor, Threads: f.Threads}, true
}

// pendingNow is the set of the store's pending interactions (by id), or
// nil if the store cannot say: the handed over changes are then sent.
func (ps *pusher) pendingNow(ctx context.Context) map[string]bool {
	list, err := ps.s.store.Pending(ctx)
	if err != nil {
		if ctx.Err() == nil {
			ps.s.log.Warn("push: read the pending interactions of the changes handed over", "err", err)
		}
		return nil
	}
	pending := make(map[string]bool, len(list))
	for _, p := range list {
		pending[p.InteractionID] = true
	}
	return pending
}

// fanOut pushes one change to the thread's subscriptions that want it,
// if this node claims it. Who gets it is decided first, from what every
// node reads alike (the subscriptions, their events, their grants), so
// that a change nobody gets makes no claim: a thread whose subscriptions
// want other events, or whose participants' and devices' grants ended,
// costs no write. A change another node claimed is watched (watching):
// if that node stops before it settles the claim, this one sends it.
// handed says that the change was handed over by a server that stopped,
// journaled that it was in the store's push journal at the start, owed
// what that server (or the one that journaled it) still owed of it.
func (ps *pusher) fanOut(ctx context.Context, thread string, m chatrelay.Message, handed, journaled bool, owed pushOwed) {
	if owed.since.IsZero() {
		owed.since = ps.s.cfg.Now()
	}
	typ := pushTypeOf(m)
	if typ == chatrelay.PushTypeInteractionClosed {
		ps.noteClosed(m.Interaction.ID)
	}
	id, keep := pushClaimID(thread, m, typ), pushKeep(typ)
	subs, err := ps.recipientsOf(ctx, thread, typ)
	if err != nil && ctx.Err() == nil {
		// The store cannot say who gets it now (it is out of reach for a
		// moment): looked at again in a second, as a change another node
		// holds is, within the window.
		now := ps.s.cfg.Now()
		ps.watchLater(&pushWatch{thread: thread, m: m, typ: typ, id: id, keep: keep,
			due: now.Add(time.Second), until: now.Add(pushWindow + 2*ps.lease), handed: handed, owed: owed})
		return
	}
	switch typ {
	case chatrelay.PushTypeInteraction:
		ps.openedTo(thread, m, subs)
	case chatrelay.PushTypeInteractionClosed:
		if opened := ps.closedTo(thread, m); owed.dropped && opened != nil && ps.gone(ctx, thread) {
			subs = opened // the subscriptions went with the thread
		}
	}
	to := onlyTo(subs, owed.only)
	if len(to) == 0 {
		switch {
		case ctx.Err() != nil: // stopping: it may have had some
			ps.leave(thread, m, owed)
		case journaled: // nobody to send it to: out of the journal
			ps.settle(ctx, &pushChange{id: id, keep: keep})
		}
		return
	}
	won, settled, err := ps.st.ClaimPush(ctx, id, ps.owner, ps.lease, journalDoc(thread, m, owed))
	switch {
	case ctx.Err() != nil: // stopping: handed over, claimed or not
		// A claim this node may hold now is its own to hand over.
		owed.caught = owed.caught && err == nil && !won
		ps.leave(thread, m, owed)
		return
	case err != nil:
		// The store could not take the claim now (out of reach for a
		// moment: every node meets it alike, so none would send it):
		// claimed again in a second, within the window, as a change
		// whose recipients it could not say. A claim the store took
		// though its answer was lost is this node's token: it lapses
		// after the lease, and is won then.
		now := ps.s.cfg.Now()
		ps.watchLater(&pushWatch{thread: thread, m: m, typ: typ, id: id, keep: keep,
			due: now.Add(time.Second), until: now.Add(pushWindow + 2*ps.lease), handed: handed, owed: owed})
		return
	}
	ps.claims.WithLabelValues(strconv.FormatBool(won)).Inc()
	if !won {
		if settled && journaled {
			// Settled by a node whose settle left the entry (an older
			// chatrelay's, during an upgrade): out of the journal.
			ps.settle(ctx, &pushChange{id: id, keep: keep})
		}
		if !settled {
			now := ps.s.cfg.Now()
			ps.watchLater(&pushWatch{thread: thread, m: m, typ: typ, id: id, keep: keep,
				due: now.Add(ps.lease), until: now.Add(pushWindow + 2*ps.lease), handed: handed, owed: owed})
		}
		return
	}
	ps.sendChange(ctx, thread, m, typ, id, keep, to, owed.since)
}

// watchLater hands w to the watch goroutine (watching), which claims it
// at its due time and sends it if it wins the claim: a change another
// node holds, or one whose recipients the store could not say.
func (ps *pusher) watchLater(w *pushWatch) {
	w.owed.caught = false // its claim may become this node's (takeOver): handed over as it is
	w.size = 1024 + len(w.m.Text)
	if w.m.Card != nil {
		w.size += chatrelay.LimitCard.Max
	}
	select {
	case ps.watch <- w:
	default: // the watch goroutine is that far behind: another node sends it
		if w.handed {
			ps.total.WithLabelValues(pushDropped).Inc()
		}
	}
}

// takeOver sends the pushes of a change whose claim another node let
// lapse (watching won it since).
func (ps *pusher) takeOver(ctx context.Context, w *pushWatch) {
	ps.takeovers.Inc()
	c := &pushChange{id: w.id, keep: w.keep}
	if w.typ == chatrelay.PushTypeInteraction && ps.closedSince(w.m.Interaction.ID) {
		// Its closing push has gone out (or will): with the same Topic,
		// the opening one would replace it.
		ps.total.WithLabelValues(pushSuperseded).Inc()
		ps.settle(ctx, c)
		return
	}
	subs, err := ps.recipientsOf(ctx, w.thread, w.typ)
	if ctx.Err() != nil { // stopping: won, so this node's to hand over
		ps.leave(w.thread, w.m, w.owed)
		return
	}
	if err != nil { // the store cannot say now: looked at again in a second, within the window
		if w.due = ps.s.cfg.Now().Add(time.Second); w.due.Before(w.until) {
			w.held, w.handed = true, true // this node's: handed over if it stops first
			ps.watchLater(w)
		}
		return
	}
	ps.sendChange(ctx, w.thread, w.m, w.typ, w.id, w.keep, onlyTo(subs, w.owed.only), w.owed.since)
}

// onlyTo are the subscriptions of to whose ids are in only, or all of
// them if only is nil.
func onlyTo(to []chatrelay.PushSubscription, only []string) []chatrelay.PushSubscription {
	if only == nil {
		return to
	}
	return slices.DeleteFunc(to, func(s chatrelay.PushSubscription) bool { return !slices.Contains(only, s.ID) })
}

// recipientsOf are the thread's subscriptions that get a change of type
// typ (recipients).
func (ps *pusher) recipientsOf(ctx context.Context, thread, typ string) ([]chatrelay.PushSubscription, error) {
	subs, err := ps.st.PushSubscriptions(ctx, thread)
	if err != nil && chatrelay.CodeOf(err) == chatrelay.StoreUnavailable {
		return nil, err
	}
	if err != nil || len(subs) == 0 {
		return nil, nil // none, or none that reads (thread_unreadable: sends no push)
	}
	event := chatrelay.PushReply
	if typ != chatrelay.PushTypeReply {
		event = chatrelay.PushInteraction
	}
	return ps.recipients(ctx, thread, subs, event), nil
}

// sendChange sends the pushes of a change this node claimed (id) to the
// subscriptions of to; the claim is renewed until each push has had its
// outcome (done), then settled.
// since is when it was first taken to send: its pushes' window of retries
// starts then, on whichever server.
func (ps *pusher) sendChange(ctx context.Context, thread string, m chatrelay.Message, typ, id string, keep time.Duration, to []chatrelay.PushSubscription, since time.Time) {
	jobs := ps.jobsFor(thread, m, typ, to, since)
	c := &pushChange{id: id, keep: keep, thread: thread, m: m, since: since}
	if len(jobs) == 0 {
		ps.settle(ctx, c)
		return
	}
	c.owed = make(map[string]bool, len(jobs))
	for _, j := range jobs {
		c.owed[j.sub.ID] = true
	}
	ps.workMu.Lock()
	ps.working[id] = c
	ps.workMu.Unlock()
	for _, j := range jobs {
		j.change = c
		ps.start(ctx, j)
	}
}

// done notes that j had its outcome: the last push of its change settles
// the change's claim.
func (ps *pusher) done(ctx context.Context, j *pushJob) {
	c := j.change
	if c == nil {
		return
	}
	c.owedMu.Lock()
	_, owed := c.owed[j.sub.ID]
	delete(c.owed, j.sub.ID)
	last := owed && len(c.owed) == 0 // once, however often a push is said done
	c.owedMu.Unlock()
	if last {
		ps.settle(ctx, c)
	}
}

// settle records in the store that every push of c had its outcome, so
// that no node sends them again. If the store cannot be reached, the
// claim lapses and another node sends them again: at least once.
func (ps *pusher) settle(ctx context.Context, c *pushChange) {
	ps.workMu.Lock()
	delete(ps.working, c.id)
	ps.workMu.Unlock()
	if err := ps.st.SettlePush(ctx, c.id, c.keep); err != nil && ctx.Err() == nil {
		ps.s.log.Warn("push: settle a change's claim", "claim", c.id, "err", err)
	}
}

// renew extends this node's claims of the changes it sends, every third
// of their lease, until ctx is done. A node that stops (or is killed)
// renews them no more: once they lapse, the nodes watching them send
// their pushes again.
func (ps *pusher) renew(ctx context.Context) {
	t := time.NewTicker(ps.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ps.workMu.Lock()
		ids := slices.Collect(maps.Keys(ps.working))
		ps.workMu.Unlock()
		if len(ids) == 0 {
			continue
		}
		if err := ps.st.RenewPush(ctx, ids, ps.lease); err != nil && ctx.Err() == nil {
			ps.s.log.Warn("push: renew this node's claims", "claims", len(ids), "err", err)
		}
	}
}

// pushWatchQueue bounds the changes handed to the watch goroutine and
// not yet taken; pushWatching and pushWatchBytes bound those it holds
// (their messages: a card counted at its largest). Past any, a change
// another node claimed is not watched: if that node stops before it
// settles it, its pushes are not sent.
const (
	pushWatchQueue = 1024
	pushWatching   = 1 << 16
	pushWatchBytes = 64 << 20
)

// watching holds the changes other nodes claimed, in time order: when
// one's claim could have lapsed, it claims it again. Won (the node that
// held it stopped before it settled it), the change goes to the workers
// to send (takeOver); settled, it is forgotten; still held, it is looked
// at again a lease later, until its pushes' window is past.
func (ps *pusher) watching(ctx context.Context) {
	var h dueHeap[*pushWatch]
	held := 0 // the bytes of h's changes
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer func() { // the handed over ones are this node's to hand over again (handOver)
		for _, w := range h {
			if w.handed {
				ps.leave(w.thread, w.m, w.owed)
			}
		}
	}()
	for {
		var wake <-chan time.Time
		if len(h) > 0 {
			timer.Reset(max(0, h[0].due.Sub(ps.s.cfg.Now())))
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case w := <-ps.watch:
			if len(h) < pushWatching && held+w.size <= pushWatchBytes {
				heap.Push(&h, w)
				held += w.size
			}
		case <-wake:
			for len(h) > 0 && !h[0].due.After(ps.s.cfg.Now()) {
				w := heap.Pop(&h).(*pushWatch)
				held -= w.size
				won, settled, err := w.held, false, error(nil)
				if !w.held {
					won, settled, err = ps.st.ClaimPush(ctx, w.id, ps.owner, ps.lease, journalDoc(w.thread, w.m, w.owed))
				}
				switch {
				case ctx.Err() != nil:
					heap.Push(&h, w) // as it was, for the deferred hand over
					return
				case err == nil && won:
					select {
					case ps.queue <- pushTask{watch: w}:
					case <-ctx.Done():
						w.handed = true // won: this node's now
						heap.Push(&h, w)
						return
					}
				case err == nil && settled:
				default: // still held, or the store could not say
					if w.due = ps.s.cfg.Now().Add(ps.lease); w.due.Before(w.until) {
						heap.Push(&h, w)
						held += w.size
					}
				}
			}
		}
	}
}

// recipients are the subscriptions of subs that get event: those that
// want it, a participant's never for an interaction (it cannot answer),
// and a participant's or device's only while its grant is active.
func (ps *pusher) recipients(ctx context.Context, thread string, subs []chatrelay.PushSubscription, event chatrelay.PushEvent) []chatrelay.PushSubscription {
	to := subs[:0:0]
	for _, sub := range subs {
		participant := sub.Participant()
		device := strings.HasPrefix(sub.Subscriber, chatrelay.SubscriberDevicePrefix)
		if !sub.Wants(event) || (participant && event == chatrelay.PushInteraction) {
			continue
		}
		if (participant || device) && !ps.grantActive(ctx, thread, sub) {
			continue // it died with its grant
		}
		to = append(to, sub)
	}
	return to
}

// jobsFor makes the push of m (of type typ) to each subscription of to,
// their first attempt counted from first.
func (ps *pusher) jobsFor(thread string, m chatrelay.Message, typ string, to []chatrelay.PushSubscription, first time.Time) []*pushJob {
	now := ps.s.cfg.Now()
	// A change's payload is one per view and link (its subscribers
	// share their server's base), made once: MarshalPushPayload encodes
	// and fits the message, too much work to repeat per subscriber.
	type view struct {
		participant bool
		link        string
	}
	payloads := make(map[view][]byte)
	jobs := make([]*pushJob, 0, len(to))
	for _, sub := range to {
		participant := sub.Participant()
		page := "/"
		if strings.HasPrefix(sub.Subscriber, chatrelay.SubscriberDevicePrefix) {
			page = "/d" // the device's page: its token is in its local storage
		}
		if participant {
			page = "/p"
		}
		u, err := url.Parse(sub.Endpoint)
		if err != nil {
			continue
		}
		v := view{participant, strings.TrimSuffix(sub.Base, "/") + page}
		payload, ok := payloads[v]
		if !ok {
			msg := m
			if participant {
				msg, _ = chatrelay.RedactMessage(m)
			}
			payload = chatrelay.MarshalPushPayload(typ, thread, msg, v.link)
			payloads[v] = payload
		}
		wm := webpush.Message{
			Endpoint: u, Payload: payload,
			TTL: pushReplyTTL, Urgency: webpush.UrgencyNormal,
			Keys: webpush.Keys{P256dh: b64(sub.P256dh), Auth: b64(sub.Auth)},
		}
		if ix := m.Interaction; ix != nil {
			wm.Urgency, wm.TTL = webpush.UrgencyHigh, ttlTo(ix.Deadline, now)
			if webpush.ValidTopic(ix.ID) { // "ix_" + 12 hex: 15 base64url characters, always
				wm.Topic = ix.ID
			}
		}
		j := &pushJob{thread: thread, sub: sub, msg: wm, first: first}
		if ix := m.Interaction; ix != nil {
			j.deadline = ix.Deadline
		}
		if typ == chatrelay.PushTypeInteraction {
			j.ix = m.Interaction.ID
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// start sends j on a goroutine of its own once one of the pushInFlight
// places is free (waiting for it: the worker takes the next change
// after), so that a change's pushes go out without waiting for each
// other's answers. A subscription has at most one push in flight: a push
// to one that has one already waits behind it (at most pushWaiting pushes
// wait so, of every subscription; one past it is dropped, and counted),
// and is sent by the same goroutine once that one is answered and a
// place is free again. So an endpoint that never answers takes one place however
// many pushes are due to it, not every place (and with them every other
// push) for the 25 s its answer is waited for. run waits for the sends at
// shutdown.
func (ps *pusher) start(ctx context.Context, j *pushJob) {
	key := j.thread + "/" + j.sub.ID
	ps.busyMu.Lock()
	if waiting, busy := ps.busy[key]; busy {
		if ps.waiting >= pushWaiting {
			ps.busyMu.Unlock()
			ps.total.WithLabelValues(pushDropped).Inc()
			ps.done(ctx, j)
			return
		}
		ps.busy[key] = append(waiting, j)
		ps.waiting++
		ps.busyMu.Unlock()
		return
	}
	ps.busy[key] = nil
	ps.busyMu.Unlock()
	select {
	case ps.flying <- struct{}{}:
	case <-ctx.Done():
		return
	}
	ps.sends.Go(func() {
		for {
			ps.send(ctx, j)
			<-ps.flying // the next one waits its turn, behind the workers' (a channel's senders are served in order)
			if j = ps.next(key); j == nil {
				return
			}
			select {
			case ps.flying <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	})
}

// dropWaiting forgets the pushes waiting behind the one in flight to the
// subscription key names, and returns them.
func (ps *pusher) dropWaiting(key string) []*pushJob {
	ps.busyMu.Lock()
	defer ps.busyMu.Unlock()
	dropped := ps.busy[key]
	if len(dropped) > 0 {
		ps.busy[key] = nil
		ps.waiting -= len(dropped)
	}
	return dropped
}

// next is the push waiting behind the one just sent to the subscription
// key names, or nil (then the subscription has none in flight).
func (ps *pusher) next(key string) *pushJob {
	ps.busyMu.Lock()
	defer ps.busyMu.Unlock()
	waiting := ps.busy[key]
	if len(waiting) == 0 {
		delete(ps.busy, key)
		return nil
	}
	ps.busy[key] = waiting[1:]
	ps.waiting--
	return waiting[0]
}

// pushCPUHold is the longest a push holds its turn of the background
// lane while its request is written: a push service that stalls the write
// (an HTTP/2 window that does not open, a first connection's handshake)
// holds back the other pushes' work (and the uploads') no longer than this.
const pushCPUHold = 5 * time.Millisecond

// do sends m, signed with v, and returns the push service's answer. The
// CPU a push costs, its encryption and signing and the writing of its
// request (HTTP/2 headers, TLS), is done holding a turn of the background
// lane, so that pushes (with the uploads) never run on more than one fewer
// P than GOMAXPROCS at once however many are due, nor in bursts that take
// every core from the posts (a change's five pushes, each encrypted while
// the one before is written, did). The turn is let go once the transport has read the request's body (its headers
// are written by then), or after pushCPUHold; the answer is awaited
// without it.
func (ps *pusher) do(ctx context.Context, v *webpush.VAPID, m webpush.Message) (webpush.Result, error) {
	release, err := background.EnterFor(ctx, pushCPUHold)
	if err != nil {
		return webpush.Result{}, err
	}
	defer release()
	sender := webpush.Sender{VAPID: v, Client: ps.sender.Client, Now: ps.sender.Now}
	req, err := sender.Request(ctx, m)
	if err != nil {
		return webpush.Result{}, err
	}
	req.Body = &releasingBody{ReadCloser: req.Body, release: release}
	return sender.Do(req)
}

// releasingBody calls release once the transport has read it to its end,
// or closed it.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *releasingBody) Close() error {
	b.release()
	return b.ReadCloser.Close()
}

// grantActive reports whether the grant of a participant's or a device's
// subscription is active. If the grant ended (or is gone), the
// subscription dies with it: deleted, and counted "revoked" by the node
// whose delete removed it (not by one that found it deleted already, nor
// when the delete failed: it is tried again at the next change).
func (ps *pusher) grantActive(ctx context.Context, thread string, sub chatrelay.PushSubscription) bool {
	_, id, _ := strings.Cut(sub.Subscriber, ":")
	if ps.s.parts != nil {
		g, err := ps.s.parts.Grant(ctx, thread, id)
		if err == nil && g.StateAt(ps.s.cfg.Now()) == chatrelay.Active {
			return true
		}
		if err != nil && chatrelay.CodeOf(err) != chatrelay.NotFound {
			return false // cannot tell now: not sent, kept
		}
	}
	_, err := ps.st.PushUnsubscribe(ctx, thread, sub.ID)
	switch {
	case err == nil:
		ps.total.WithLabelValues(pushRevoked).Inc()
	case chatrelay.CodeOf(err) != chatrelay.NotFound:
		ps.s.log.Warn("push: delete the subscription of an ended grant", "thread", thread, "push", sub.ID, "err", err)
	}
	return false
}

// dropEnded deletes the thread's subscriptions whose participant's or
// device's grant ended (grantActive), and reports whether it found any:
// they died with their grant, so they hold none of the thread's
// LimitPushSubscriptions places, even before a push would delete them.
func (ps *pusher) dropEnded(ctx context.Context, thread string) bool {
	subs, err := ps.st.PushSubscriptions(ctx, thread)
	if err != nil {
		return false
	}
	found := false
	for _, sub := range subs {
		if sub.Participant() || strings.HasPrefix(sub.Subscriber, chatrelay.SubscriberDevicePrefix) {
			if !ps.grantActive(ctx, thread, sub) {
				found = true
			}
		}
	}
	return found
}

// send makes one attempt of j, and schedules the next if it may be tried
// again; a push with its outcome is done.
func (ps *pusher) send(ctx context.Context, j *pushJob) {
	if j.ix != "" && ps.closedSince(j.ix) {
		// Its interaction closed before this attempt, its first or a
		// retry: sent after the closing push, with its Topic, it would
		// replace it with Approve and Deny for an answered question.
		ps.total.WithLabelValues(pushSuperseded).Inc()
		ps.done(ctx, j)
		return
	}
	j.attempt++
	if j.deadline != 0 { // a retry, or a push that waited: the seconds left now
		j.msg.TTL = ttlTo(j.deadline, ps.s.cfg.Now())
	}
	v, err := ps.sendKey(ctx)
	if err != nil {
		if ps.again(ctx, j, 0) {
			ps.done(ctx, j)
		}
		return
	}
	res, err := ps.do(ctx, v, j.msg)
	if err == nil && (res.Status == 401 || res.Status == 403) {
		// Signed with a key rotated since it was read? Read the store's;
		// if it is another, this attempt is made again with it.
		if nv, kerr := ps.vapid(ctx); kerr == nil && nv != v {
			res, err = ps.do(ctx, nv, j.msg)
		}
	}
	switch {
	case err == nil && res.Status >= 200 && res.Status < 300: // even as the server stops: it was sent
		ps.total.WithLabelValues(pushSent).Inc()
	case ctx.Err() != nil:
		return // stopping: handed over (handOver) with its change
	case webpush.IsBlocked(err):
		ps.total.WithLabelValues(pushBlocked).Inc()
	case err != nil || res.Status == 429 || res.Status >= 500:
		if !ps.again(ctx, j, res.RetryAfter) {
			return
		}
	case res.Status == 404 || res.Status == 410:
		// The pushes waiting behind this one go with their subscription,
		// unsent: each would be answered the same.
		dropped := ps.dropWaiting(j.thread + "/" + j.sub.ID)
		ps.total.WithLabelValues(pushGone).Add(float64(1 + len(dropped)))
		for _, d := range dropped {
			ps.done(ctx, d)
		}
		if _, err := ps.st.PushUnsubscribe(ctx, j.thread, j.sub.ID); err != nil && chatrelay.CodeOf(err) != chatrelay.NotFound {
			ps.s.log.Warn("push: delete a gone subscription", "thread", j.thread, "push", j.sub.ID, "err", err)
		}
	default:
		ps.total.WithLabelValues(pushRejected).Inc()
		ps.s.log.Warn("push refused by the push service", "thread", j.thread, "push", j.sub.ID, "status", res.Status)
	}
	ps.done(ctx, j)
}

// noteClosed remembers that interaction ix closed, for pushWindow (no
// retry outlives it), so that an opening push is not sent after the
// closing one (send): neither a retry nor a first attempt that the
// closing change overtook. Every node sees every change, so each knows it,
// whichever sends the closing push.
func (ps *pusher) noteClosed(ix string) {
	now := ps.s.cfg.Now()
	ps.closedMu.Lock()
	defer ps.closedMu.Unlock()
	if len(ps.closed) >= 1024 && now.Sub(ps.closedSwept) > time.Minute {
		ps.closedSwept = now // at most once a minute: the map holds at most a window's closes
		for k, at := range ps.closed {
			if now.Sub(at) > pushWindow {
				delete(ps.closed, k)
			}
		}
	}
	ps.closed[ix] = now
}

// pushOpenTo and pushOpenToBytes bound the pending interactions whose
// recipients a node keeps (openTo), and their bytes: past either, the
// closing of one that retention drops with its thread is sent to nobody.
const (
	pushOpenTo      = 4096
	pushOpenToBytes = 8 << 20
)

// openedTo are the recipients of an interaction's opening, until its
// deadline (then its expiry closes it, and its thread is still there).
type openedTo struct {
	subs     []chatrelay.PushSubscription
	deadline time.Time
	size     int
}

// openedTo keeps subs, the recipients of the opening of m's interaction.
func (ps *pusher) openedTo(thread string, m chatrelay.Message, subs []chatrelay.PushSubscription) {
	if len(subs) == 0 {
		return
	}
	now := ps.s.cfg.Now()
	o := openedTo{subs: slices.Clone(subs), deadline: time.UnixMilli(m.Interaction.Deadline), size: 64}
	for _, sub := range subs {
		o.size += 256 + len(sub.Endpoint) + len(sub.Base)
	}
	key := thread + "/" + m.Interaction.ID
	ps.closedMu.Lock()
	defer ps.closedMu.Unlock()
	if len(ps.openTo) >= pushOpenTo || ps.openToBytes+o.size > pushOpenToBytes {
		for k, o := range ps.openTo {
			if now.After(o.deadline) {
				delete(ps.openTo, k)
				ps.openToBytes -= o.size
			}
		}
		if len(ps.openTo) >= pushOpenTo || ps.openToBytes+o.size > pushOpenToBytes {
			return
		}
	}
	if old, ok := ps.openTo[key]; ok {
		ps.openToBytes -= old.size
	}
	ps.openTo[key] = o
	ps.openToBytes += o.size
}

// closedTo returns the recipients of the opening of m's interaction
// (nil if this node kept none), and forgets them: it closed.
func (ps *pusher) closedTo(thread string, m chatrelay.Message) []chatrelay.PushSubscription {
	key := thread + "/" + m.Interaction.ID
	ps.closedMu.Lock()
	defer ps.closedMu.Unlock()
	o, ok := ps.openTo[key]
	if !ok {
		return nil
	}
	delete(ps.openTo, key)
	ps.openToBytes -= o.size
	return o.subs
}

// gone reports whether thread has no message left (the sweep removed
// it); false if the store cannot say.
func (ps *pusher) gone(ctx context.Context, thread string) bool {
	p, err := ps.s.store.Since(ctx, thread, 0, 1)
	return err == nil && len(p.Messages) == 0
}

// closedSince reports whether interaction ix closed (noteClosed).
func (ps *pusher) closedSince(ix string) bool {
	ps.closedMu.Lock()
	defer ps.closedMu.Unlock()
	_, ok := ps.closed[ix]
	return ok
}

// again schedules j's next attempt, after its backoff or retryAfter,
// whichever is longer, if one is left within the window. It reports
// whether j is given up instead (no attempt left, or no room to wait).
func (ps *pusher) again(ctx context.Context, j *pushJob, retryAfter time.Duration) (givenUp bool) {
	wait := max(ps.backoff[min(max(j.attempt-1, 0), len(ps.backoff)-1)], retryAfter)
	j.due = ps.s.cfg.Now().Add(wait)
	if j.attempt >= pushAttempts || j.due.Sub(j.first) > pushWindow {
		ps.total.WithLabelValues(pushFailed).Inc()
		return true
	}
	select {
	case ps.retry <- pushTask{job: j}:
		ps.total.WithLabelValues(pushRetried).Inc()
	case <-ctx.Done():
	default:
		ps.total.WithLabelValues(pushDropped).Inc()
		return true
	}
	return false
}

// retries holds the pushes to try again, in time order, and hands each
// to the workers when it is due.
func (ps *pusher) retries(ctx context.Context) {
	var h dueHeap[*pushJob]
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var wake <-chan time.Time
		if len(h) > 0 {
			timer.Reset(max(0, h[0].due.Sub(ps.s.cfg.Now()))) // Go 1.23+: no stale tick after a Reset
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case t := <-ps.retry:
			heap.Push(&h, t.job)
		case <-wake:
			for len(h) > 0 && !h[0].due.After(ps.s.cfg.Now()) {
				j := heap.Pop(&h).(*pushJob)
				select {
				case ps.queue <- pushTask{job: j}:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// dueHeap orders what is due (pushes to try again, watched changes) by
// when it is.
type dueHeap[T interface{ dueAt() time.Time }] []T

func (h dueHeap[T]) Len() int           { return len(h) }
func (h dueHeap[T]) Less(i, j int) bool { return h[i].dueAt().Before(h[j].dueAt()) }
func (h dueHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap[T]) Push(x any)        { *h = append(*h, x.(T)) }
func (h *dueHeap[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (j *pushJob) dueAt() time.Time   { return j.due }
func (w *pushWatch) dueAt() time.Time { return w.due }

// ttlTo is a push's TTL: the seconds from now to deadline (epoch ms),
// rounded up, 0 once it passed.
func ttlTo(deadline int64, now time.Time) int {
	return max(0, int((deadline-now.UnixMilli()+999)/1000))
}

// b64 decodes a stored key (checked when it was stored).
func b64(s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil
	}
	return b
}
