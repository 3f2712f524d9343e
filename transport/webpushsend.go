package transport

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/base64"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webpush"
)

// Push delivery (contract Part 5). Run hands each batch of the store's
// feed to the pusher (note), after the write and whoever wrote it (this
// server, the host CLI in another process, another node), without ever
// waiting: a change that finds the queue full is not pushed, and counted.
// A fixed set of workers, started and waited for by Run, takes each
// change: it is pushed if it is an interaction that opens or closes, or a
// message hermes posts; the node that claims it in the store (ClaimPush:
// SET NX PX on Redis) sends it to the thread's subscriptions that want
// it. Pushes stay out of the posts' way: a push's CPU work (encryption,
// signing and the write of its request, ~250 µs) is done under a turn of
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
	pushRejected = "rejected" // another 4xx: not tried again
	pushFailed   = "failed"   // no attempt left within the window
	pushBlocked  = "blocked"  // the endpoint now resolves to an address the guard refuses
	pushDropped  = "dropped"  // the queue was full, or the claim could not be made
	pushRevoked  = "revoked"  // a participant's or a device's subscription whose grant ended: deleted, not sent
	// an opening push's retry whose interaction closed since: not sent
	// (after the closing push, with its Topic, it would replace it)
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
	flying      chan struct{} // held by each push in flight (pushInFlight)
	closedMu    sync.Mutex
	closed      map[string]time.Time // interaction id → when this node saw it close (kept pushWindow)
	closedSwept time.Time            // when closed was last rid of what is past pushWindow

	busyMu  sync.Mutex
	busy    map[string][]*pushJob // thread/subscription id with a push in flight → the pushes waiting behind it
	waiting int                   // of every subscription (pushWaiting)
	sends   sync.WaitGroup
	// unsent counts the pushes shutdown leaves unsent (in flight, waiting,
	// due for a retry); run logs it once every send has ended.
	unsent atomic.Int64
	total  *prometheus.CounterVec
	claims *prometheus.CounterVec // won: "true" (this node sends the change's pushes) or "false" (another does)

	keyMu   sync.Mutex // guards keyRaw, key, keyRead
	keyRaw  []byte
	key     *webpush.VAPID
	keyRead time.Time // when the store's key was last read
}

// pushTask is one change to push (ev), or one push to send again (job).
type pushTask struct {
	thread string
	entry  store.Entry
	job    *pushJob
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
		flying: make(chan struct{}, pushInFlight), busy: map[string][]*pushJob{}, closed: map[string]time.Time{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatrelay_push_total",
			Help: "Web Push outcomes, by result: sent, retried (429, 5xx or no answer), gone (404/410: subscription deleted), rejected (another 4xx), failed (no attempt left), blocked (the endpoint's address is refused), dropped (queue full or no claim), revoked (a participant's or a device's subscription whose grant ended), superseded (an opening push's retry whose interaction closed since).",
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
	s.ops.reg.MustRegister(ps.total, ps.claims)
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
	if ps == nil || b.Ready || b.Reset || b.Participants {
		return
	}
	for _, e := range b.Messages {
		if pushTypeOf(e.Message) == "" {
			continue
		}
		select {
		case ps.queue <- pushTask{thread: b.Thread, entry: e}:
		default:
			ps.total.WithLabelValues(pushDropped).Inc()
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
					if t.job != nil {
						ps.start(ctx, t.job)
					} else {
						ps.fanOut(ctx, t.thread, t.entry.Message)
					}
				}
			}
		})
	}
	wg.Go(func() { ps.retries(ctx) })
	wg.Wait()
	ps.sends.Wait()
	ps.logUnsent()
}

// logUnsent says, once run's workers and sends have ended, what the
// shutdown left unsent: the pushes in flight, waiting behind one or due
// for a retry (unsent), and the changes still queued, whose pushes were
// never worked out. A push is sent at most once, so these are lost;
// the line counts them, naming no thread, endpoint or text.
func (ps *pusher) logUnsent() {
	changes := 0
	for drained := false; !drained; {
		select {
		case t := <-ps.queue:
			if t.job != nil {
				ps.unsent.Add(1)
			} else {
				changes++
			}
		case <-ps.retry:
			ps.unsent.Add(1)
		default:
			drained = true
		}
	}
	ps.busyMu.Lock()
	pushes := ps.unsent.Load() + int64(ps.waiting)
	ps.busyMu.Unlock()
	if pushes > 0 || changes > 0 {
		ps.s.log.Warn("push: not sent at shutdown", "pushes", pushes, "changes", changes)
	}
}

// fanOut pushes one change to the thread's subscriptions that want it,
// if this node claims it. Who gets it is decided first, from what every
// node reads alike (the subscriptions, their events, their grants), so
// that a change nobody gets makes no claim: a thread whose subscriptions
// want other events, or whose participants' and devices' grants ended,
// costs no write.
func (ps *pusher) fanOut(ctx context.Context, thread string, m chatrelay.Message) {
	typ := pushTypeOf(m)
	if typ == chatrelay.PushTypeInteractionClosed {
		ps.noteClosed(m.Interaction.ID)
	}
	subs, err := ps.st.PushSubscriptions(ctx, thread)
	if err != nil || len(subs) == 0 {
		return
	}
	event, ttl, claim := chatrelay.PushReply, pushClaimOpen, typ
	if typ != chatrelay.PushTypeReply {
		event = chatrelay.PushInteraction
	}
	if typ == chatrelay.PushTypeInteractionClosed {
		ttl = pushClaimClosed
	}
	to := ps.recipients(ctx, thread, subs, event)
	if len(to) == 0 {
		return
	}
	won, err := ps.st.ClaimPush(ctx, thread+":"+m.ID+":"+claim, ttl)
	if err != nil {
		ps.total.WithLabelValues(pushDropped).Inc()
		return
	}
	ps.claims.WithLabelValues(strconv.FormatBool(won)).Inc()
	if !won {
		return // another node sends it
	}
	for _, j := range ps.jobsFor(thread, m, typ, to) {
		ps.start(ctx, j)
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

// jobsFor makes the push of m (of type typ) to each subscription of to.
func (ps *pusher) jobsFor(thread string, m chatrelay.Message, typ string, to []chatrelay.PushSubscription) []*pushJob {
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
		j := &pushJob{thread: thread, sub: sub, msg: wm, first: now}
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
		ps.unsent.Add(1)
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
				ps.unsent.Add(1)
				return
			}
		}
	})
}

