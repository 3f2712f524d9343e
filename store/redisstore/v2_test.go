package redisstore

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// What only the Redis store has: the compare-and-set scripts that decide
// a change on any number of nodes, the indexes the scripts keep (client
// ids, interactions, pending interactions, grants), and the feed's
// catch-up of changes.

const thV2 = "a1b2c3d4e5f60718"

var approvalAsk = chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy build 412?", Timeout: time.Hour}
var inputAsk = chatrelay.Ask{Type: chatrelay.Input, Prompt: "Which branch?",
	Choices: []chatrelay.Choice{{Value: "main"}, {Value: "release"}}, Timeout: 10 * time.Minute}

func askOn(t *testing.T, s *Store, thread string, a chatrelay.Ask) store.Entry {
	t.Helper()
	return must[store.Entry](t)(s.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, Ask: &a, MustExist: true}))
}

// TestChangeComparesAndSets: a change whose message another node changed
// between its read and its write is computed again from the message's new
// state. Both reactions are kept, each with its own rev; of two answers,
// the one stored first wins and the other is refused with the winner.
func TestChangeComparesAndSets(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	a, b := openStore(t, srv, Options{Now: clk.Now}), openStore(t, srv, Options{Now: clk.Now})
	ctx := t.Context()
	m := must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "hello"}))

	var between store.Entry
	cas := 0
	a.beforeCAS = func(op string) {
		cas++
		if cas == 1 { // B's reaction lands between A's read and A's write
			between = must[store.Entry](t)(b.Change(ctx, thV2, store.Change{Op: store.React, MessageID: m.ID, Emoji: "🎉", By: chatrelay.Operator}))
		}
	}
	got := must[store.Entry](t)(a.Change(ctx, thV2, store.Change{Op: store.React, MessageID: m.ID, Emoji: "👍", By: chatrelay.Hermes}))
	if cas != 2 {
		t.Fatalf("A wrote %d times, want 2 (its first compare-and-set fails)", cas)
	}
	want := chatrelay.Reactions{"🎉": {chatrelay.Operator}, "👍": {chatrelay.Hermes}}
	if !maps.EqualFunc(got.Reactions, want, slices.Equal) || !(m.Epoch < between.Rev && between.Rev < got.Rev) {
		t.Fatalf("after two reactions: %s (B's at rev %d)", got.JSON2, between.Rev)
	}
	if want := chatrelay.MarshalMessageV2(got.Message); !bytes.Equal(got.JSON2, want) {
		t.Fatalf("JSON2 %s, want %s", got.JSON2, want)
	}

	ix := askOn(t, a, thV2, inputAsk)
	cas = 0
	a.beforeCAS = func(op string) {
		cas++
		if cas == 1 {
			between = must[store.Entry](t)(b.Change(ctx, thV2, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID,
				Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator}))
		}
	}
	_, err := a.Change(ctx, thV2, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID,
		Answer: chatrelay.Answer{Value: "release"}, By: chatrelay.Operator})
	ce := wantCode(t, err, chatrelay.InteractionClosed)
	if !bytes.Equal(ce.About, between.JSON2) {
		t.Fatalf("the refused answer carries %s, want the winner %s", ce.About, between.JSON2)
	}
	a.beforeCAS = nil
	p := must[store.Page](t)(b.Changes(ctx, thV2, ix.Epoch, 0))
	if len(p.Messages) != 1 || p.Messages[0].Interaction.Answer.Value != "main" || p.Cursor != between.Rev {
		t.Fatalf("changes after the ask: %+v", p)
	}
}

// TestConcurrentReactionsLoseNothing: 40 reactions by 40 reactors on one
// message, from two nodes at once: each is kept, each change has its own
// rev, and the thread's rev is the newest of them.
func TestConcurrentReactionsLoseNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a, b := openStore(t, srv, Options{}), openStore(t, srv, Options{})
	ctx := t.Context()
	m := must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "hello"}))
	const n = 40
	revs := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		node := []*Store{a, b}[i%2]
		wg.Go(func() {
			by := chatrelay.Author("p:p_" + strings.Repeat("0", 6) + string(rune('a'+i/10)) + string(rune('0'+i%10)))
			e, err := node.Change(ctx, thV2, store.Change{Op: store.React, MessageID: m.ID, Emoji: "👍", By: by})
			if err != nil {
				t.Error(err)
				return
			}
			revs[i] = e.Rev
		})
	}
	wg.Wait()
	p := must[store.Page](t)(b.Changes(ctx, thV2, 0, 0))
	who := p.Messages[0].Reactions["👍"]
	slices.Sort(revs)
	if len(who) != n || len(slices.Compact(slices.Clone(revs))) != n || revs[0] <= m.Epoch {
		t.Fatalf("%d reactors kept, revs %v", len(who), revs)
	}
	if p.Cursor != revs[n-1] || p.Messages[0].Rev != revs[n-1] {
		t.Fatalf("cursor %d, message rev %d, newest change %d", p.Cursor, p.Messages[0].Rev, revs[n-1])
	}
}

