package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
)

// bench runs scenarios against one server.
type bench struct {
	cfg    *config
	t      *target
	pid    string   // server pid for /proc, or ""
	bePIDs []string // backend (redis-server) pids for /proc, one per shard, or none
	nofile uint64
	log    io.Writer
	fan    *fanSet // S1/S2's threads and subscribers, kept open from S1 to S2
}

// startUsage starts a CPU meter of the tool, the server and the backend.
func (b *bench) startUsage() *usage { return startUsage(b.pid, b.bePIDs) }

// scenarioRuns are the scenarios by id: the name of each one's result,
// and its run, which fills the result in.
var scenarioRuns = map[string]struct {
	name string
	run  func(b *bench, ctx context.Context, r *result)
}{
	"S1": {"latency", (*bench).s1},
	"S2": {"throughput", (*bench).s2},
	"S3": {"idle", (*bench).s3},
	"S4": {"poll", (*bench).s4},
	"S5": {"resume", (*bench).s5},
	"S6": {"host-reply", (*bench).s6},
	"S7": {"v2", (*bench).s7},
}

func (b *bench) runScenario(ctx context.Context, id string) *result {
	sc := scenarioRuns[id]
	r := &result{id: id, name: sc.name}
	sc.run(b, ctx, r)
	return r
}

// newTag returns a scenario's message tag, unique to this run, so that
// a backlog of an older run is never counted.
func newTag(id string) string {
	var b [4]byte
	rand.Read(b[:])
	return id + "." + hex.EncodeToString(b[:])
}

// sink counts a scenario's deliveries and records their latency.
type sink struct {
	tag     string
	lat     hist
	got     atomic.Int64 // messages of this tag received
	foreign atomic.Int64 // other messages (an older backlog)
	readyN  atomic.Int64
	onMsg   func(s *subscriber, seq int) // optional; on the subscriber's goroutine
}

func (k *sink) ready(*subscriber, int64) { k.readyN.Add(1) }

func (k *sink) message(s *subscriber, _ int64, text string) {
	seq, sent, ok := parseBenchText(text, k.tag)
	if !ok {
		k.foreign.Add(1)
		return
	}
	k.lat.Record(time.Duration(nowNS() - sent))
	k.got.Add(1)
	if k.onMsg != nil {
		k.onMsg(s, seq)
	}
}

// makeSubs makes total subscribers spread round-robin over threads. With
// mix "mixed" the kinds alternate both along a thread's subscribers and
// across the threads of one round, so that with two per thread each thread
// has one SSE and one WebSocket subscriber, and any count is half and half;
// "sse" or "ws" makes them all of one kind.
func makeSubs(threads []*thread, total int, mix string) []*subscriber {
	subs := make([]*subscriber, total)
	for i := range subs {
		thread, round := i%len(threads), i/len(threads)
		ws := (thread+round)%2 == 1
		switch mix {
		case "sse":
			ws = false
		case "ws":
			ws = true
		}
		subs[i] = &subscriber{idx: i, thread: threads[i%len(threads)], ws: ws}
	}
	return subs
}

// fleet is a set of running subscribers.
type fleet struct {
	subs []*subscriber
	wg   sync.WaitGroup
}

// openFleet starts every subscriber, at most --dial-concurrency connecting
// at once, and waits (at most openLimit) until each has had its ready
// frame.
func (b *bench) openFleet(ctx context.Context, subs []*subscriber, h handler, resume bool) (*fleet, time.Duration, error) {
	f := &fleet{subs: subs}
	start := time.Now()
	sem := make(chan struct{}, b.cfg.dialConc)
	g := &gate{handler: h, sem: sem}
	for _, s := range subs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return f, 0, ctx.Err()
		}
		f.wg.Go(func() {
			s.run(ctx, b.t, g, resume)
			if s.readies.Load() == 0 {
				<-sem // never became ready: free its slot
			}
		})
	}
	err := waitFor(ctx, openLimit(len(subs)), func() bool {
		return f.readyCount() == len(subs) || f.endedCount() == len(subs)
	})
	if n := f.readyCount(); n < len(subs) {
		msg := ""
		if err := f.firstErr(); err != "" {
			msg = ": " + err
		}
		return f, time.Since(start), fmt.Errorf("%d of %d streams opened%s", n, len(subs), msg)
	}
	return f, time.Since(start), err
}

// gate frees a dial slot when a subscriber first becomes ready.
type gate struct {
	handler
	sem chan struct{}
}

func (g *gate) ready(s *subscriber, cursor int64) {
	if s.readies.Load() == 1 {
		<-g.sem
	}
	g.handler.ready(s, cursor)
}

// update hands a v2 stream's update on, if the handler takes updates.
func (g *gate) update(s *subscriber, m *message) {
	if u, ok := g.handler.(updater); ok {
		u.update(s, m)
	}
}

func (f *fleet) readyCount() int {
	n := 0
	for _, s := range f.subs {
		if s.readies.Load() > 0 {
			n++
		}
	}
	return n
}

func (f *fleet) endedCount() int {
	n := 0
	for _, s := range f.subs {
		if s.ended.Load() > 0 && s.readies.Load() == 0 {
			n++
		}
	}
	return n
}

