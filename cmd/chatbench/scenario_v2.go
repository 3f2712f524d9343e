package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
)

// S7: v2 streams with reactions flowing. Each thread has one v2 SSE and
// one v2 WebSocket subscriber (?v=2); changes go to random threads at a
// fixed rate, about half of them new messages (posted by the owner, each
// thread created by its first, on the clock) and half reactions to a
// message posted earlier in the run. A reaction's emoji is its own
// ("r<seq>.<send time>", 64 code points at most, no white space), so a
// subscriber knows each reaction in the update frames (a message's update
// carries all its reactions) and its latency: reaction request sent →
// first update frame holding it. Every message and every reaction must
// reach both subscribers of its thread.
func (b *bench) s7(ctx context.Context, r *result) {
	cfg := b.cfg
	threads := newThreads(cfg.v2Threads)
	subs := makeSubs(threads, 2*len(threads), "mixed")
	for _, s := range subs {
		s.v2 = true
	}
	k := &v2sink{tag: newTag("S7")}
	k.msgs.tag = k.tag
	f, setup, err := b.openFleet(ctx, subs, k, true)
	r.int("threads", int64(len(threads)))
	r.int("subs", int64(len(subs)))
	if err != nil {
		r.err = err
		return
	}
	defer f.close()
	r.ms("setup", setup)

	states := make([]v2thread, len(threads))
	ps := b.newPosters(cfg.s1Posters)
	defer closePosters(ps)
	var posts, reacts postStats
	var seq atomic.Int64
	op := func(p *poster, i int) {
		ti := p.rng.IntN(len(threads))
		th, st := threads[ti], &states[ti]
		id, ok := st.target(p.rng.IntN(2) == 0)
		if !ok {
			_, mid, err := p.post(ctx, th, k.tag, i)
			posts.count(err)
			if err == nil {
				st.add(mid)
			}
			return
		}
		n := seq.Add(1)
		err := p.react(ctx, th, id, fmt.Sprintf("r%d.%d", n, nowNS()))
		reacts.count(err)
		if err != nil {
			st.unreserve(id)
		}
	}
	u := b.startUsage()
	late := paced(ctx, ps, cfg.v2Rate, int(cfg.v2Rate*cfg.v2Duration.Seconds()), op)
	window := time.Since(u.wall0)
	wantMsgs, wantReacts := 2*posts.ok.Load(), 2*reacts.ok.Load()
	drainErr := waitFor(ctx, cfg.drain, func() bool { return k.msgs.got.Load() >= wantMsgs && k.reacts.Load() >= wantReacts })
	u.stop()

	changes := posts.ok.Load() + reacts.ok.Load()
	r.int("posts", posts.ok.Load())
	r.int("reactions", reacts.ok.Load())
	r.num("changes_per_s", float64(changes)/window.Seconds(), "")
	r.ratio("messages_delivered", k.msgs.got.Load(), wantMsgs)
	r.ratio("reactions_delivered", k.reacts.Load(), wantReacts)
	r.int("lost", max(wantMsgs-k.msgs.got.Load(), 0)+max(wantReacts-k.reacts.Load(), 0))
	r.ms("message_p50", k.msgs.lat.Quantile(0.50))
	r.ms("message_p99", k.msgs.lat.Quantile(0.99))
	r.latency("reaction_", &k.reactLat)
	r.cpu(u, "change", changes)
	if late > 0 {
		r.int("late_changes", late)
		r.note("%d changes started more than %s behind their slot: every poster was busy", late, lateAfter)
	}
	if n := k.msgs.got.Load() - wantMsgs; n > 0 {
		r.int("repeated", n)
		r.note("%d message frames more than messages × subscribers: some came twice", n)
	}
	posts.report(r, "post")
	reacts.report(r, "reaction")
	if drainErr != nil {
		r.note("deliveries still missing %s after the changes stopped", cfg.drain)
	}
}

// maxReactions is the server's message.reactions limit (GET
// /api/limits.json): the distinct emoji one message may hold.
const maxReactions = 20

// v2thread is what S7 knows of one thread: the messages it posted, and
// how many reactions each has (at most maxReactions).
type v2thread struct {
	mu   sync.Mutex
	ids  []string
	used map[string]int
}

func (t *v2thread) add(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ids = append(t.ids, id)
}

// target picks the newest message with room for a reaction (and counts
// the reaction on it), if react and there is one.
func (t *v2thread) target(react bool) (string, bool) {
	if !react {
		return "", false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.used == nil {
		t.used = map[string]int{}
	}
	for i := len(t.ids) - 1; i >= 0 && i >= len(t.ids)-4; i-- {
		if id := t.ids[i]; t.used[id] < maxReactions {
			t.used[id]++
			return id, true
		}
	}
	return "", false
}

func (t *v2thread) unreserve(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.used[id]--
}

// v2sink counts S7's deliveries: messages (as sink does) and reactions,
// each once per subscriber.
type v2sink struct {
	tag      string
	msgs     sink
	reactLat hist
	reacts   atomic.Int64
	mu       sync.Mutex
	seen     map[*subscriber]map[string]bool // reactions each subscriber has received
}

func (k *v2sink) ready(s *subscriber, c int64) { k.msgs.ready(s, c) }

func (k *v2sink) message(s *subscriber, e int64, text string) { k.msgs.message(s, e, text) }

func (k *v2sink) update(s *subscriber, m *message) {
	now := nowNS()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil {
		k.seen = map[*subscriber]map[string]bool{}
	}
	seen := k.seen[s]
	if seen == nil {
		seen = map[string]bool{}
		k.seen[s] = seen
	}
	for emoji := range m.Reactions {
		if seen[emoji] {
			continue
		}
		_, sent, ok := strings.Cut(strings.TrimPrefix(emoji, "r"), ".")
		ns, err := strconv.ParseInt(sent, 10, 64)
		if !ok || err != nil {
			continue
		}
		seen[emoji] = true
		k.reacts.Add(1)
		k.reactLat.Record(time.Duration(now - ns))
	}
}

// react adds the owner's reaction emoji to message id of th.
func (p *poster) react(ctx context.Context, th *thread, id, emoji string) error {
	p.body = append(p.body[:0], `{"message_id":"`...)
	p.body = append(p.body, id...)
	p.body = append(p.body, `","emoji":"`...)
	p.body = append(p.body, emoji...)
	p.body = append(p.body, `"}`...)
	_, err := p.hc.do(ctx, http.MethodPost, chatrelay.PathReact, th.token, p.body)
	return err
}
