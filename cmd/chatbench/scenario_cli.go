package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync/atomic"
	"time"
)

// S6: the host CLI replies from another process; a live SSE and a live
// WebSocket subscriber of the thread each time it lands.
func (b *bench) s6(ctx context.Context, r *result) {
	cfg := b.cfg
	if cfg.chatrelayBin == "" || (cfg.data == "") == (cfg.store == "") {
		r.err = errors.New("S6 needs --chatrelay-bin and either --data (the server's data folder) or --store (its store)")
		return
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
		return
	}
	subs := makeSubs(threads, 2, "mixed")
	var got [2]atomic.Int64 // per subscriber: the newest reply seq received + 1
	k := &sink{tag: tag}
	k.onMsg = func(s *subscriber, seq int) { got[s.idx].Store(int64(seq) + 1) }
	f, _, err := b.openFleet(ctx, subs, k, true)
	defer f.close()
	if err != nil {
		r.err = err
		return
	}
	var proc hist
	var failed failures
	u := b.startUsage()
	for i := 0; i < cfg.replies && ctx.Err() == nil; i++ {
		text := string(benchText(nil, tag, i, nowNS(), cfg.textSize))
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t0 := time.Now()
		out, err := exec.CommandContext(cctx, cfg.chatrelayBin, append(where, "--fsync", cfg.replyFsync, th.id, text)...).CombinedOutput()
		proc.Record(time.Since(t0))
		cancel()
		if err != nil {
			failed.add(fmt.Sprintf("%v: %s", err, bytes.TrimSpace(out)))
			continue
		}
		waitFor(ctx, 5*time.Second, func() bool { return got[0].Load() > int64(i) && got[1].Load() > int64(i) })
	}
	u.stop()
	replied := int64(cfg.replies) - failed.n.Load()
	r.int("replies", replied)
	r.ratio("delivered", k.got.Load(), 2*replied)
	r.latency("", &k.lat)
	r.ms("reply_process_p50", proc.Quantile(0.50))
	r.cpu(u, "", 0)
	failed.report(r, "reply_errors", "reply")
}