// sessionsEnded counts stream ends not caused by the tool: a drop by the
// server, or a failed connection.
func (f *fleet) sessionsEnded() int64 {
	var n int64
	for _, s := range f.subs {
		n += int64(s.ended.Load())
	}
	return n
}

func (f *fleet) firstErr() string {
	for _, s := range f.subs {
		if p := s.lastErr.Load(); p != nil {
			return *p
		}
	}
	return ""
}

// close ends every subscriber and waits for their goroutines.
func (f *fleet) close() {
	for _, s := range f.subs {
		s.close()
	}
	f.wg.Wait()
}

// waitFor polls cond every 10ms until it holds, ctx ends or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// openLimit is how long opening n streams may take.
func openLimit(n int) time.Duration { return 30*time.Second + time.Duration(n)*5*time.Millisecond }

// poster posts (or polls) one request at a time over the keep-alive pool,
// reusing its buffers.
type poster struct {
	hc   apiClient
	size int // text size of a post, bytes
	text []byte
	body []byte
	rng  *mrand.Rand
}

func (b *bench) newPosters(n int) []*poster {
	ps := make([]*poster, n)
	for i := range ps {
		ps[i] = &poster{hc: apiClient{t: b.t}, size: b.cfg.textSize, rng: mrand.New(mrand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))}
	}
	return ps
}

// closePosters closes the idle keep-alive connections (of every poster:
// they share one pool).
func closePosters(ps []*poster) {
	if len(ps) > 0 {
		ps[0].hc.t.closeIdle()
	}
}

// post sends one tool message to th and returns its epoch and id.
func (p *poster) post(ctx context.Context, th *thread, tag string, seq int) (epoch int64, id string, err error) {
	p.text = benchText(p.text[:0], tag, seq, nowNS(), p.size)
	if pe := p.hc.t.peer; pe != nil {
		epoch, err = pe.post(ctx, &p.hc, th, p.text)
		return epoch, "", err
	}
	p.body = postBody(p.body[:0], p.text)
	resp, err := p.hc.do(ctx, http.MethodPost, chatrelay.PathPost, th.token, p.body)
	if err != nil {
		return 0, "", err
	}
	var m message
	if err := json.Unmarshal(resp, &m); err != nil || m.Epoch <= 0 || m.ID == "" {
		return 0, "", fmt.Errorf("post answer without epoch or id: %q", resp)
	}
	return m.Epoch, m.ID, nil
}

// postStats counts posts by outcome: stored, rate-limited (429), failed
// (with the last failure's error).
type postStats struct {
	ok, limited atomic.Int64
	failed      failures
}

func (ps *postStats) count(err error) {
	switch {
	case err == nil:
		ps.ok.Add(1)
	case statusOf(err) == http.StatusTooManyRequests:
		ps.limited.Add(1)
	default:
		ps.failed.add(err.Error())
	}
}

// report adds the refused and failed calls to r, if any; what names the
// calls ("post", "reaction") in the keys and the note, so that two kinds
// counted in one scenario keep their keys apart.
func (ps *postStats) report(r *result, what string) {
	if n := ps.limited.Load(); n > 0 {
		key := "rate_limited"
		if what != "post" {
			key = what + "s_rate_limited"
		}
		r.int(key, n)
		r.note("raise the server's --rate-thread and --rate-ip")
	}
	ps.failed.report(r, what+"_errors", what)
}

// failures counts the calls of one kind that failed and keeps the last
// one's error. It is safe for concurrent use.
type failures struct {
	n    atomic.Int64
	last atomic.Pointer[string]
}

func (f *failures) add(msg string) {
	f.n.Add(1)
	f.last.Store(&msg)
}

// report adds the count as key, and a note with the last error, if any
// call failed; what names the calls ("poll").
func (f *failures) report(r *result, key, what string) {
	if n := f.n.Load(); n > 0 {
		r.int(key, n)
		r.note("last %s error: %s", what, *f.last.Load())
	}
}

// lateAfter is how far behind its slot a paced call may start before it
// counts as late (every poster was still busy with an earlier call).
const lateAfter = 10 * time.Millisecond

// paced makes total calls of fn, call i at start+i/rate, spread over the
// posters (open loop: a slow answer does not delay the next post's start,
// as long as a poster is free). It returns how many calls started more
// than lateAfter behind their slot: then the posters were too few, and the
// latency of those calls is measured from their late start.
func paced(ctx context.Context, ps []*poster, rate float64, total int, fn func(p *poster, i int)) (late int64) {
	var next, nlate atomic.Int64
	start := time.Now()
	interval := float64(time.Second) / rate
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				d := time.Until(start.Add(time.Duration(float64(i) * interval)))
				if d > 0 {
					time.Sleep(d)
				} else if d < -lateAfter {
					nlate.Add(1)
				}
				fn(p, i)
			}
		})
	}
	wg.Wait()
	return nlate.Load()
}

// flat makes calls of fn as fast as the posters can for d, or until total
// calls (if total > 0).
func flat(ctx context.Context, ps []*poster, d time.Duration, total int, fn func(p *poster, i int)) {
	var next atomic.Int64
	var stop atomic.Bool
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			for ctx.Err() == nil && !stop.Load() {
				i := int(next.Add(1) - 1)
				if total > 0 && i >= total {
					return
				}
				fn(p, i)
			}
		})
	}
	wg.Wait()
}