// TestExpireOnceAcrossNodes: two nodes expire the same interaction at
// once, 10 times each: one expiry is stored and announced, and every call
// answers the expired message.
func TestExpireOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	a, b := openStore(t, srv, Options{Now: clk.Now}), openStore(t, srv, Options{Now: clk.Now})
	watcher := openStore(t, srv, Options{Now: clk.Now})
	ctx := t.Context()
	must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "hello"}))
	ix := askOn(t, a, thV2, approvalAsk)
	rec := follow(t, watcher)
	if p := must[[]store.PendingInteraction](t)(b.Pending(ctx)); len(p) != 1 || p[0].InteractionID != ix.Interaction.ID {
		t.Fatalf("pending %+v", p)
	}
	clk.Advance(time.Hour)
	var wg sync.WaitGroup
	revs := make([]int64, 20)
	for i := range revs {
		node := []*Store{a, b}[i%2]
		wg.Go(func() {
			e, err := node.Change(ctx, thV2, store.Change{Op: store.Expire, InteractionID: ix.Interaction.ID})
			if err != nil || e.Interaction.State != chatrelay.Expired {
				t.Errorf("expire: %v %s", err, e.JSON2)
			}
			revs[i] = e.Rev
		})
	}
	wg.Wait()
	if slices.Min(revs) != slices.Max(revs) || revs[0] <= ix.Rev {
		t.Fatalf("the expiry's revs %v", revs)
	}
	sentinel := must[store.Entry](t)(b.Append(ctx, thV2, store.NewMessage{Text: "after"}))
	assert.Eventually(t, 10*time.Second, "the sentinel on the feed", func() bool {
		return slices.ContainsFunc(rec.messages(thV2), func(e store.Entry) bool { return e.ID == sentinel.ID })
	})
	var changes []store.Entry
	for _, e := range rec.messages(thV2) {
		if e.ID == ix.ID {
			changes = append(changes, e)
		}
	}
	if len(changes) != 1 || changes[0].Rev != revs[0] || changes[0].Interaction.State != chatrelay.Expired {
		t.Fatalf("the feed announced %d changes of the interaction: %+v", len(changes), changes)
	}
	if p := must[[]store.PendingInteraction](t)(b.Pending(ctx)); len(p) != 0 {
		t.Fatalf("pending after the expiry: %+v", p)
	}
}

// TestIdempotentAcrossNodes: 20 posts with one client_id, from two nodes
// at once: one is stored, the 19 others answer it again.
func TestIdempotentAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a, b := openStore(t, srv, Options{}), openStore(t, srv, Options{})
	rec := follow(t, openStore(t, srv, Options{}))
	ctx := t.Context()
	var mu sync.Mutex
	var stored, replayed []store.Entry
	var wg sync.WaitGroup
	for i := range 20 {
		node := []*Store{a, b}[i%2]
		wg.Go(func() {
			e, err := node.Append(ctx, thV2, store.NewMessage{Text: "hello", ClientID: "tab-1:1"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case e.Replayed:
				replayed = append(replayed, e)
			default:
				stored = append(stored, e)
			}
		})
	}
	wg.Wait()
	if len(stored) != 1 || len(replayed) != 19 {
		t.Fatalf("%d stored, %d replayed", len(stored), len(replayed))
	}
	for _, e := range replayed {
		if e.ID != stored[0].ID || !bytes.Equal(e.JSON2, stored[0].JSON2) {
			t.Fatalf("a replay %s of %s", e.JSON2, stored[0].JSON2)
		}
	}
	if p := must[store.Page](t)(a.Since(ctx, thV2, 0, 0)); len(p.Messages) != 1 {
		t.Fatalf("%d messages stored", len(p.Messages))
	}
	_, err := b.Append(ctx, thV2, store.NewMessage{Text: "hello", Author: chatrelay.Agent, ClientID: "tab-1:1"})
	wantCode(t, err, chatrelay.ClientIDConflict)
	sentinel := must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "after"}))
	assert.Eventually(t, 10*time.Second, "the sentinel on the feed", func() bool { return len(rec.messages(thV2)) >= 2 })
	if got := rec.messages(thV2); len(got) != 2 || got[0].ID != stored[0].ID || got[1].ID != sentinel.ID {
		t.Fatalf("the feed announced %d messages", len(got))
	}
}

