package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// bench runs scenarios against one server.
type bench struct {
	cfg    *config
	t      *target
	pid    string // server pid for /proc, or ""
	bePID  string // backend (redis-server) pid for /proc, or ""
	nofile uint64
	log    io.Writer
	fan    *fanSet // S1/S2's threads and subscribers, kept open from S1 to S2
}

// startUsage starts a CPU meter of the tool, the server and the backend.
func (b *bench) startUsage() *usage { return startUsage(b.pid, b.bePID) }

func (b *bench) runScenario(ctx context.Context, id string) *result {
	var r *result
	switch id {
	case "S1":
		r = b.s1(ctx)
	case "S2":
		r = b.s2(ctx)
	case "S3":
		r = b.s3(ctx)
	case "S4":
		r = b.s4(ctx)
	case "S5":
		r = b.s5(ctx)
	case "S6":
		r = b.s6(ctx)
	case "S7":
		r = b.s7(ctx)
	}
	r.id = id
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
// at once, and waits (at most limit) until each has had its ready frame.
func (b *bench) openFleet(ctx context.Context, subs []*subscriber, h handler, resume bool, limit time.Duration) (*fleet, time.Duration, error) {
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
	err := waitFor(ctx, limit, func() bool {
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
	p.body = postBody(p.body[:0], p.text)
	resp, err := p.hc.do(ctx, http.MethodPost, "/api/chat/post", th.token, p.body)
	if err != nil {
		return 0, "", err
	}
	var m message
	if err := json.Unmarshal(resp, &m); err != nil || m.Epoch <= 0 || m.ID == "" {
		return 0, "", fmt.Errorf("post answer without epoch or id: %q", resp)
	}
	return m.Epoch, m.ID, nil
}

// postStats counts posts by outcome.
type postStats struct {
	ok, limited, failed atomic.Int64
	lastErr             atomic.Pointer[string]
}

func (ps *postStats) count(err error) {
	if err == nil {
		ps.ok.Add(1)
		return
	}
	if statusOf(err) == http.StatusTooManyRequests {
		ps.limited.Add(1)
	} else {
		ps.failed.Add(1)
	}
	msg := err.Error()
	ps.lastErr.Store(&msg)
}

func (ps *postStats) report(r *result) {
	if n := ps.limited.Load(); n > 0 {
		r.int("rate_limited", n)
		r.note("raise the server's --rate-thread and --rate-ip")
	}
	if n := ps.failed.Load(); n > 0 {
		r.int("post_errors", n)
		r.note("last post error: %s", *ps.lastErr.Load())
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

// S1 and S2: a thousand threads with one SSE and one WebSocket subscriber
// each. The subscribers connect first, to threads that do not exist yet
// (a stream of an empty thread creates nothing); each thread is then
// created by its first post, on the clock, as a new browser tab creates its
// thread with its first message. S1 posts at a fixed rate to random threads
// and measures latency (post sent → frame read, so the publish request is
// in it); S2 follows on the same subscribers with closed-loop posters.
func (b *bench) s1(ctx context.Context) *result {
	return b.fanout(ctx, "S1", "latency", b.cfg.duration, b.cfg.rate, b.cfg.s1Posters)
}

func (b *bench) s2(ctx context.Context) *result {
	return b.fanout(ctx, "S2", "throughput", b.cfg.s2Duration, 0, b.cfg.posters)
}

// fanSet is S1/S2's threads and their subscribers. It stays open from S1
// to S2 (closeFan ends it), so S2 runs on S1's subscribers and threads.
type fanSet struct {
	threads []*thread
	f       *fleet
	to      switchSink
	setup   time.Duration
	err     error
}

// switchSink hands a fleet's frames to the current scenario's sink.
type switchSink struct{ cur atomic.Pointer[sink] }

func (w *switchSink) ready(s *subscriber, c int64) {
	if k := w.cur.Load(); k != nil {
		k.ready(s, c)
	}
}

func (w *switchSink) message(s *subscriber, e int64, text string) {
	if k := w.cur.Load(); k != nil {
		k.message(s, e, text)
	}
}

// fanSet returns S1/S2's set, opening it (and reporting fresh=true) if no
// earlier scenario did.
func (b *bench) fanSet(ctx context.Context) (fs *fanSet, fresh bool) {
	if b.fan != nil {
		return b.fan, false
	}
	cfg := b.cfg
	fs = &fanSet{threads: newThreads(cfg.threads)}
	subs := makeSubs(fs.threads, cfg.threads*cfg.subs, "mixed")
	fs.f, fs.setup, fs.err = b.openFleet(ctx, subs, &fs.to, true, openLimit(len(subs)))
	b.fan = fs
	return fs, true
}

// closeFan ends S1/S2's subscribers, if they are open.
func (b *bench) closeFan() {
	if b.fan != nil {
		b.fan.f.close()
		b.fan = nil
	}
}

func (b *bench) fanout(ctx context.Context, id, name string, d time.Duration, rate float64, posters int) *result {
	r := &result{name: name}
	cfg := b.cfg
	fs, fresh := b.fanSet(ctx)
	threads, f := fs.threads, fs.f
	r.int("threads", int64(len(threads)))
	r.int("subs", int64(len(f.subs)))
	if fs.err != nil {
		r.err = fs.err
		return r
	}
	if fresh {
		r.ms("setup", fs.setup)
	} else {
		r.add("subscribers", "S1's", "S1's")
	}
	k := &sink{tag: newTag(id)}
	fs.to.cur.Store(k)

	ps := b.newPosters(posters)
	defer closePosters(ps)
	ended0 := f.sessionsEnded()
	var st postStats
	var created atomic.Int64
	var postRT, createRT hist // the post request's round trip, of posts that (do not) create their thread
	post := func(p *poster, i int) {
		th := threads[p.rng.IntN(len(threads))]
		first := th.created.CompareAndSwap(false, true)
		t0 := time.Now()
		_, _, err := p.post(ctx, th, k.tag, i)
		rt := time.Since(t0)
		st.count(err)
		switch {
		case err != nil && first:
			th.created.Store(false)
		case first:
			created.Add(1)
			createRT.Record(rt)
		case err == nil:
			postRT.Record(rt)
		}
	}
	u := b.startUsage()
	var late int64
	if rate > 0 {
		late = paced(ctx, ps, rate, int(rate*d.Seconds()), post)
	} else {
		flat(ctx, ps, d, 0, post)
	}
	window := time.Since(u.wall0)
	gotInWindow := k.got.Load()
	want := st.ok.Load() * int64(cfg.subs)
	drainErr := waitFor(ctx, cfg.drain, func() bool { return k.got.Load() >= want })
	u.stop()

	got := k.got.Load()
	r.int("posters", int64(posters))
	r.int("posts", st.ok.Load())
	r.num("posts_per_s", float64(st.ok.Load())/window.Seconds(), "")
	if rate == 0 {
		r.num("deliveries_per_s", float64(gotInWindow)/window.Seconds(), "")
	}
	r.int("threads_created", created.Load())
	r.ratio("delivered", got, want)
	r.int("lost", max(want-got, 0))
	r.ms("p50", k.lat.Quantile(0.50))
	r.ms("p99", k.lat.Quantile(0.99))
	r.ms("max", k.lat.Max())
	r.ms("post_rt_p50", postRT.Quantile(0.50))
	r.ms("post_rt_p99", postRT.Quantile(0.99))
	if createRT.Count() > 0 {
		r.ms("create_rt_p50", createRT.Quantile(0.50))
		r.ms("create_rt_p99", createRT.Quantile(0.99))
	}
	r.cpu(u, "post", st.ok.Load())
	if late > 0 {
		r.int("late_posts", late)
		r.note("%d posts started more than %s behind their slot: every poster was busy", late, lateAfter)
	}
	if n := f.sessionsEnded() - ended0; n > 0 {
		r.int("stream_drops", n)
		r.note("streams ended during the run and resumed from their cursor: %s", f.firstErr())
	}
	if n := k.foreign.Load(); n > 0 {
		r.int("foreign", n)
	}
	st.report(r)
	if drainErr != nil && got < want {
		r.note("deliveries still missing %s after posting stopped", cfg.drain)
	}
	return r
}

// S3: idle streams. The server's RSS before and after opening them gives
// the memory of one idle stream; a message to every thread at the end shows
// that every stream is still alive.
func (b *bench) s3(ctx context.Context) *result {
	r := &result{name: "idle"}
	cfg := b.cfg
	threads := newThreads(cfg.idleThreads)
	subs := makeSubs(threads, cfg.idle, cfg.idleMix)
	nws := 0
	for _, s := range subs {
		if s.ws {
			nws++
		}
	}
	r.int("streams", int64(len(subs)))
	r.int("sse", int64(len(subs)-nws))
	r.int("ws", int64(nws))
	if need := uint64(len(subs)) + 100; b.nofile < need {
		r.note("this tool's open-file limit %d is below the %d it needs", b.nofile, need)
	}
	var before int64
	if b.pid != "" {
		if n, err := procNoFile(b.pid); err == nil && n < int64(len(subs))+100 {
			r.note("the server's open-file limit %d is below the %d streams: raise it with ulimit -n", n, len(subs))
		}
		time.Sleep(time.Second) // let the server settle before the baseline
		before, _ = procStatus(b.pid, "VmRSS")
	}
	var alive sync.Map // *subscriber → true once the final message arrived
	var aliveN atomic.Int64
	k := &sink{tag: newTag("S3")}
	k.onMsg = func(s *subscriber, _ int) {
		if _, loaded := alive.LoadOrStore(s, true); !loaded {
			aliveN.Add(1)
		}
	}
	u := b.startUsage()
	f, setup, err := b.openFleet(ctx, subs, k, false, openLimit(len(subs)))
	defer f.close()
	if err != nil {
		r.err = err
		return r
	}
	r.ms("setup", setup)
	select {
	case <-ctx.Done():
	case <-time.After(cfg.idleHold):
	}
	u.stop()
	if b.pid != "" {
		after, _ := procStatus(b.pid, "VmRSS")
		r.num("server_rss_before_mib", float64(before)/1024, "")
		r.num("server_rss_after_mib", float64(after)/1024, "")
		r.num("kib_per_stream", float64(after-before)/float64(len(subs)), "")
		if th, err := procStatus(b.pid, "Threads"); err == nil {
			r.int("server_os_threads", th)
		}
	}
	if rss, err := procStatus("self", "VmRSS"); err == nil {
		r.num("bench_rss_mib", float64(rss)/1024, "")
	}
	r.cpu(u, "", 0)
	// Alive: one message to each thread reaches every stream.
	ps := b.newPosters(cfg.posters)
	defer closePosters(ps)
	var st postStats
	flat(ctx, ps, time.Hour, len(threads), func(p *poster, i int) {
		_, _, err := p.post(ctx, threads[i], k.tag, i)
		st.count(err)
	})
	waitFor(ctx, cfg.drain, func() bool { return aliveN.Load() >= int64(len(subs)) })
	r.ratio("alive", aliveN.Load(), int64(len(subs)))
	if n := f.sessionsEnded(); n > 0 {
		r.int("stream_drops", n)
		r.note("streams ended while idle: %s", f.firstErr())
	}
	st.report(r)
	return r
}

// procNoFile is the soft open-file limit of process pid.
func procNoFile(pid string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil {
		return 0, err
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("Max open files")); ok {
			f := bytes.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(string(f[0]), 10, 64)
			}
		}
	}
	return 0, errors.New("no open-file limit")
}

// S4: pollers. Each poll asks a random thread for its newest 50 messages
// (--poll-since full) or for what is newer than its cursor (cursor: nothing).
func (b *bench) s4(ctx context.Context) *result {
	r := &result{name: "poll"}
	cfg := b.cfg
	threads := newThreads(cfg.pollThreads)
	tag := newTag("S4")
	ps := b.newPosters(cfg.posters)
	defer closePosters(ps)
	var st postStats
	cursors := make([]atomic.Int64, len(threads))
	total := len(threads) * cfg.pollMessages
	flat(ctx, ps, time.Hour, total, func(p *poster, i int) {
		ti := i % len(threads)
		epoch, _, err := p.post(ctx, threads[ti], tag, i)
		st.count(err)
		for {
			c := cursors[ti].Load()
			if epoch <= c || cursors[ti].CompareAndSwap(c, epoch) {
				break
			}
		}
	})
	r.int("threads", int64(len(threads)))
	r.int("messages", st.ok.Load())
	st.report(r)
	if st.ok.Load() < int64(total) {
		r.err = fmt.Errorf("%d of %d messages stored", st.ok.Load(), total)
		return r
	}
	want := min(cfg.pollMessages, 50)
	if cfg.pollSince == "cursor" {
		want = 0
	}
	var lat hist
	var polls, bad, failed atomic.Int64
	var lastErr atomic.Pointer[string]
	pollers := b.newPosters(cfg.pollers)
	defer closePosters(pollers)
	u := b.startUsage()
	flat(ctx, pollers, cfg.pollDuration, 0, func(p *poster, _ int) {
		ti := p.rng.IntN(len(threads))
		path := "/api/chat/poll"
		if cfg.pollSince == "cursor" {
			p.text = append(append(p.text[:0], "/api/chat/poll?since="...), strconv.FormatInt(cursors[ti].Load(), 10)...)
			path = string(p.text)
		}
		t0 := time.Now()
		body, err := p.hc.do(ctx, http.MethodGet, path, threads[ti].token, nil)
		lat.Record(time.Since(t0))
		if err != nil {
			failed.Add(1)
			msg := err.Error()
			lastErr.Store(&msg)
			return
		}
		polls.Add(1)
		if bytes.Count(body, []byte(`"id":"MSG-`)) != want {
			bad.Add(1)
		}
	})
	u.stop()
	r.add("since", cfg.pollSince, cfg.pollSince)
	r.int("pollers", int64(cfg.pollers))
	r.int("polls", polls.Load())
	r.num("polls_per_s", float64(polls.Load())/u.Wall.Seconds(), "")
	r.ms("p50", lat.Quantile(0.50))
	r.ms("p99", lat.Quantile(0.99))
	r.ms("max", lat.Max())
	r.cpu(u, "poll", polls.Load())
	if n := bad.Load(); n > 0 {
		r.int("wrong_pages", n)
		r.note("a poll answer did not hold %d messages", want)
	}
	if n := failed.Load(); n > 0 {
		r.int("poll_errors", n)
		r.note("last poll error: %s", *lastErr.Load())
	}
	return r
}

// recorder keeps every epoch each subscriber receives (S5) and times the
// resume after the drop.
type recorder struct {
	tag       string
	dropAt    atomic.Int64 // nowNS of the drop; 0 before
	resumed   atomic.Int64 // subscribers ready again after the drop
	lastReady atomic.Int64 // nowNS of the latest such ready
	foreign   atomic.Int64
}

func (k *recorder) ready(s *subscriber, _ int64) {
	if k.dropAt.Load() != 0 && s.readies.Load() == 2 {
		k.resumed.Add(1)
		now := nowNS()
		for {
			m := k.lastReady.Load()
			if now <= m || k.lastReady.CompareAndSwap(m, now) {
				break
			}
		}
	}
}

func (k *recorder) message(s *subscriber, epoch int64, text string) {
	if _, _, ok := parseBenchText(text, k.tag); !ok {
		k.foreign.Add(1)
		return
	}
	s.epochs = append(s.epochs, epoch) // only this subscriber's goroutine appends
}

// S5: every subscriber drops at once and resumes from its cursor while
// posts continue; each must then have every acknowledged post of its thread
// exactly once, in order.
func (b *bench) s5(ctx context.Context) *result {
	r := &result{name: "resume"}
	cfg := b.cfg
	threads := newThreads(cfg.stormThreads)
	subs := makeSubs(threads, cfg.storm, "mixed")
	k := &recorder{tag: newTag("S5")}
	f, setup, err := b.openFleet(ctx, subs, k, true, openLimit(len(subs)))
	defer f.close()
	r.int("subs", int64(len(subs)))
	r.int("threads", int64(len(threads)))
	if err != nil {
		r.err = err
		return r
	}
	r.ms("setup", setup)

	// Post steadily until stopPosting, recording each acknowledged epoch.
	ps := b.newPosters(16)
	defer closePosters(ps)
	var st postStats
	var stopPosting atomic.Bool
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	postDone := make(chan struct{})
	maxPosts := int(cfg.stormRate * (cfg.stormBefore + cfg.stormAfter + 60*time.Second).Seconds())
	go func() {
		defer close(postDone)
		paced(pctx, ps, cfg.stormRate, maxPosts, func(p *poster, i int) {
			if stopPosting.Load() {
				return
			}
			th := threads[p.rng.IntN(len(threads))]
			// ctx, not pctx: pcancel stops the pacing, never a post in
			// flight (its message would be stored but not acknowledged).
			epoch, _, err := p.post(ctx, th, k.tag, i)
			st.count(err)
			if err == nil {
				th.mu.Lock()
				th.acked = append(th.acked, epoch)
				th.mu.Unlock()
			}
		})
	}()
	u := b.startUsage()
	sleep(ctx, cfg.stormBefore)

	// The storm: every connection closes at once; each reader resumes from
	// its cursor on its own.
	k.dropAt.Store(nowNS())
	for _, s := range subs {
		s.drop()
	}
	liveErr := waitFor(ctx, 60*time.Second, func() bool { return k.resumed.Load() >= int64(len(subs)) })
	allLive := time.Duration(k.lastReady.Load() - k.dropAt.Load())
	sleep(ctx, cfg.stormAfter)
	stopPosting.Store(true)
	pcancel()
	<-postDone

	// Drain: every subscriber has its thread's newest acknowledged epoch.
	newest := make([]int64, len(threads))
	for i, th := range threads {
		th.mu.Lock()
		slices.Sort(th.acked)
		if n := len(th.acked); n > 0 {
			newest[i] = th.acked[n-1]
		}
		th.mu.Unlock()
	}
	waitFor(ctx, cfg.drain, func() bool {
		for _, s := range subs {
			if s.cursor.Load() < newest[s.thread.idx] {
				return false
			}
		}
		return true
	})
	u.stop()
	f.close()

	var c check
	for _, s := range subs {
		c.add(s.thread.acked, s.epochs)
	}
	r.int("posts", st.ok.Load())
	r.int("deliveries", c.received)
	r.ratio("live_again", k.resumed.Load(), int64(len(subs)))
	if liveErr == nil {
		r.ms("all_live_after", allLive)
	} else {
		r.note("not every subscriber was live again within 60s")
	}
	r.int("lost", c.lost)
	r.int("repeated", c.repeated)
	if c.outOfOrder > 0 {
		r.int("out_of_order", c.outOfOrder)
	}
	if c.unexpected > 0 {
		r.int("unacknowledged", c.unexpected)
		r.note("messages received whose post was not acknowledged (a post that failed in the tool)")
	}
	var partial int64
	for _, s := range subs {
		partial += int64(s.partial.Load())
	}
	if partial > 0 {
		r.int("sse_cut_events", partial)
	}
	r.cpu(u, "", 0)
	st.report(r)
	return r
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// check compares what subscribers received with what was acknowledged.
type check struct {
	received, lost, repeated, outOfOrder, unexpected int64
}

// add checks one subscriber: acked is its thread's acknowledged epochs,
// ascending; got is what it received, in order of arrival.
func (c *check) add(acked, got []int64) {
	seen := make(map[int64]bool, len(got))
	var prev int64
	for _, e := range got {
		c.received++
		if seen[e] {
			c.repeated++
			continue
		}
		seen[e] = true
		if e <= prev {
			c.outOfOrder++
		}
		prev = max(prev, e)
		if _, ok := slices.BinarySearch(acked, e); !ok {
			c.unexpected++
		}
	}
	for _, e := range acked {
		if !seen[e] {
			c.lost++
		}
	}
}

// S6: the host CLI replies from another process; a live SSE and a live
// WebSocket subscriber of the thread each time it lands.
func (b *bench) s6(ctx context.Context) *result {
	r := &result{name: "host-reply"}
	cfg := b.cfg
	if cfg.chatrelayBin == "" || (cfg.data == "") == (cfg.store == "") {
		r.err = errors.New("S6 needs --chatrelay-bin and either --data (the server's data folder) or --store (its store)")
		return r
	}
	where := []string{"reply", "--data", cfg.data}
	if cfg.store != "" {
		where = []string{"reply", "--store", cfg.store}
	}
	threads := newThreads(1)
	th := threads[0]
	ps := b.newPosters(1)
	defer closePosters(ps)
	tag := newTag("S6")
	if _, _, err := ps[0].post(ctx, th, tag+"x", 0); err != nil { // the thread must exist for reply
		r.err = fmt.Errorf("create the thread: %w", err)
		return r
	}
	subs := makeSubs(threads, 2, "mixed")
	var got [2]atomic.Int64 // per subscriber: the newest reply seq received + 1
	k := &sink{tag: tag}
	k.onMsg = func(s *subscriber, seq int) { got[s.idx].Store(int64(seq) + 1) }
	f, _, err := b.openFleet(ctx, subs, k, true, openLimit(2))
	defer f.close()
	if err != nil {
		r.err = err
		return r
	}
	var proc hist
	var failed int64
	var lastErr string
	u := b.startUsage()
	for i := 0; i < cfg.replies && ctx.Err() == nil; i++ {
		text := string(benchText(nil, tag, i, nowNS(), cfg.textSize))
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t0 := time.Now()
		out, err := exec.CommandContext(cctx, cfg.chatrelayBin, append(where, "--fsync", cfg.replyFsync, th.id, text)...).CombinedOutput()
		proc.Record(time.Since(t0))
		cancel()
		if err != nil {
			failed++
			lastErr = fmt.Sprintf("%v: %s", err, bytes.TrimSpace(out))
			continue
		}
		waitFor(ctx, 5*time.Second, func() bool { return got[0].Load() > int64(i) && got[1].Load() > int64(i) })
	}
	u.stop()
	r.int("replies", int64(cfg.replies)-failed)
	r.ratio("delivered", k.got.Load(), 2*(int64(cfg.replies)-failed))
	r.ms("p50", k.lat.Quantile(0.50))
	r.ms("p99", k.lat.Quantile(0.99))
	r.ms("max", k.lat.Max())
	r.ms("reply_process_p50", proc.Quantile(0.50))
	r.cpu(u, "", 0)
	if failed > 0 {
		r.int("reply_errors", failed)
		r.note("last reply error: %s", lastErr)
	}
	return r
}
