package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// S3: idle streams. The server's RSS before and after opening them gives
// the memory of one idle stream; a message to every thread at the end shows
// that every stream is still alive.
func (b *bench) s3(ctx context.Context, r *result) {
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
	f, setup, err := b.openFleet(ctx, subs, k, false)
	defer f.close()
	if err != nil {
		r.err = err
		return
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
	st.report(r, "post")
}
