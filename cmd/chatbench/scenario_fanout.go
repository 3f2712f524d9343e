package main

import (
	"context"
	"sync/atomic"
	"time"
)

// S1 and S2: a thousand threads with one SSE and one WebSocket subscriber
// each. The subscribers connect first, to threads that do not exist yet
// (a stream of an empty thread creates nothing); each thread is then
// created by its first post, on the clock, as a new browser tab creates its
// thread with its first message. S1 posts at a fixed rate to random threads
// and measures latency (post sent → frame read, so the publish request is
// in it); S2 follows on the same subscribers with closed-loop posters.
func (b *bench) s1(ctx context.Context, r *result) {
	b.fanout(ctx, r, b.cfg.duration, b.cfg.rate, b.cfg.s1Posters)
}

func (b *bench) s2(ctx context.Context, r *result) {
	b.fanout(ctx, r, b.cfg.s2Duration, 0, b.cfg.posters)
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
	fs.f, fs.setup, fs.err = b.openFleet(ctx, subs, &fs.to, true)
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

func (b *bench) fanout(ctx context.Context, r *result, d time.Duration, rate float64, posters int) {
	cfg := b.cfg
	fs, fresh := b.fanSet(ctx)
	threads, f := fs.threads, fs.f
	r.int("threads", int64(len(threads)))
	r.int("subs", int64(len(f.subs)))
	if fs.err != nil {
		r.err = fs.err
		return
	}
	if fresh {
		r.ms("setup", fs.setup)
	} else {
		r.add("subscribers", "S1's", "S1's")
	}
	k := &sink{tag: newTag(r.id)}
	fs.to.cur.Store(k)

	ps := b.newPosters(posters)
	defer closePosters(ps)
	ended0 := f.sessionsEnded()
	var fp fanPosts
	st := &fp.st
	post := func(p *poster, i int) { fp.post(ctx, threads, k.tag, p, i) }
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
	r.int("threads_created", fp.created.Load())
	r.ratio("delivered", got, want)
	r.int("lost", max(want-got, 0))
	r.latency("", &k.lat)
	fp.reportRT(r)
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
	st.report(r, "post")
	if drainErr != nil && got < want {
		r.note("deliveries still missing %s after posting stopped", cfg.drain)
	}
}

// fanPosts is what S1's and S2's posts record: their outcomes, the
// threads they created, and each post request's round trip, apart for the
// posts that create their thread.
type fanPosts struct {
	st               postStats
	created          atomic.Int64
	postRT, createRT hist
}

// post posts to a random thread of threads; the first post to a thread
// creates it.
func (fp *fanPosts) post(ctx context.Context, threads []*thread, tag string, p *poster, i int) {
	th := threads[p.rng.IntN(len(threads))]
	first := th.created.CompareAndSwap(false, true)
	t0 := time.Now()
	_, _, err := p.post(ctx, th, tag, i)
	rt := time.Since(t0)
	fp.st.count(err)
	switch {
	case err != nil && first:
		th.created.Store(false)
	case first:
		fp.created.Add(1)
		fp.createRT.Record(rt)
	case err == nil:
		fp.postRT.Record(rt)
	}
}

// reportRT adds the post requests' round trips to r.
func (fp *fanPosts) reportRT(r *result) {
	r.ms("post_rt_p50", fp.postRT.Quantile(0.50))
	r.ms("post_rt_p99", fp.postRT.Quantile(0.99))
	if fp.createRT.Count() > 0 {
		r.ms("create_rt_p50", fp.createRT.Quantile(0.50))
		r.ms("create_rt_p99", fp.createRT.Quantile(0.99))
	}
}
