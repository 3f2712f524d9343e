package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
)

// S4: pollers. Each poll asks a random thread for its newest 50 messages
// (--poll-since full) or for what is newer than its cursor (cursor: nothing).
func (b *bench) s4(ctx context.Context, r *result) {
	cfg := b.cfg
	threads, cursors, ok := b.s4Fill(ctx, r)
	if !ok {
		return
	}
	want := min(cfg.pollMessages, 50)
	if cfg.pollSince == "cursor" {
		want = 0
	}
	var lat hist
	var polls, bad atomic.Int64
	var failed failures
	pollers := b.newPosters(cfg.pollers)
	defer closePosters(pollers)
	u := b.startUsage()
	flat(ctx, pollers, cfg.pollDuration, 0, func(p *poster, _ int) {
		ti := p.rng.IntN(len(threads))
		path := chatrelay.PathPoll
		if cfg.pollSince == "cursor" {
			p.text = append(append(p.text[:0], chatrelay.PathPoll+"?since="...), strconv.FormatInt(cursors[ti].Load(), 10)...)
			path = string(p.text)
		}
		t0 := time.Now()
		var n int
		var err error
		if pe := b.t.peer; pe != nil {
			n, err = pe.poll(ctx, &p.hc, threads[ti])
		} else {
			var body []byte
			body, err = p.hc.do(ctx, http.MethodGet, path, threads[ti].token, nil)
			n = bytes.Count(body, []byte(`"id":"MSG-`))
		}
		lat.Record(time.Since(t0))
		if err != nil {
			failed.add(err.Error())
			return
		}
		polls.Add(1)
		if n != want {
			bad.Add(1)
		}
	})
	u.stop()
	r.add("since", cfg.pollSince, cfg.pollSince)
	r.int("pollers", int64(cfg.pollers))
	r.int("polls", polls.Load())
	r.num("polls_per_s", float64(polls.Load())/u.Wall.Seconds(), "")
	r.latency("", &lat)
	r.cpu(u, "poll", polls.Load())
	if n := bad.Load(); n > 0 {
		r.int("wrong_pages", n)
		r.note("a poll answer did not hold %d messages", want)
	}
	failed.report(r, "poll_errors", "poll")
}

// s4Fill stores S4's messages (--poll-messages in each of --poll-threads
// threads) and returns the threads with each one's newest epoch; false
// (r.err set) if not every message was stored.
func (b *bench) s4Fill(ctx context.Context, r *result) ([]*thread, []atomic.Int64, bool) {
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
	st.report(r, "post")
	if st.ok.Load() < int64(total) {
		r.err = fmt.Errorf("%d of %d messages stored", st.ok.Load(), total)
		return nil, nil, false
	}
	return threads, cursors, true
}

// recorder keeps every epoch each subscriber receives (S5) and times the
// resume after the drop.