// dropWaiting forgets the pushes waiting behind the one in flight to the
// subscription key names, and returns how many there were.
func (ps *pusher) dropWaiting(key string) int {
	ps.busyMu.Lock()
	defer ps.busyMu.Unlock()
	n := len(ps.busy[key])
	if n > 0 {
		ps.busy[key] = nil
		ps.waiting -= n
	}
	return n
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

// send makes one attempt of j, and schedules the next if it may be tried
// again.
func (ps *pusher) send(ctx context.Context, j *pushJob) {
	if j.attempt > 0 && j.ix != "" && ps.closedSince(j.ix) {
		ps.total.WithLabelValues(pushSuperseded).Inc()
		return
	}
	j.attempt++
	if j.deadline != 0 { // a retry, or a push that waited: the seconds left now
		j.msg.TTL = ttlTo(j.deadline, ps.s.cfg.Now())
	}
	v, err := ps.sendKey(ctx)
	if err != nil {
		ps.again(ctx, j, 0)
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
	case ctx.Err() != nil: // the shutdown: nothing more is done for j
		switch {
		case err == nil && res.Status >= 200 && res.Status < 300:
			ps.total.WithLabelValues(pushSent).Inc()
		case err != nil || res.Status == 429 || res.Status >= 500:
			ps.unsent.Add(1) // cut, or would have been tried again
		}
		return
	case webpush.IsBlocked(err):
		ps.total.WithLabelValues(pushBlocked).Inc()
	case err != nil || res.Status == 429 || res.Status >= 500:
		ps.again(ctx, j, res.RetryAfter)
	case res.Status >= 200 && res.Status < 300:
		ps.total.WithLabelValues(pushSent).Inc()
	case res.Status == 404 || res.Status == 410:
		// The pushes waiting behind this one go with their subscription,
		// unsent: each would be answered the same.
		ps.total.WithLabelValues(pushGone).Add(float64(1 + ps.dropWaiting(j.thread+"/"+j.sub.ID)))
		if _, err := ps.st.PushUnsubscribe(ctx, j.thread, j.sub.ID); err != nil && chatrelay.CodeOf(err) != chatrelay.NotFound {
			ps.s.log.Warn("push: delete a gone subscription", "thread", j.thread, "push", j.sub.ID, "err", err)
		}
	default:
		ps.total.WithLabelValues(pushRejected).Inc()
		ps.s.log.Warn("push refused by the push service", "thread", j.thread, "push", j.sub.ID, "status", res.Status)
	}
}

// noteClosed remembers that interaction ix closed, for pushWindow (no
// retry outlives it), so that an opening push's retry is not sent after
// the closing one (send). Every node sees every change, so each knows it,
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

// closedSince reports whether interaction ix closed (noteClosed).
func (ps *pusher) closedSince(ix string) bool {
	ps.closedMu.Lock()
	defer ps.closedMu.Unlock()
	_, ok := ps.closed[ix]
	return ok
}

// again schedules j's next attempt, after its backoff or retryAfter,
// whichever is longer, if one is left within the window.
func (ps *pusher) again(ctx context.Context, j *pushJob, retryAfter time.Duration) {
	wait := max(ps.backoff[min(max(j.attempt-1, 0), len(ps.backoff)-1)], retryAfter)
	j.due = ps.s.cfg.Now().Add(wait)
	if j.attempt >= pushAttempts || j.due.Sub(j.first) > pushWindow {
		ps.total.WithLabelValues(pushFailed).Inc()
		return
	}
	select {
	case ps.retry <- pushTask{job: j}:
		ps.total.WithLabelValues(pushRetried).Inc()
	case <-ctx.Done():
		ps.unsent.Add(1)
	default:
		ps.total.WithLabelValues(pushDropped).Inc()
	}
}

// retries holds the pushes to try again, in time order, and hands each
// to the workers when it is due.
func (ps *pusher) retries(ctx context.Context) {
	var h jobHeap
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
			ps.unsent.Add(int64(len(h)))
			return
		case t := <-ps.retry:
			heap.Push(&h, t.job)
		case <-wake:
			for len(h) > 0 && !h[0].due.After(ps.s.cfg.Now()) {
				j := heap.Pop(&h).(*pushJob)
				select {
				case ps.queue <- pushTask{job: j}:
				case <-ctx.Done():
					ps.unsent.Add(int64(1 + len(h)))
					return
				}
			}
		}
	}
}

// jobHeap orders pushes by when they are due.
type jobHeap []*pushJob

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h jobHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *jobHeap) Push(x any)        { *h = append(*h, x.(*pushJob)) }
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	*h = old[:len(old)-1]
	return j
}

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
