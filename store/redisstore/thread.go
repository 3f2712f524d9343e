package redisstore

import (
	"github.com/chatrelay/chatrelay"

	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay/store"
)

// idCandidates is how many id suffixes an append offers the script. All
// of them are taken only if the thread already holds that many messages
// in the same second with colliding suffixes (odds of 1 in 2^24 each).
const idCandidates = 4

// maxEpoch bounds epochs: Lua computes them in doubles, exact below 2^53.
const maxEpoch = 1 << 53

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	if err := checkThread(thread); err != nil {
		return store.Entry{}, err
	}
	if err := chatrelay.CheckText(m.Text); err != nil {
		return store.Entry{}, err
	}
	if m.Author == "" {
		m.Author = chatrelay.Operator
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for {
		suffixes := make([]string, idCandidates)
		for i := range suffixes {
			suffixes[i] = randomHex(3)
		}
		res, err := s.runAppend(ctx, thread, m, suffixes)
		if err != nil {
			return store.Entry{}, s.unavailable("append", err)
		}
		switch res[0] {
		case "ok":
			if len(res) != 4 {
				break
			}
			e, err := parseEntry(res[3])
			if err != nil {
				return store.Entry{}, s.unavailable("append", fmt.Errorf("stored message: %w", err))
			}
			return e, nil
		case "not_found":
			return store.Entry{}, chatrelay.Errorf(chatrelay.NotFound, "no thread %s", thread)
		case "thread_limit":
			return store.Entry{}, chatrelay.Errorf(chatrelay.ThreadLimit, "thread limit reached")
		case "collision":
			continue
		}
		return store.Entry{}, s.unavailable("append", fmt.Errorf("unexpected answer %q", res))
	}
}

// runAppend runs appendScript once, offering the id suffixes given.
func (s *Store) runAppend(ctx context.Context, thread string, m store.NewMessage, suffixes []string) ([]string, error) {
	must := "0"
	if m.MustExist {
		must = "1"
	}
	keys := []string{s.logKey(thread), s.metaKey(thread), s.index, s.idsKey(thread), s.genKey}
	args := []any{thread, s.now().UnixMilli(), s.opt.Retention.Messages, s.opt.Retention.Age.Milliseconds(),
		s.opt.MaxThreads, must, jsonString(string(m.Author)), jsonString(m.Text), s.feed, s.seen.Load(), randomHex(8)}
	for _, x := range suffixes {
		args = append(args, x)
	}
	return appendScript.Run(ctx, s.rdb, keys, args...).StringSlice()
}

