package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The v2 view (contract Part 4) on Redis. A message's v1 JSON stays in the
// thread's log as it was written; its current v2 object, if it has one
// (a v2 field, or a change), is in the thread's v2 hash, and its rev, if
// it changed, in the revs sorted set. Every change takes the thread's next
// epoch: max(now, rev + 1), where the thread's rev is the newest of its
// newest message's epoch and meta's "rev" (the newest change's).

// Changes implements store.Store: one script reads the page, the marks and
// the generation together (changesScript, which only reads: a full Redis
// still answers it).
func (s *Store) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return store.Page{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	p, g, err := s.changes(ctx, thread, since, limit)
	if err != nil {
		return store.Page{}, err
	}
	g = s.checkGen(ctx, g, nil)
	p.Reset = p.Reset || since > 0 && since <= g.lost
	s.see(p.Cursor)
	return p, nil
}

// changes runs changesScript: the v2 page (Reset says only what retention
// dropped) and the generation. A message that does not decode marks the
// thread unreadable.
func (s *Store) changes(ctx context.Context, thread string, since int64, limit int) (store.Page, generation, error) {
	p, g, err := s.changesPage(ctx, thread, since, limit)
	return p, g, s.noteUnreadable(ctx, thread, err)
}

func (s *Store) changesPage(ctx context.Context, thread string, since int64, limit int) (store.Page, generation, error) {
	since = min(max(since, 0), maxEpoch)
	keys := s.keys(thread)
	res, err := s.withGen(ctx, func() ([]string, error) {
		return changesScript.Run(ctx, s.rdb, keys, since, limit).StringSlice()
	})
	if err != nil {
		return store.Page{}, generation{}, s.unavailable("changes", err)
	}
	if len(res) == 2 && res[0] == "unreadable" {
		return store.Page{}, generation{}, markedUnreadable(thread, res[1])
	}
	if len(res) < 8 || len(res)%2 != 0 {
		return store.Page{}, generation{}, s.unavailable("changes", fmt.Errorf("unexpected answer of %d values", len(res)))
	}
	g := genFrom(res)
	trimmed, rev, trimmedRev := parseInt(res[3]), parseInt(res[4]), parseInt(res[5])
	p := store.Page{Thread: thread, Reset: since > 0 && since < max(trimmed, trimmedRev), Title: res[7]}
	if res[6] == "" {
		return p, g, nil
	}
	newest, err := parseV1(res[6]) // its epoch and author
	if err != nil {
		return store.Page{}, g, unreadableEntry(thread, "the newest", err)
	}
	p.Cursor = max(rev, newest.Epoch)
	p.Awaiting = newest.Author != chatrelay.Hermes
	rest := res[8:]
	msgs := make([]store.Entry, 0, len(rest)/2)
	for i := 0; i < len(rest); i += 2 {
		e, err := stored(rest[i], rest[i+1])
		if err != nil {
			return store.Page{}, g, unreadableEntry(thread, "page entry "+strconv.Itoa(i/2), err)
		}
		msgs = append(msgs, e)
	}
	if since > 0 {
		slices.SortFunc(msgs, func(a, b store.Entry) int { return cmp.Compare(a.Rev, b.Rev) })
	}
	if len(msgs) > 0 {
		p.Messages = msgs[:len(msgs):len(msgs)]
	}
	return p, g, nil
}

