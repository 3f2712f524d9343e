package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay/store"
)

// feedDeadline bounds how long FuzzStoreDiff waits for a feed to deliver
// what a write acknowledged (or to register): far past what a feed on
// loopback takes, so that only a feed that lost it fails.
const feedDeadline = 10 * time.Second

// diffFeed is a backend's live feed as FuzzStoreDiff reads it: one
// store.Feed of the store, followed by a reader of every thread, one of
// AgentsTopic and one reader of each thread (what the streams follow),
// and a Watch with updates (the CLI's watch --updates).
type diffFeed struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	subs   []*feedSub
}

// feedSub is one reader of the feed: what it was handed, thread by thread.
type feedSub struct {
	thread string // "" every thread
	watch  bool   // a Watch, not a Feed's reader
	wake   chan struct{}

	mu     sync.Mutex
	ready  bool
	err    error // Follow ended before the feed was stopped
	events map[string][]feedEvent
	revs   map[string]int64 // per thread, the newest rev handed on
	parts  map[string]int   // per thread, the Participants batches handed on
	agents int              // the Agents batches handed on
}

// feedEvent is one thing a reader was handed: a message in its state
// (Kind "message"), a Reset, or an interaction retention closed.
type feedEvent struct {
	Kind  string     // message, reset, closed; a Watch's: new, update, gap
	Entry *entryView `json:",omitempty"`
	rev   int64
}

// startFeed starts d's feed readers, which the run's cleanup stops, and
// waits until each is registered.
func (r *diffRun) startFeed(d *diffBackend) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &diffFeed{cancel: cancel}
	// The Watch's reader: what is stored after its first read of the
	// threads is new (store.Feed.Watch), so it is ready once that read
	// answered (watchedStore).
	w := &feedSub{thread: "", watch: true, wake: make(chan struct{}, 1), events: map[string][]feedEvent{}, revs: map[string]int64{}}
	feed := store.NewFeed(watchedStore{d.st, w})
	for _, th := range append([]string{"", store.AgentsTopic}, diffThreads...) {
		s := &feedSub{thread: th, wake: make(chan struct{}, 1), events: map[string][]feedEvent{}, revs: map[string]int64{}, parts: map[string]int{}}
		f.subs = append(f.subs, s)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			err := feed.Follow(ctx, th, s.take)
			if ctx.Err() == nil {
				s.mu.Lock()
				s.err = fmt.Errorf("Follow ended: %v", err)
				s.mu.Unlock()
				s.poke()
			}
		}()
	}
	f.subs = append(f.subs, w)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		err := feed.Watch(ctx, 0, true, w.watched, w.gap, func(thread string, err error) {
			w.mu.Lock()
			w.events[thread] = append(w.events[thread], feedEvent{Kind: "skipped " + err.Error()})
			w.mu.Unlock()
		})
		if ctx.Err() == nil {
			w.mu.Lock()
			w.err = fmt.Errorf("Watch ended: %v", err)
			w.mu.Unlock()
			w.poke()
		}
	}()
	d.feed = f
	// Before the wait, which may fail the run: the readers end with it,
	// and before the store, whose close was registered before.
	r.t.Cleanup(d.stopFeed)
	d.taken = map[*feedSub]map[string]int{}
	d.signals = map[*feedSub]map[string]int{}
	for _, s := range f.subs {
		d.taken[s] = map[string]int{}
		d.signals[s] = map[string]int{}
	}
	r.waitFeed(d, "registered", func(s *feedSub) bool { return s.ready })
}

// stopFeed ends d's feed readers and waits for them.
func (d *diffBackend) stopFeed() {
	if d.feed == nil {
		return
	}
	d.feed.cancel()
	d.feed.wg.Wait()
	d.feed = nil
}

func (s *feedSub) name() string {
	if s.watch {
		return "watch"
	}
	return fmt.Sprintf("reader of %q", s.thread)
}

func (s *feedSub) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take records a batch the reader was handed.
func (s *feedSub) take(b store.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.poke()
	if b.Ready {
		s.ready = true
		return nil
	}
	if b.Participants {
		s.parts[b.Thread]++
	}
	if b.Agents {
		s.agents++
	}
	if b.Participants || b.Agents {
		return nil // no message: counted, not compared (see FuzzStoreDiff)
	}
	evs := s.events[b.Thread]
	if b.Reset {
		evs = append(evs, feedEvent{Kind: "reset"})
	}
	for _, e := range b.Closed {
		evs = append(evs, feedEvent{Kind: "closed", Entry: &entryView{Message: e.Message, Replayed: e.Replayed}, rev: e.Rev})
	}
	for _, e := range b.Messages {
		evs = append(evs, feedEvent{Kind: "message", Entry: &entryView{Message: e.Message, Replayed: e.Replayed}, rev: e.Rev})
		s.revs[b.Thread] = max(s.revs[b.Thread], e.Rev)
	}
	s.events[b.Thread] = evs
	return nil
}

// watchedStore is a store whose Threads marks w ready once it answered.
type watchedStore struct {
	store.Store
	w *feedSub
}

func (s watchedStore) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	infos, err := s.Store.Threads(ctx)
	s.w.mu.Lock()
	s.w.ready = true
	s.w.mu.Unlock()
	s.w.poke()
	return infos, err
}

// watched records what a Watch handed on.
func (s *feedSub) watched(thread string, e store.Entry, update bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.poke()
	kind := "new"
	if update {
		kind = "update"
	}
	s.events[thread] = append(s.events[thread], feedEvent{Kind: kind, Entry: &entryView{Message: e.Message, Replayed: e.Replayed}, rev: e.Rev})
	s.revs[thread] = max(s.revs[thread], e.Rev)
	return nil
}