// Since implements store.Store. One MULTI reads the page, the newest
// message, "trimmed" and the generation (gen.go) together. Reset is also
// true for a cursor into data that Redis lost (since <= the generation's
// lost epoch).
func (s *Store) Since(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	if err := checkThread(thread); err != nil {
		return store.Page{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var g generation
	msgs, newest, trimmed, err := s.read(ctx, thread, since, limit, &g)
	if err != nil {
		return store.Page{}, err
	}
	g = s.checkGen(ctx, g, nil)
	p := store.Page{Thread: thread, Messages: msgs}
	if newest != nil {
		p.Cursor = newest.Epoch
		p.Awaiting = newest.Author != chatrelay.Hermes
		s.see(p.Cursor)
	}
	p.Reset = since > 0 && (since < trimmed || since <= g.lost)
	return p, nil
}

// read returns the thread's messages with epoch > since (the newest limit
// of them if limit > 0), oldest first, its newest message (nil if none)
// and its trimmed epoch. If g is not nil, it also reads the generation
// (creating it if it is missing) into *g.
func (s *Store) read(ctx context.Context, thread string, since int64, limit int, g *generation) (msgs []store.Entry, newest *store.Entry, trimmed int64, err error) {
	since = min(max(since, 0), maxEpoch) // epochs are below 2^53; since+1 must not overflow
	log := s.logKey(thread)
	from := strconv.FormatInt(since+1, 10) + "-0"
	var page, last *redis.XMessageSliceCmd
	var trim *redis.StringCmd
	var gen *redis.SliceCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if limit > 0 {
			page = p.XRevRangeN(ctx, log, "+", from, int64(limit))
		} else {
			page = p.XRange(ctx, log, from, "+")
		}
		last = p.XRevRangeN(ctx, log, "+", "-", 1)
		trim = p.HGet(ctx, s.metaKey(thread), "trimmed")
		if g != nil {
			gen = s.genCmds(ctx, p)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, nil, 0, s.unavailable("read", err)
	}
	if v, err := trim.Int64(); err == nil {
		trimmed = v
	}
	if g != nil {
		*g = genOf(gen)
	}
	xs := page.Val()
	if limit > 0 {
		slices.Reverse(xs)
	}
	msgs = make([]store.Entry, 0, len(xs))
	for _, x := range xs {
		e, err := entryOf(thread, x)
		if err != nil {
			return nil, nil, 0, err
		}
		msgs = append(msgs, e)
	}
	if l := last.Val(); len(l) > 0 {
		e, err := entryOf(thread, l[0])
		if err != nil {
			return nil, nil, 0, err
		}
		newest = &e
	}
	if len(msgs) == 0 {
		msgs = nil
	}
	return msgs[:len(msgs):len(msgs)], newest, trimmed, nil
}

// entryOf decodes one stream entry. An entry that does not decode (written
// by something else) makes the thread unreadable, as a broken file does.
func entryOf(thread string, x redis.XMessage) (store.Entry, error) {
	js, _ := x.Values["j"].(string)
	e, err := parseEntry(js)
	if err == nil && strconv.FormatInt(e.Epoch, 10)+"-0" != x.ID {
		err = fmt.Errorf("epoch %d in entry %s", e.Epoch, x.ID)
	}
	if err != nil {
		return store.Entry{}, &chatrelay.Error{Code: chatrelay.ThreadUnreadable,
			Message: "this thread's stored data does not parse; it is kept as it is for an operator to look at",
			Err:     fmt.Errorf("redis thread %s entry %s: %w", thread, x.ID, err)}
	}
	return e, nil
}

// Threads implements store.Store.
func (s *Store) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	names, err := s.rdb.ZRevRange(ctx, s.index, 0, -1).Result()
	if err != nil {
		return nil, s.unavailable("threads", err)
	}
	lens := make([]*redis.IntCmd, len(names))
	lasts := make([]*redis.XMessageSliceCmd, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			lens[i] = p.XLen(ctx, s.logKey(name))
			lasts[i] = p.XRevRangeN(ctx, s.logKey(name), "+", "-", 1)
		}
		return nil
	})
	if err != nil {
		return nil, s.unavailable("threads", err)
	}
	infos := make([]store.ThreadInfo, 0, len(names))
	for i, name := range names {
		if !chatrelay.ValidThread(name) {
			continue
		}
		l := lasts[i].Val()
		if len(l) == 0 {
			continue // removed meanwhile
		}
		last, err := entryOf(name, l[0])
		if err != nil {
			s.log.Error("redis store: thread does not parse", "thread", name, "err", err)
			continue
		}
		infos = append(infos, store.ThreadInfo{
			Thread: name, Messages: int(lens[i].Val()), LastAuthor: last.Author,
			LastEpoch: last.Epoch, Awaiting: last.Author != chatrelay.Hermes,
		})
	}
	slices.SortStableFunc(infos, func(a, b store.ThreadInfo) int { return cmp.Compare(b.LastEpoch, a.LastEpoch) })
	return infos, nil
}

// Sweep implements store.Store. Each thread is swept by one script, so any
// number of nodes may sweep at once: a message is dropped, and counted, by
// one of them only.
func (s *Store) Sweep(ctx context.Context) (store.SweepStats, error) {
	var st store.SweepStats
	lctx, cancel := s.bound(ctx)
	names, err := s.rdb.ZRange(lctx, s.index, 0, -1).Result()
	cancel()
	if err != nil {
		return st, s.unavailable("sweep", err)
	}
	now := s.now().UnixMilli()
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if !chatrelay.ValidThread(name) {
			continue
		}
		sctx, cancel := s.bound(ctx)
		res, err := sweepScript.Run(sctx, s.rdb, []string{s.logKey(name), s.metaKey(name), s.index, s.idsKey(name)},
			name, now, s.opt.Retention.Messages, s.opt.Retention.Age.Milliseconds()).Int64Slice()
		cancel()
		if err != nil {
			return st, s.unavailable("sweep", err)
		}
		st.Threads++
		st.Dropped += int(res[0])
		if res[1] == 1 {
			st.ThreadsRemoved++
		}
	}
	return st, nil
}

// threadIndex returns every thread of the index with its newest epoch,
// and the generation (created if it is missing), read together.
func (s *Store) threadIndex(ctx context.Context) (map[string]int64, generation, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var zs *redis.ZSliceCmd
	var gen *redis.SliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		zs = p.ZRangeWithScores(ctx, s.index, 0, -1)
		gen = s.genCmds(ctx, p)
		return nil
	})
	if err != nil {
		return nil, generation{}, s.unavailable("threads", err)
	}
	m := make(map[string]int64, len(zs.Val()))
	for _, z := range zs.Val() {
		if name, ok := z.Member.(string); ok && chatrelay.ValidThread(name) {
			m[name] = int64(z.Score)
		}
	}
	return m, genOf(gen), nil
}

// keysOf lists the keys of thread, for tests and operators.
func (s *Store) keysOf(thread string) []string {
	return []string{s.logKey(thread), s.metaKey(thread), s.idsKey(thread)}
}