// Change implements store.Store. It reads the message (messageScript),
// applies the change to what it read (chatrelay.ApplyChange, as the file store
// does), and has changeScript store the result only if the message's rev
// is still the one it read; otherwise another change came first, and it
// reads again. So of concurrent answers on any number of nodes the first
// one stored wins: every later one finds the interaction closed.
func (s *Store) Change(ctx context.Context, thread string, c store.Change) (store.Entry, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return store.Entry{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for {
		e, err := s.message(ctx, thread, c)
		if err != nil {
			return store.Entry{}, err
		}
		m := e.Message // decoded for this call: ApplyChange may change it
		was := m.Interaction != nil && m.Interaction.State == chatrelay.Pending
		now := s.now()
		changed, cerr := chatrelay.ApplyChange(&m, c, now)
		if !changed {
			if cerr != nil {
				cerr = about(cerr, e.JSON2)
			}
			return e, cerr
		}
		// The v2 object begins with the message's v1 fields as its v2
		// object has them (a change never changes one), then its rev and
		// the rest. Its v2 object's, not its v1 JSON's: a message with
		// attachments has their lines in its v1 text only.
		tail := v2Tail(m)
		head := v2Head(e.JSON2)
		done, event := "", ""
		if was && m.Interaction.State != chatrelay.Pending {
			done = m.Interaction.ID
			if s.hooks {
				event = store.EventInteractionClosed // store.EventOf
			}
		}
		if s.beforeCAS != nil {
			s.beforeCAS("change")
		}
		res, err := changeScript.Run(ctx, s.rdb, s.keys(thread), thread, e.Epoch, e.Rev, now.UnixMilli(),
			head, tail, done, s.pubFeed, event).StringSlice()
		if err != nil {
			return store.Entry{}, s.unavailable("change", err)
		}
		switch {
		case len(res) == 2 && res[0] == "ok":
			m.Rev = toInt(res[1])
			ne := store.Entry{Message: m, JSON: e.JSON, JSON2: []byte(head + res[1] + tail)}
			s.see(m.Rev)
			if cerr != nil {
				cerr = about(cerr, ne.JSON2)
			}
			return ne, cerr
		case len(res) == 1 && res[0] == "retry":
			continue
		case len(res) == 1 && res[0] == "gone":
			return store.Entry{}, notFound(c)
		case len(res) == 2 && res[0] == "unreadable":
			return store.Entry{}, markedUnreadable(thread, res[1])
		}
		return store.Entry{}, s.unavailable("change", fmt.Errorf("unexpected answer %q", res))
	}
}

// message reads the message c changes, in its current state.
func (s *Store) message(ctx context.Context, thread string, c store.Change) (store.Entry, error) {
	var args []any
	switch c.Op {
	case store.React, store.Unreact:
		if !chatrelay.MessageIDPattern.MatchString(c.MessageID) {
			return store.Entry{}, notFound(c)
		}
		at, err := time.Parse("20060102-150405", c.MessageID[4:19])
		if err != nil || at.Unix() < 0 {
			return store.Entry{}, notFound(c)
		}
		first := at.UnixMilli()
		args = []any{"id", c.MessageID, first, first + 999}
	default:
		if !chatrelay.InteractionIDPattern.MatchString(c.InteractionID) {
			return store.Entry{}, notFound(c)
		}
		args = []any{"ix", c.InteractionID}
	}
	res, err := messageScript.Run(ctx, s.rdb, s.keys(thread), args...).StringSlice()
	if err != nil {
		return store.Entry{}, s.unavailable("change", err)
	}
	if len(res) == 2 && res[0] == "unreadable" {
		return store.Entry{}, markedUnreadable(thread, res[1])
	}
	if len(res) != 3 {
		return store.Entry{}, notFound(c)
	}
	e, err := stored(res[1], res[2])
	if err != nil {
		return store.Entry{}, s.noteUnreadable(ctx, thread, unreadableEntry(thread, res[0]+"-0", err))
	}
	return e, nil
}

// notFound is the file store's answer to a change of a message or
// interaction the thread does not have.
func notFound(c store.Change) error {
	if c.Op == store.React || c.Op == store.Unreact {
		return chatrelay.Errorf(chatrelay.NotFound, "no message %s in this thread", c.MessageID)
	}
	return chatrelay.Errorf(chatrelay.NotFound, "no interaction %s in this thread", c.InteractionID)
}

// Pending implements store.Store: the pending index, which the scripts
// keep (an interaction enters it with its message, and leaves it when it
// is answered, expires or is canceled, or when its message is dropped).
func (s *Store) Pending(ctx context.Context) ([]store.PendingInteraction, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	zs, err := s.rdb.ZRangeWithScores(ctx, s.pending, 0, -1).Result()
	if err != nil && err != redis.Nil {
		return nil, s.unavailable("pending", err)
	}
	var out []store.PendingInteraction
	for _, z := range zs {
		member, _ := z.Member.(string)
		thread, id, ok := strings.Cut(member, " ")
		if !ok || !chatrelay.ValidThread(thread) || !chatrelay.InteractionIDPattern.MatchString(id) {
			continue
		}
		out = append(out, store.PendingInteraction{Thread: thread, InteractionID: id, Deadline: int64(z.Score)})
	}
	return out, nil
}