// gap records a gap a Watch reported.
func (s *feedSub) gap(thread string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events[thread] = append(s.events[thread], feedEvent{Kind: "gap"})
	return nil
}

// handedOn reports whether e is a write handed on (not a Reset, a gap or
// an interaction closed).
func (e feedEvent) handedOn() bool {
	return e.Kind == "message" || e.Kind == "new" || e.Kind == "update"
}

// waitFeed waits until done holds of every reader of d, failing the run
// at feedDeadline or when a reader's Follow ended.
func (r *diffRun) waitFeed(d *diffBackend, what string, done func(s *feedSub) bool) {
	r.t.Helper()
	timer := time.NewTimer(feedDeadline)
	defer timer.Stop()
	for _, s := range d.feed.subs {
		for {
			s.mu.Lock()
			ok, err := done(s), s.err
			s.mu.Unlock()
			if ok {
				break
			}
			if err != nil {
				r.t.Fatalf("the feed of %s (%s) at operation %d, before it was %s: %v\n%s", d.name, s.name(), r.ops, what, err, strings.Join(r.log, "\n"))
			}
			select {
			case <-s.wake:
			case <-timer.C:
				r.t.Fatalf("the feed of %s (%s) was not %s within %v at operation %d\n%s", d.name, s.name(), what, feedDeadline, r.ops, strings.Join(r.log, "\n"))
			}
		}
	}
}

// ack notes a write d's store acknowledged: the feed owes its readers of
// thread this entry, in this state.
func (d *diffBackend) ack(thread string, e store.Entry) {
	if e.Rev <= d.ackRev[thread] {
		return // a change that changed nothing (or an answer of the past)
	}
	d.ackRev[thread] = e.Rev
	d.acks[thread] = append(d.acks[thread], e)
}

// feedCheck waits until every backend's readers were handed what the
// writes since the last check acknowledged, and compares what each reader
// of each thread was handed up to that (the writes, and what came before
// them: Resets, interactions closed), thread by thread (a Sharded store's
// threads have no common order), normalised as the answers are.
func (r *diffRun) feedCheck() {
	r.t.Helper()
	r.signalCheck()
	pending := false
	for _, d := range r.bs {
		for _, acks := range d.acks {
			pending = pending || len(acks) > 0
		}
	}
	if !pending {
		return
	}
	r.each("feed", func(d *diffBackend) string {
		r.waitFeed(d, "handed what was acknowledged", func(s *feedSub) bool {
			for th, acks := range d.acks {
				if len(acks) > 0 && (s.thread == "" || s.thread == th) && s.revs[th] < acks[len(acks)-1].Rev {
					return false
				}
			}
			return true
		})
		var out []string
		for _, th := range diffThreads {
			acks := d.acks[th]
			if len(acks) == 0 {
				continue
			}
			want := acks[len(acks)-1].Rev
			var wantJSON []string
			for _, e := range acks {
				js, _ := json.Marshal(entryView{Message: e.Message})
				wantJSON = append(wantJSON, string(js))
			}
			for _, s := range d.feed.subs {
				if s.thread != "" && s.thread != th {
					continue
				}
				s.mu.Lock()
				evs := s.events[th][d.taken[s][th]:]
				s.mu.Unlock()
				cut := slices.IndexFunc(evs, func(e feedEvent) bool { return e.handedOn() && e.rev == want })
				evs = evs[:cut+1]
				d.taken[s][th] += cut + 1
				var got []string
				for _, e := range evs {
					if e.handedOn() {
						js, _ := json.Marshal(e.Entry)
						got = append(got, string(js))
					}
				}
				var bad []string
				if !slices.Equal(got, wantJSON) {
					bad = append(bad, fmt.Sprintf("the %s was handed the messages\n    %s\n  where the store acknowledged\n    %s",
						s.name(), strings.Join(got, "\n    "), strings.Join(wantJSON, "\n    ")))
				}
				out = append(out, fmt.Sprintf("%s (%s): %s", th, s.name(), d.answer(evs, nil, bad)))
			}
			d.acks[th] = nil
		}
		return strings.Join(out, "\n  ")
	})
}

// signalCheck waits until every backend's readers were handed a
// Participants batch of each thread whose participants record a write
// changed (an invite: the readers of every thread and of that thread)
// and an Agents batch after an agent key was added (the readers of
// AgentsTopic), since the last check. How many each was handed is not
// compared: a backend may announce more (after a feed loss, the file
// store's watch of its own write), never fewer.
func (r *diffRun) signalCheck() {
	r.t.Helper()
	for _, d := range r.bs {
		if len(d.partsOwed) == 0 && !d.agentsOwed {
			continue
		}
		r.waitFeed(d, "handed the participants and agent keys changes acknowledged", func(s *feedSub) bool {
			for th := range d.partsOwed {
				if !s.watch && (s.thread == "" || s.thread == th) && s.parts[th] <= d.signals[s][th] {
					return false
				}
			}
			return !d.agentsOwed || s.thread != store.AgentsTopic || s.agents > d.signals[s][store.AgentsTopic]
		})
		for _, s := range d.feed.subs {
			s.mu.Lock()
			for th, n := range s.parts {
				d.signals[s][th] = n
			}
			d.signals[s][store.AgentsTopic] = s.agents
			s.mu.Unlock()
		}
		clear(d.partsOwed)
		d.agentsOwed = false
	}
}
