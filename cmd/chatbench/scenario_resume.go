package main

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
)

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
func (b *bench) s5(ctx context.Context, r *result) {
	cfg := b.cfg
	threads := newThreads(cfg.stormThreads)
	subs := makeSubs(threads, cfg.storm, "mixed")
	k := &recorder{tag: newTag("S5")}
	f, setup, err := b.openFleet(ctx, subs, k, true)
	defer f.close()
	r.int("subs", int64(len(subs)))
	r.int("threads", int64(len(threads)))
	if err != nil {
		r.err = err
		return
	}
	r.ms("setup", setup)

	ps := b.newPosters(16)
	defer closePosters(ps)
	var st postStats
	stopPosting := b.postSteadily(ctx, ps, threads, k.tag, &st)
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
	stopPosting()
	waitDrained(ctx, cfg.drain, subs, threads)
	u.stop()
	f.close()

	r.int("posts", st.ok.Load())
	reportResume(r, subs, k, liveErr, allLive)
	r.cpu(u, "", 0)
	st.report(r, "post")
}

// postSteadily posts at S5's rate to random threads, recording each
// acknowledged epoch in its thread, until stop (which waits for the
// posting to end).
func (b *bench) postSteadily(ctx context.Context, ps []*poster, threads []*thread, tag string, st *postStats) (stop func()) {
	cfg := b.cfg
	var stopping atomic.Bool
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	maxPosts := int(cfg.stormRate * (cfg.stormBefore + cfg.stormAfter + 60*time.Second).Seconds())
	go func() {
		defer close(done)
		paced(pctx, ps, cfg.stormRate, maxPosts, func(p *poster, i int) {
			if stopping.Load() {
				return
			}
			th := threads[p.rng.IntN(len(threads))]
			// ctx, not pctx: pcancel stops the pacing, never a post in
			// flight (its message would be stored but not acknowledged).
			epoch, _, err := p.post(ctx, th, tag, i)
			st.count(err)
			if err == nil {
				th.mu.Lock()
				th.acked = append(th.acked, epoch)
				th.mu.Unlock()
			}
		})
	}()
	return func() {
		stopping.Store(true)
		pcancel()
		<-done
	}
}

// waitDrained waits, at most limit, until every subscriber has its
// thread's newest acknowledged epoch.
func waitDrained(ctx context.Context, limit time.Duration, subs []*subscriber, threads []*thread) {
	newest := make([]int64, len(threads))
	for i, th := range threads {
		th.mu.Lock()
		slices.Sort(th.acked)
		if n := len(th.acked); n > 0 {
			newest[i] = th.acked[n-1]
		}
		th.mu.Unlock()
	}
	waitFor(ctx, limit, func() bool {
		for _, s := range subs {
			if s.cursor.Load() < newest[s.thread.idx] {
				return false
			}
		}
		return true
	})
}

// reportResume checks what every subscriber received against what was
// acknowledged in its thread, and how the resume went.
func reportResume(r *result, subs []*subscriber, k *recorder, liveErr error, allLive time.Duration) {
	var c check
	for _, s := range subs {
		c.add(s.thread.acked, s.epochs)
	}
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