// TestParticipantPostsAcrossNodes: a commenter's posts from two nodes at
// once are counted in its grant exactly (the cap holds, and the three
// waiting for hermes), and a revoke between a post's read of the grant
// and its write refuses the post.
func TestParticipantPostsAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a, b := openStore(t, srv, Options{}), openStore(t, srv, Options{})
	ctx := t.Context()
	must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "hello"}))
	invite := func(cap int) chatrelay.Grant {
		g, _ := chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter, Kind: chatrelay.Human, ExpiresIn: time.Hour, Cap: cap}.Grant(time.Now())
		if err := a.Invite(ctx, thV2, g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	race := func(g chatrelay.Grant) map[chatrelay.Code]int {
		var mu sync.Mutex
		codes := map[chatrelay.Code]int{}
		var wg sync.WaitGroup
		for i := range 12 {
			node := []*Store{a, b}[i%2]
			wg.Go(func() {
				_, err := node.Append(ctx, thV2, store.NewMessage{Author: g.Author(), AuthorName: g.Name, Text: "hi", Participant: g.ID})
				mu.Lock()
				codes[chatrelay.CodeOf(err)]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return codes
	}
	sent := func(g chatrelay.Grant) int { return must[chatrelay.Grant](t)(b.Grant(ctx, thV2, g.ID)).Sent }

	capped := invite(2)
	if codes := race(capped); codes[""] != 2 || codes[chatrelay.CapReached] != 10 || sent(capped) != 2 {
		t.Fatalf("cap 2: %v, sent %d", codes, sent(capped))
	}
	must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Author: chatrelay.Hermes, Text: "answered", MustExist: true}))
	waiting := invite(50)
	if codes := race(waiting); codes[""] != 3 || codes[chatrelay.TooManyMessages] != 9 || sent(waiting) != 3 {
		t.Fatalf("three waiting: %v, sent %d", codes, sent(waiting))
	}

	must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Author: chatrelay.Hermes, Text: "answered", MustExist: true}))
	a.beforeCAS = func(op string) {
		if op == "post" {
			a.beforeCAS = nil
			must[chatrelay.Grant](t)(b.Revoke(ctx, thV2, waiting.ID))
		}
	}
	_, err := a.Append(ctx, thV2, store.NewMessage{Author: waiting.Author(), Text: "late", Participant: waiting.ID})
	wantCode(t, err, chatrelay.TokenRevoked)
	if sent(waiting) != 3 {
		t.Fatalf("a refused post was counted: sent %d", sent(waiting))
	}
}

// TestInviteLimitAcrossNodes: with 48 active grants, 10 invites from two
// nodes at once make 2 grants; the others are refused.
func TestInviteLimitAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a, b := openStore(t, srv, Options{}), openStore(t, srv, Options{})
	ctx := t.Context()
	must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "hello"}))
	grant := func() chatrelay.Grant {
		g, _ := chatrelay.Invite{Name: "n", Role: chatrelay.Viewer, Kind: chatrelay.Human, ExpiresIn: time.Hour, Cap: 1}.Grant(time.Now())
		return g
	}
	for range chatrelay.LimitActiveGrants.Max - 2 {
		if err := a.Invite(ctx, thV2, grant()); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	codes := map[chatrelay.Code]int{}
	var wg sync.WaitGroup
	for i := range 10 {
		node := []*Store{a, b}[i%2]
		wg.Go(func() {
			err := node.Invite(ctx, thV2, grant())
			mu.Lock()
			codes[chatrelay.CodeOf(err)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	gs := must[[]chatrelay.Grant](t)(b.Grants(ctx, thV2))
	if codes[""] != 2 || codes[chatrelay.ParticipantLimit] != 8 || len(gs) != chatrelay.LimitActiveGrants.Max {
		t.Fatalf("invites %v, %d grants", codes, len(gs))
	}
}

// countsOf reads how many entries each v2 structure of thread holds, and
// the global indexes' entries for it.
func countsOf(t *testing.T, s *Store, thread string) map[string]int64 {
	t.Helper()
	ctx := t.Context()
	k := s.keys(thread)
	out := map[string]int64{
		"v2":   s.rdb.HLen(ctx, k[3]).Val(),
		"v2e":  s.rdb.ZCard(ctx, k[4]).Val(),
		"revs": s.rdb.ZCard(ctx, k[5]).Val(),
		"cids": s.rdb.HLen(ctx, k[6]).Val(),
		"ixs":  s.rdb.HLen(ctx, k[7]).Val(),
	}
	for _, m := range s.rdb.ZRange(ctx, s.pending, 0, -1).Val() {
		if strings.HasPrefix(m, thread+" ") {
			out["pending"]++
		}
	}
	for _, th := range s.rdb.HVals(ctx, s.gindex).Val() {
		if th == thread {
			out["grant-index"]++
		}
	}
	return out
}

// TestRetentionTrimsV2State: retention drops a message's v2 state with
// it (its v2 object, rev, client id, interaction and pending entry), so
// nothing grows beyond what is retained, and a v2 cursor before a dropped
// change is told to reset.
func TestRetentionTrimsV2State(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	s := openStore(t, srv, Options{Now: clk.Now, Retention: chatrelay.Retention{Messages: 3}})
	ctx := t.Context()
	first := must[store.Entry](t)(s.Append(ctx, thV2, store.NewMessage{Text: "hello", ClientID: "c1"}))
	askOn(t, s, thV2, inputAsk)
	card := &chatrelay.Card{Title: "Build", FallbackText: "green", Blocks: []chatrelay.Block{}}
	must[store.Entry](t)(s.Append(ctx, thV2, store.NewMessage{Author: chatrelay.Hermes, Card: card, MustExist: true}))
	r := must[store.Entry](t)(s.Change(ctx, thV2, store.Change{Op: store.React, MessageID: first.ID, Emoji: "👍", By: chatrelay.Hermes}))
	want := map[string]int64{"v2": 3, "v2e": 3, "revs": 1, "cids": 1, "ixs": 1, "pending": 1, "grant-index": 0}
	if got := countsOf(t, s, thV2); !equalCounts(got, want) {
		t.Fatalf("v2 state %v, want %v", got, want)
	}
	for range 3 {
		clk.Advance(time.Second)
		must[store.Entry](t)(s.Append(ctx, thV2, store.NewMessage{Text: "plain"}))
	}
	if got := countsOf(t, s, thV2); !equalCounts(got, map[string]int64{}) {
		t.Fatalf("v2 state after retention dropped every v2 message: %v", got)
	}
	if p := must[store.Page](t)(s.Changes(ctx, thV2, r.Rev-1, 0)); !p.Reset {
		t.Fatalf("a v2 cursor before a dropped change: %+v", p)
	}
	if p := must[store.Page](t)(s.Changes(ctx, thV2, r.Rev, 0)); p.Reset || len(p.Messages) != 3 {
		t.Fatalf("a v2 cursor at the dropped change: %+v", p)
	}
	if e := must[store.Entry](t)(s.Append(ctx, thV2, store.NewMessage{Text: "hello", ClientID: "c1"})); e.Replayed {
		t.Fatal("the client id of a dropped message replayed")
	}
}

// equalCounts reports whether got and want agree, a missing key counting
// as 0 (so that want can be {} for "nothing left").
func equalCounts(got, want map[string]int64) bool {
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestSweepRemovesEveryKey: the sweep that removes a thread removes every
// key of it (log, marks, v2 state, grants, audit) and its entries in the
// global indexes, and tells the feed that its participants changed.
func TestSweepRemovesEveryKey(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	s := openStore(t, srv, Options{Now: clk.Now, Retention: chatrelay.Retention{Age: time.Hour}})
	ctx := t.Context()
	must[store.Entry](t)(s.Append(ctx, thV2, store.NewMessage{Text: "hello", ClientID: "c1"}))
	ix := askOn(t, s, thV2, approvalAsk)
	must[store.Entry](t)(s.Change(ctx, thV2, store.Change{Op: store.React, MessageID: ix.ID, Emoji: "👀", By: chatrelay.Operator}))
	g, tok := chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter, Kind: chatrelay.Human, ExpiresIn: 24 * time.Hour, Cap: 5}.Grant(clk.Now())
	assert.Success(t, s.Invite(ctx, thV2, g))
	assert.Success(t, s.Audit(ctx, thV2, chatrelay.AuditEvent{At: 1, Event: chatrelay.AuditIssued, Participant: g.ID}))
	const kept = "0000000000000001"
	must[store.Entry](t)(s.Append(ctx, kept, store.NewMessage{Text: "stays"}))
	rec := follow(t, s)
	if n := s.rdb.Exists(ctx, s.keysOf(thV2)...).Val(); n < 8 {
		t.Fatalf("%d keys of the thread before the sweep", n)
	}

	clk.Advance(2 * time.Hour)
	must[store.Entry](t)(s.Append(ctx, kept, store.NewMessage{Text: "new"}))
	st := must[store.SweepStats](t)(s.Sweep(ctx))
	if st.ThreadsRemoved != 1 {
		t.Fatalf("sweep %+v", st)
	}
	var left []string
	for _, k := range s.keysOf(thV2) {
		if s.rdb.Exists(ctx, k).Val() != 0 {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Fatalf("keys left: %v", left)
	}
	if got := countsOf(t, s, thV2); !equalCounts(got, map[string]int64{}) {
		t.Fatalf("index entries left: %v", got)
	}
	_, _, err := s.Resolve(ctx, chatrelay.DigestOf(tok))
	wantCode(t, err, chatrelay.Unauthorized)
	assert.Eventually(t, 10*time.Second, "the participants change on the feed", func() bool {
		return slices.ContainsFunc(rec.snapshot(), func(b store.Batch) bool { return b.Thread == thV2 && b.Participants })
	})
}

// TestFeedCatchesUpChanges: changes made while the feed's connection was
// lost (another node's reaction, answer and post) arrive once it is back:
// each changed message once, in its current state, in change order, with
// no reset; and every thread with grants is told to look at them again.
func TestFeedCatchesUpChanges(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	b := openStore(t, srv, Options{ResetAfter: -1})
	ctx := t.Context()
	m := must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "hello"}))
	ix := askOn(t, a, thV2, inputAsk)
	g, _ := chatrelay.Invite{Name: "Alex", Role: chatrelay.Viewer, Kind: chatrelay.Human, ExpiresIn: time.Hour, Cap: 1}.Grant(time.Now())
	assert.Success(t, a.Invite(ctx, thV2, g))
	gt := newGate()
	b.onLost = gt.hook
	rec := follow(t, b)

	if a.rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Val() == 0 {
		t.Fatal("no feed connection to kill")
	}
	waitFor(t, gt.lost, "the feed to notice the loss")
	r1 := must[store.Entry](t)(a.Change(ctx, thV2, store.Change{Op: store.React, MessageID: m.ID, Emoji: "👍", By: chatrelay.Hermes}))
	ans := must[store.Entry](t)(a.Change(ctx, thV2, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator}))
	r2 := must[store.Entry](t)(a.Change(ctx, thV2, store.Change{Op: store.React, MessageID: m.ID, Emoji: "🎉", By: chatrelay.Operator}))
	post := must[store.Entry](t)(a.Append(ctx, thV2, store.NewMessage{Text: "meanwhile"}))
	close(gt.open)

	assert.Eventually(t, 10*time.Second, "the catch-up", func() bool { return len(rec.messages(thV2)) >= 3 })
	got := rec.messages(thV2)
	want := []store.Entry{ans, r2, post} // m's two reactions come as its latest state
	if len(got) != len(want) {
		t.Fatalf("caught up %d changes, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Rev != want[i].Rev || !bytes.Equal(got[i].JSON2, want[i].JSON2) {
			t.Fatalf("change %d: %s, want %s", i, got[i].JSON2, want[i].JSON2)
		}
	}
	if r1.Rev >= r2.Rev || rec.resets(thV2) != 0 {
		t.Fatalf("revs %d %d, %d resets", r1.Rev, r2.Rev, rec.resets(thV2))
	}
	assert.Eventually(t, 10*time.Second, "a participants batch after the catch-up", func() bool {
		return slices.ContainsFunc(rec.snapshot(), func(b store.Batch) bool { return b.Thread == thV2 && b.Participants })
	})

	// Live again: the next change comes as it happens.
	r3 := must[store.Entry](t)(a.Change(ctx, thV2, store.Change{Op: store.Unreact, MessageID: m.ID, Emoji: "👍", By: chatrelay.Hermes}))
	assert.Eventually(t, 10*time.Second, "a live change", func() bool { return len(rec.messages(thV2)) >= 4 })
	if last := rec.messages(thV2)[3]; last.Rev != r3.Rev || !bytes.Equal(last.JSON2, r3.JSON2) {
		t.Fatalf("live change %s, want %s", last.JSON2, r3.JSON2)
	}
}
