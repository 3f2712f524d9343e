package redisstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

var idRE = regexp.MustCompile(`^MSG-\d{8}-\d{6}-[0-9a-f]{6}$`)

// checkEntry checks what only the store decides: the id's form and second,
// ts, and that JSON is exactly chatrelay.MarshalMessage of the message.
func checkEntry(t *testing.T, e store.Entry) {
	t.Helper()
	at := time.UnixMilli(e.Epoch).UTC()
	if !idRE.MatchString(e.ID) || e.ID[4:19] != at.Format("20060102-150405") {
		t.Fatalf("id %q for epoch %d", e.ID, e.Epoch)
	}
	if want := at.Format("2006-01-02T15:04:05+00:00"); e.TS != want {
		t.Fatalf("ts %q for epoch %d, want %q", e.TS, e.Epoch, want)
	}
	if want := chatrelay.MarshalMessage(e.Message); !bytes.Equal(e.JSON, want) {
		t.Fatalf("JSON\n%s\nwant\n%s", e.JSON, want)
	}
}

// normalized is m with what each store draws at random left out: the
// message id's 6 hex and the interaction's id.
func normalized(m chatrelay.Message) chatrelay.Message {
	m.ID = m.ID[:min(19, len(m.ID))]
	if m.Interaction != nil {
		ix := *m.Interaction
		ix.ID = ""
		m.Interaction = &ix
	}
	return m
}

// sameMessages compares two stores' messages but for their random parts
// (normalized), and checks that the Redis store's JSON is exactly what
// chatrelay encodes of its messages (v1 and v2).
func sameMessages(t *testing.T, what string, got, want []store.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, file store has %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := normalized(got[i].Message), normalized(want[i].Message)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: message %d\n%s\nfile store:\n%s", what, i, got[i].JSON2, want[i].JSON2)
		}
		if !bytes.Equal(got[i].JSON2, chatrelay.MarshalMessageV2(got[i].Message)) || !bytes.Equal(got[i].JSON, chatrelay.MarshalMessage(got[i].Message)) {
			t.Fatalf("%s: message %d: JSON %s, JSON2 %s", what, i, got[i].JSON, got[i].JSON2)
		}
	}
}

// sameError compares two stores' errors: the same code, and the same
// message attached (About) but for its random parts.
func sameError(t *testing.T, what string, got, want error) {
	t.Helper()
	if chatrelay.CodeOf(got) != chatrelay.CodeOf(want) {
		t.Fatalf("%s: error %v, file store %v", what, got, want)
	}
	var ge, we *chatrelay.Error
	if errors.As(got, &ge) && errors.As(want, &we) && (ge.About != nil || we.About != nil) {
		var gm, wm chatrelay.Message
		if json.Unmarshal(ge.About, &gm) != nil || json.Unmarshal(we.About, &wm) != nil || !reflect.DeepEqual(normalized(gm), normalized(wm)) {
			t.Fatalf("%s: error about %s, file store %s", what, ge.About, we.About)
		}
	}
}

// TestSameAsFileStore runs one random history against the file store and
// the Redis store with the same clock, and requires the same answers:
// appends (plain, with a client_id that repeats, questions, cards, a
// participant's posts), changes (reactions, answers good and bad,
// cancels, expiries), grants (invites, revokes), clock moves, sweeps, and
// the reads of both views, the thread list, the pending interactions and
// the grants.
func TestSameAsFileStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.Date(2026, 10, 23, 18, 39, 59, 998e6, time.UTC))
	ret := chatrelay.Retention{Messages: 5, Age: time.Hour}
	fs, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{Retention: ret, MaxThreads: 3, NoFsync: true, Now: clk.Now, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	rs := openStore(t, srv, Options{Retention: ret, MaxThreads: 3, Now: clk.Now})
	ctx := t.Context()

	threads := []string{"a1b2c3d4e5f60718", "0000000000000001", "ffffffffffffffff", "0123456789abcdef"}
	texts := []string{"hello", "<b>&amp;</b> \"quoted\" \\ back", "line\nbreak\ttab\r", "\u2028\u2029 é ✓ 🙂", "\x01\x1f ctl", "  padded  "}
	authors := []chatrelay.Author{"", chatrelay.Operator, chatrelay.Agent, chatrelay.Hermes}
	reactors := []chatrelay.Author{chatrelay.Operator, chatrelay.Hermes, "p:p_0000000a"}
	clientIDs := []string{"tab-1:1", "tab-1:2", "tab-2:1"}
	emojis := []string{"👍", "🎉", "👀"}
	asks := []chatrelay.Ask{
		{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy build 412?", Details: []chatrelay.Detail{{Label: "build", Value: "412"}}, Timeout: time.Minute},
		{Type: chatrelay.Input, Prompt: "Which branch?", Choices: []chatrelay.Choice{{Value: "main", Label: "Main"}, {Value: "release"}}, Timeout: 2 * time.Second},
		{Type: chatrelay.Input, Prompt: "Anything to add?", AllowText: true, Timeout: time.Minute},
	}
	answers := []chatrelay.Answer{{Decision: chatrelay.Approve}, {Decision: chatrelay.Deny}, {Value: "main"}, {Value: "free text"}, {Value: "  "}}
	card := &chatrelay.Card{Title: "Build 412", FallbackText: "Build 412 is green.", Blocks: []chatrelay.Block{
		{Type: chatrelay.TextBlock, Text: "<script>x</script> stays text"}, {Type: chatrelay.LinkBlock, URL: "https://ci.example.com/412", Label: "log"}}}
	rng := rand.New(rand.NewPCG(1, 2))

	// Each store's entry of every message appended, by thread, in order:
	// a change names the message by each store's own ids.
	type pair struct{ f, r store.Entry }
	appended := map[string][]pair{}
	grants := map[string][]chatrelay.Grant{}
	lastPost := map[string]store.NewMessage{} // by thread and client_id
	// What happened, by kind and outcome: the history must have been
	// through every path it is meant to compare.
	seen := map[string]int{}
	note := func(kind string, err error) {
		code := chatrelay.CodeOf(err)
		if code == "" {
			code = "ok"
		}
		seen[kind+" "+string(code)]++
	}

	compare := func(step int) {
		t.Helper()
		for _, th := range threads {
			fp := must[store.Page](t)(fs.Since(ctx, th, 0, 0))
			fc := must[store.Page](t)(fs.Changes(ctx, th, 0, 0))
			sinces := []int64{0, 1, fp.Cursor, fp.Cursor + 5, fc.Cursor, fc.Cursor + 5}
			for _, m := range fc.Messages {
				sinces = append(sinces, m.Epoch-1, m.Epoch, m.Rev-1, m.Rev)
			}
			if len(fp.Messages) > 0 {
				sinces = append(sinces, fp.Messages[0].Epoch-1000)
			}
			for _, since := range sinces {
				for _, limit := range []int{0, 2, 50} {
					for _, view := range []string{"since", "changes"} {
						what := fmt.Sprintf("step %d thread %s %s %d limit %d", step, th, view, since, limit)
						read := store.Store.Since
						if view == "changes" {
							read = store.Store.Changes
						}
						want := must[store.Page](t)(read(fs, ctx, th, since, limit))
						got := must[store.Page](t)(read(rs, ctx, th, since, limit))
						if got.Thread != want.Thread || got.Cursor != want.Cursor || got.Awaiting != want.Awaiting || got.Reset != want.Reset {
							t.Fatalf("%s: page %+v, file store %+v", what, got, want)
						}
						sameMessages(t, what, got.Messages, want.Messages)
						for _, e := range got.Messages {
							checkEntry(t, e)
						}
					}
				}
			}
			fg, ferr := fs.Grants(ctx, th)
			rg, rerr := rs.Grants(ctx, th)
			sameError(t, fmt.Sprintf("step %d grants of %s", step, th), rerr, ferr)
			if len(fg) != len(rg) || (len(fg) > 0 && !reflect.DeepEqual(fg, rg)) {
				t.Fatalf("step %d: grants of %s %+v, file store %+v", step, th, rg, fg)
			}
		}
		// Threads with the same newest change may come in either order.
		order := func(a, b store.ThreadInfo) int {
			return cmp.Or(cmp.Compare(b.Rev, a.Rev), strings.Compare(a.Thread, b.Thread))
		}
		fi := must[[]store.ThreadInfo](t)(fs.Threads(ctx))
		ri := must[[]store.ThreadInfo](t)(rs.Threads(ctx))
		slices.SortFunc(fi, order)
		slices.SortFunc(ri, order)
		if fmt.Sprint(fi) != fmt.Sprint(ri) {
			t.Fatalf("step %d: Threads %v, file store %v", step, ri, fi)
		}
		// Pending interactions, by thread and deadline (their ids differ).
		pend := func(ps []store.PendingInteraction) []string {
			var out []string
			for _, p := range ps {
				out = append(out, fmt.Sprintf("%s %d", p.Thread, p.Deadline))
			}
			slices.Sort(out)
			return out
		}
		fpend := pend(must[[]store.PendingInteraction](t)(fs.Pending(ctx)))
		rpend := pend(must[[]store.PendingInteraction](t)(rs.Pending(ctx)))
		if !slices.Equal(fpend, rpend) {
			t.Fatalf("step %d: pending %v, file store %v", step, rpend, fpend)
		}
	}

	// appendBoth appends m to th on both stores and compares the answers.
	appendBoth := func(step int, th string, m store.NewMessage) {
		t.Helper()
		we, werr := fs.Append(ctx, th, m)
		ge, gerr := rs.Append(ctx, th, m)
		what := fmt.Sprintf("step %d append %+v", step, m)
		sameError(t, what, gerr, werr)
		kind := "post"
		switch {
		case m.Ask != nil:
			kind = "ask"
		case m.Card != nil:
			kind = "card"
		case m.Participant != "":
			kind = "participant post"
		}
		note(kind, werr)
		if werr != nil {
			return
		}
		if ge.Replayed != we.Replayed {
			t.Fatalf("%s: replayed %v, file store %v", what, ge.Replayed, we.Replayed)
		}
		if ge.Replayed {
			seen[kind+" replayed"]++
		}
		checkEntry(t, ge)
		sameMessages(t, what, []store.Entry{ge}, []store.Entry{we})
		if ge.Replayed {
			return
		}
		appended[th] = append(appended[th], pair{we, ge})
		// What Append returned is what is stored.
		p := must[store.Page](t)(rs.Changes(ctx, th, ge.Epoch-1, 0))
		if len(p.Messages) == 0 || !bytes.Equal(p.Messages[len(p.Messages)-1].JSON2, ge.JSON2) {
			t.Fatalf("step %d: stored %+v, Append returned %s", step, p.Messages, ge.JSON2)
		}
	}
	// changeBoth applies the change that c makes of each store's message.
	changeBoth := func(step int, th string, c func(e store.Entry) store.Change) {
		t.Helper()
		// One of the newest messages (retention keeps 5), preferring one
		// with an interaction for an interaction's change.
		ps := appended[th]
		ps = ps[max(0, len(ps)-6):]
		if len(ps) == 0 {
			return
		}
		if ix := slices.IndexFunc(ps, func(p pair) bool { return p.f.Interaction != nil }); ix >= 0 && c(ps[ix].f).Op != store.React && c(ps[ix].f).Op != store.Unreact {
			var with []pair
			for _, p := range ps {
				if p.f.Interaction != nil {
					with = append(with, p)
				}
			}
			ps = with
		}
		p := ps[rng.IntN(len(ps))]
		fc, rc := c(p.f), c(p.r)
		we, werr := fs.Change(ctx, th, fc)
		ge, gerr := rs.Change(ctx, th, rc)
		what := fmt.Sprintf("step %d change %+v", step, rc)
		sameError(t, what, gerr, werr)
		note(string(rc.Op), werr)
		if werr == nil && we.Interaction != nil && rc.Op != store.React && rc.Op != store.Unreact {
			seen["state "+string(we.Interaction.State)]++
		}
		if werr == nil || we.ID != "" {
			sameMessages(t, what, []store.Entry{ge}, []store.Entry{we})
		}
	}
	ixOf := func(e store.Entry) string {
		if e.Interaction == nil {
			return "ix_000000000000"
		}
		return e.Interaction.ID
	}

	for step := range 800 {
		th := threads[rng.IntN(len(threads))]
		switch r := rng.IntN(100); {
		case r < 6: // the clock goes back: epochs still increase
			clk.Advance(-time.Duration(rng.IntN(3000)) * time.Millisecond)
		case r < 9: // past the retention age
			clk.Advance(time.Duration(30+rng.IntN(60)) * time.Minute)
		case r < 12:
			clk.Advance(10 * time.Minute)
			want := must[store.SweepStats](t)(fs.Sweep(ctx))
			got := must[store.SweepStats](t)(rs.Sweep(ctx))
			if got != want {
				t.Fatalf("step %d: Sweep %+v, file store %+v", step, got, want)
			}
			if got.ThreadsRemoved > 0 {
				seen["sweep removed a thread"]++
			}
		case r < 22: // a reaction, or its removal
			op := []store.ChangeOp{store.React, store.React, store.Unreact}[rng.IntN(3)]
			emoji, by := emojis[rng.IntN(len(emojis))], reactors[rng.IntN(len(reactors))]
			changeBoth(step, th, func(e store.Entry) store.Change {
				return store.Change{Op: op, MessageID: e.ID, Emoji: emoji, By: by}
			})
		case r < 32: // an answer, a cancel, an expiry
			op := []store.ChangeOp{store.Respond, store.Respond, store.Respond, store.Cancel, store.Cancel, store.Expire}[rng.IntN(6)]
			pick := rng.IntN(len(answers))
			fits := rng.IntN(3) > 0 // mostly an answer of the interaction's type
			changeBoth(step, th, func(e store.Entry) store.Change {
				ans := answers[pick]
				if ix := e.Interaction; fits && ix != nil && (ix.Type == chatrelay.Approval) != (ans.Decision != "") {
					ans = answers[(pick+2)%len(answers)]
				}
				return store.Change{Op: op, InteractionID: ixOf(e), Answer: ans, By: chatrelay.Operator}
			})
		case r < 37: // an invite, or a revoke
			if rng.IntN(2) == 0 && len(grants[th]) > 0 {
				g := grants[th][rng.IntN(len(grants[th]))]
				wg, werr := fs.Revoke(ctx, th, g.ID)
				gg, gerr := rs.Revoke(ctx, th, g.ID)
				sameError(t, fmt.Sprintf("step %d revoke", step), gerr, werr)
				note("revoke", werr)
				if wg != gg {
					t.Fatalf("step %d: revoked %+v, file store %+v", step, gg, wg)
				}
			} else {
				g, _ := chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter, Kind: chatrelay.Human, ExpiresIn: 6 * time.Hour, Cap: 6}.Grant(clk.Now())
				werr, gerr := fs.Invite(ctx, th, g), rs.Invite(ctx, th, g)
				sameError(t, fmt.Sprintf("step %d invite", step), gerr, werr)
				note("invite", werr)
				if werr == nil {
					grants[th] = append(grants[th], g)
				}
			}
		default:
			if rng.IntN(3) == 0 {
				clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
			m := store.NewMessage{Author: authors[rng.IntN(len(authors))], Text: texts[rng.IntN(len(texts))], MustExist: rng.IntN(10) == 0}
			switch k := rng.IntN(20); {
			case k < 4:
				m.ClientID = clientIDs[rng.IntN(len(clientIDs))]
				if last, ok := lastPost[th+m.ClientID]; ok && rng.IntN(2) == 0 {
					m = last // a repeat: replayed while the first is retained
				}
				lastPost[th+m.ClientID] = m
			case k < 6:
				a := asks[rng.IntN(len(asks))]
				m = store.NewMessage{Author: chatrelay.Hermes, Ask: &a, MustExist: true}
			case k < 7:
				m = store.NewMessage{Author: chatrelay.Hermes, Card: card, MustExist: true, ClientID: clientIDs[rng.IntN(len(clientIDs))]}
			case k < 12 && len(grants[th]) > 0:
				// A few in a row: the three waiting for hermes, the cap.
				g := grants[th][rng.IntN(len(grants[th]))]
				for range 1 + rng.IntN(4) {
					m = store.NewMessage{Author: g.Author(), AuthorName: g.Name, Text: texts[rng.IntN(len(texts))], Participant: g.ID}
					if rng.IntN(3) == 0 {
						m.ClientID = clientIDs[rng.IntN(len(clientIDs))]
					}
					appendBoth(step, th, m)
				}
				continue
			}
			appendBoth(step, th, m)
		}
		if step%10 == 0 || step == 799 {
			compare(step)
		}
	}
	t.Logf("outcomes: %v", seen)
	for _, kind := range []string{"post ok", "post replayed", "post client_id_conflict", "post thread_limit", "post not_found",
		"ask ok", "card ok", "participant post ok", "participant post too_many_messages", "participant post token_revoked",
		"react ok", "unreact ok", "react not_found", "respond ok", "respond interaction_closed", "respond invalid_answer",
		"cancel ok", "expire ok", "state approved", "state denied", "state answered", "state expired", "state canceled",
		"invite ok", "invite not_found", "revoke ok", "sweep removed a thread"} {
		if seen[kind] == 0 {
			t.Errorf("the history never had %q", kind)
		}
	}
}

// TestAppendBasics pins the contract's examples and the errors.
func TestAppendBasics(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	s := openStore(t, srv, Options{Now: clk.Now})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"

	p := must[store.Page](t)(s.Since(ctx, th, 0, 50))
	if p.Thread != th || len(p.Messages) != 0 || p.Cursor != 0 || p.Awaiting || p.Reset {
		t.Fatalf("empty thread: %+v", p)
	}
	if n := s.rdb.Exists(ctx, append(s.keysOf(th), s.index)...).Val(); n != 0 {
		t.Fatalf("a read created %d keys", n)
	}

	e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "hi"}))
	// (The contract's example pairs this epoch with 18:40:00; it is 18:00:00.123 UTC.)
	if e.Epoch != 1792778400123 || e.TS != "2026-10-23T18:00:00+00:00" || e.Author != chatrelay.Operator ||
		!strings.HasPrefix(e.ID, "MSG-20261023-180000-") {
		t.Fatalf("first message %+v", e)
	}
	checkEntry(t, e)
	// The same millisecond: newest + 1; ids stay unique within the second.
	ids := map[string]bool{e.ID: true}
	for i := range 300 {
		e2 := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Author: chatrelay.Hermes, Text: "again"}))
		if e2.Epoch != e.Epoch+1 {
			t.Fatalf("append %d: epoch %d after %d", i, e2.Epoch, e.Epoch)
		}
		if ids[e2.ID] && e2.Epoch/1000 == e.Epoch/1000 {
			t.Fatalf("id %s reused", e2.ID)
		}
		ids[e2.ID] = true
		e = e2
	}
	p = must[store.Page](t)(s.Since(ctx, th, 0, 50))
	if len(p.Messages) != 50 || p.Cursor != e.Epoch || p.Awaiting || p.Messages[49].Epoch != e.Epoch {
		t.Fatalf("newest 50: %d messages, cursor %d awaiting %v", len(p.Messages), p.Cursor, p.Awaiting)
	}
	// 301 appended, 200 kept.
	p = must[store.Page](t)(s.Since(ctx, th, 0, 0))
	if len(p.Messages) != 200 {
		t.Fatalf("retained %d, want 200", len(p.Messages))
	}
	if p = must[store.Page](t)(s.Since(ctx, th, 1792778400123, 0)); !p.Reset || len(p.Messages) != 200 {
		t.Fatalf("since the first (dropped) message: reset %v, %d messages", p.Reset, len(p.Messages))
	}

	if p = must[store.Page](t)(s.Since(ctx, th, math.MaxInt64, 0)); len(p.Messages) != 0 || p.Cursor != e.Epoch || p.Reset {
		t.Fatalf("since MaxInt64: %+v", p)
	}

	const other = "0000000000000002"
	_, err := s.Append(ctx, other, store.NewMessage{Text: "reply", Author: chatrelay.Hermes, MustExist: true})
	wantCode(t, err, chatrelay.NotFound)
	_, err = s.Append(ctx, "NOT-A-THREAD", store.NewMessage{Text: "x"})
	wantCode(t, err, chatrelay.InvalidThread)
	_, err = s.Since(ctx, "abc", 0, 0)
	wantCode(t, err, chatrelay.InvalidThread)
	_, err = s.Append(ctx, th, store.NewMessage{Text: " \n\t"})
	wantCode(t, err, chatrelay.InvalidText)
	_, err = s.Append(ctx, th, store.NewMessage{Text: "bad \xff"})
	wantCode(t, err, chatrelay.InvalidText)
	_, err = s.Append(ctx, th, store.NewMessage{Text: strings.Repeat("é", chatrelay.MaxText+1)})
	wantCode(t, err, chatrelay.TextTooLong)
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: strings.Repeat("é", chatrelay.MaxText)}))
}

// TestDates checks the id stamp and ts of a message against Go's calendar
// for many instants: the caller's (the epoch is in now's second) and the
// script's own (a node whose clock is behind: the epoch is the thread's
// newest + 1, in a later second than its now).
func TestDates(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.Time{})
	s := openStore(t, srv, Options{Now: clk.Now, MaxThreads: 1 << 20, Retention: chatrelay.Retention{Age: 1 << 62}})
	ctx := t.Context()
	instants := []time.Time{
		time.Date(1970, 1, 1, 0, 0, 1, 0, time.UTC),
		time.Date(1972, 2, 29, 23, 59, 59, 999e6, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 0, time.UTC),
		time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 2, 28, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2400, 2, 29, 1, 2, 3, 4e6, time.UTC),
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		instants = append(instants, time.UnixMilli(1000+rng.Int64N(4102444800000)))
	}
	for i, at := range instants {
		clk.Set(at)
		th := fmt.Sprintf("%016x", i+1)
		e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "t"}))
		if e.Epoch != at.UnixMilli() {
			t.Fatalf("epoch %d, want %d", e.Epoch, at.UnixMilli())
		}
		checkEntry(t, e)
		clk.Set(at.Add(-time.Second))
		e = must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "t"}))
		if e.Epoch != at.UnixMilli()+1 {
			t.Fatalf("behind: epoch %d, want %d", e.Epoch, at.UnixMilli()+1)
		}
		checkEntry(t, e)
	}
}

// TestThreadLimitAcrossNodes races thread creations on two nodes: exactly
// MaxThreads threads are created, the rest get 507 thread_limit, existing
// threads keep working, and a swept thread frees its place.
func TestThreadLimitAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	opt := Options{MaxThreads: 7, Now: clk.Now}
	a, b := openStore(t, srv, opt), openStore(t, srv, opt)
	threadLimitAcrossNodes(t, a, b, clk)
}

// threadLimitAcrossNodes checks a store limited to 7 threads through two
// nodes a and b: 40 threads created at once from both, 7 made and 33
// refused; existing threads keep working on every node; a sweep that
// removes one expired thread makes room for exactly one.
func threadLimitAcrossNodes(t *testing.T, a, b store.Store, clk *testclock.Clock) {
	ctx := t.Context()

	var mu sync.Mutex
	created := map[string]store.Store{}
	limited := 0
	var wg sync.WaitGroup
	for i := range 40 {
		node := a
		if i%2 == 1 {
			node = b
		}
		th := fmt.Sprintf("%016x", 0xabc000+i)
		wg.Go(func() {
			_, err := node.Append(ctx, th, store.NewMessage{Text: "first"})
			mu.Lock()
			defer mu.Unlock()
			switch chatrelay.CodeOf(err) {
			case "":
				created[th] = node
			case chatrelay.ThreadLimit:
				limited++
			default:
				t.Errorf("append: %v", err)
			}
		})
	}
	wg.Wait()
	if len(created) != 7 || limited != 33 {
		t.Fatalf("created %d threads, %d refused; want 7 and 33", len(created), limited)
	}
	for th := range created { // existing threads keep working on every node
		for _, node := range []store.Store{a, b} {
			must[store.Entry](t)(node.Append(ctx, th, store.NewMessage{Text: "more"}))
		}
	}
	_, err := b.Append(ctx, "fedcba9876543210", store.NewMessage{Text: "new"})
	wantCode(t, err, chatrelay.ThreadLimit)

	// One thread's messages expire; the sweep removes it; a new thread fits.
	var old string
	for th := range created {
		old = th
		break
	}
	clk.Advance(31 * 24 * time.Hour)
	for th := range created {
		if th != old {
			must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "recent"}))
		}
	}
	st := must[store.SweepStats](t)(b.Sweep(ctx))
	if st.ThreadsRemoved != 1 || st.Threads != 7 {
		t.Fatalf("sweep %+v", st)
	}
	must[store.Entry](t)(a.Append(ctx, "fedcba9876543210", store.NewMessage{Text: "new"}))
	_, err = b.Append(ctx, old, store.NewMessage{Text: "back"})
	wantCode(t, err, chatrelay.ThreadLimit)
}

// TestSweepFromTwoNodes sweeps the same threads from two nodes at once:
// each message is dropped once, each expired thread removed once.
func TestSweepFromTwoNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	ret := chatrelay.Retention{Messages: 10, Age: time.Hour}
	a := openStore(t, srv, Options{Retention: ret, Now: clk.Now})
	b := openStore(t, srv, Options{Retention: ret, Now: clk.Now})
	ctx := t.Context()
	const n = 30
	for i := range n {
		th := fmt.Sprintf("%016x", i+1)
		for range 4 {
			must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "old"}))
		}
	}
	clk.Advance(50 * time.Minute)
	keep := map[string]int64{}
	for i := range n / 2 { // half the threads get a message that stays
		th := fmt.Sprintf("%016x", i+1)
		keep[th] = must[store.Entry](t)(b.Append(ctx, th, store.NewMessage{Text: "new"})).Epoch
	}
	clk.Advance(20 * time.Minute)

	var wg sync.WaitGroup
	stats := make([]store.SweepStats, 2)
	for i, node := range []*Store{a, b} {
		wg.Go(func() {
			st, err := node.Sweep(ctx)
			if err != nil {
				t.Error(err)
			}
			stats[i] = st
		})
	}
	wg.Wait()
	if d := stats[0].Dropped + stats[1].Dropped; d != 4*n {
		t.Fatalf("dropped %d in all (%+v), want %d", d, stats, 4*n)
	}
	if r := stats[0].ThreadsRemoved + stats[1].ThreadsRemoved; r != n/2 {
		t.Fatalf("removed %d threads in all (%+v), want %d", r, stats, n/2)
	}
	infos := must[[]store.ThreadInfo](t)(a.Threads(ctx))
	if len(infos) != n/2 {
		t.Fatalf("%d threads left, want %d", len(infos), n/2)
	}
	for _, info := range infos {
		if info.Messages != 1 || info.LastEpoch != keep[info.Thread] {
			t.Fatalf("thread left: %+v", info)
		}
		p := must[store.Page](t)(b.Since(ctx, info.Thread, 1792778400000, 0))
		if !p.Reset || len(p.Messages) != 1 {
			t.Fatalf("since an expired message: %+v", p)
		}
	}
	for i := n / 2; i < n; i++ {
		th := fmt.Sprintf("%016x", i+1)
		if k := a.rdb.Exists(ctx, a.keysOf(th)...).Val(); k != 0 {
			t.Fatalf("removed thread %s keeps %d keys", th, k)
		}
	}
}

// TestPrefixes keeps two deployments on one Redis apart.
func TestPrefixes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	b := openStore(t, srv, Options{Prefix: "other:"})
	ctx := t.Context()
	must[store.Entry](t)(a.Append(ctx, "a1b2c3d4e5f60718", store.NewMessage{Text: "x"}))
	if p := must[store.Page](t)(b.Since(ctx, "a1b2c3d4e5f60718", 0, 0)); len(p.Messages) != 0 {
		t.Fatalf("other prefix sees %+v", p)
	}
	// The log, its meta, the index and the generation. The other prefix's
	// read made its own generation.
	keys := a.rdb.Keys(ctx, "*").Val()
	slices.Sort(keys)
	want := []string{"chatrelay:generation", "chatrelay:threads", "chatrelay:{a1b2c3d4e5f60718}:log", "chatrelay:{a1b2c3d4e5f60718}:meta", "other:generation"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
}

// TestUnavailable: with Redis gone every operation answers
// store_unavailable (retryable, with a wait), and Open does too.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	rl := NewRateLimiter(s, chatrelay.Windows{})
	sl := NewStreamLimiter(s, chatrelay.StreamLimits{}, 0)
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "x"}))
	srv.Kill()

	check := func(what string, err error) {
		t.Helper()
		he := wantCode(t, err, chatrelay.StoreUnavailable)
		if he.Retry <= 0 || !he.Code.Retryable() {
			t.Fatalf("%s: %+v", what, he)
		}
	}
	_, err := s.Append(ctx, th, store.NewMessage{Text: "y"})
	check("append", err)
	_, err = s.Since(ctx, th, 0, 0)
	check("since", err)
	_, err = s.Threads(ctx)
	check("threads", err)
	_, err = s.Sweep(ctx)
	check("sweep", err)
	_, err = rl.Take(ctx, th, "192.0.2.1")
	check("take", err)
	_, err = sl.Acquire(ctx, th, "192.0.2.1", chatrelay.OwnerStream)
	check("acquire", err)
	check("ping", s.Ping(ctx))
	_, err = Open(ctx, srv.URL(), Options{})
	check("open", err)
	if _, err = Open(ctx, "http://127.0.0.1:1", Options{}); err == nil {
		t.Fatal("Open accepted an http URL")
	}

	srv.Restart(t)
	assert.Eventually(t, 10*time.Second, "append after the restart", func() bool {
		_, err := s.Append(ctx, th, store.NewMessage{Text: "z"})
		return err == nil
	})
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	ctx := context.Background()
	s, err := Open(ctx, "redis://"+srv.Addr()+"/3?client_name=node1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if db := s.rdb.(*redis.Client).Options().DB; db != 3 {
		t.Fatalf("db %d", db)
	}
	// rediss:// is accepted (a TLS client); this server speaks no TLS.
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := Open(tctx, "rediss://"+srv.Addr()+"/0?dial_timeout=1s", Options{}); chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
		t.Fatalf("rediss to a plain server: %v", err)
	}
}

// TestIDSuffixes drives the script's choice of id suffix with chosen
// candidates: a taken suffix is skipped, all taken is a collision, and the
// suffixes of the second are found again in the log when meta does not
// have them (a thread written by an older version).
func TestIDSuffixes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400500))
	s := openStore(t, srv, Options{Now: clk.Now})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	m := store.NewMessage{Text: "x", Author: chatrelay.Operator}
	suffix := func(cands ...string) string {
		t.Helper()
		res := must[[]string](t)(s.runAppend(ctx, th, &appendReq{m: m}, cands))
		if res[0] != "ok" {
			return res[0]
		}
		e := must[store.Entry](t)(parseEntry(res[1]))
		checkEntry(t, e)
		return e.ID[len(e.ID)-6:]
	}
	steps := []struct {
		name  string
		cands []string
		want  string
	}{
		{"first of its second", []string{"aaaaaa", "bbbbbb"}, "aaaaaa"},
		{"taken is skipped", []string{"aaaaaa", "bbbbbb"}, "bbbbbb"},
		{"all taken", []string{"aaaaaa", "bbbbbb"}, "collision"},
		{"a free one", []string{"bbbbbb", "cccccc", "aaaaaa"}, "cccccc"},
	}
	for _, st := range steps {
		if got := suffix(st.cands...); got != st.want {
			t.Fatalf("%s: %s, want %s", st.name, got, st.want)
		}
	}
	s.rdb.HDel(ctx, s.metaKey(th), "sec", "sfx")
	if got := suffix("cccccc", "aaaaaa", "dddddd"); got != "dddddd" {
		t.Fatalf("without meta's record of the second: %s, want dddddd", got)
	}
	clk.Advance(time.Second) // a new second: every suffix is free again
	if got := suffix("aaaaaa"); got != "aaaaaa" {
		t.Fatalf("next second: %s", got)
	}
	if got := suffix("aaaaaa", "eeeeee"); got != "eeeeee" {
		t.Fatalf("next second, second message: %s", got)
	}
}

// TestParseEntry: the fast reader of the stored layout agrees with
// encoding/json, and other layouts still parse (through encoding/json).
func TestParseEntry(t *testing.T) {
	t.Parallel()
	texts := []string{"plain", `"quoted" \\ back\\`, "line\nbreak\ttab\r", "\u2028\u2029 é ✓ 🙂", "\x01\x1f\x7f", "<b>&amp;</b>", `\"`, "}", `","text":"`}
	for i, text := range texts {
		m := chatrelay.Message{ID: "MSG-20261023-180000-a1b2c3", Epoch: 1792778400123 + int64(i), TS: "2026-10-23T18:00:00+00:00", Author: chatrelay.Author(texts[(i+1)%len(texts)]), Text: text}
		js := string(chatrelay.MarshalMessage(m))
		fast, ok := parseFast(js)
		if !ok || !reflect.DeepEqual(fast, m) {
			t.Fatalf("parseFast(%s) = %+v, %v", js, fast, ok)
		}
		// A message read from its v1 JSON has no v2 state: its rev is its
		// epoch, and its v2 object is the one MarshalMessageV2 makes.
		want := m
		want.Rev = m.Epoch
		for _, parse := range []func(string) (store.Entry, error){parseEntry, entryOfJSON} {
			e, err := parse(js)
			if err != nil || !reflect.DeepEqual(e.Message, want) || string(e.JSON) != js || string(e.JSON2) != string(chatrelay.MarshalMessageV2(m)) {
				t.Fatalf("parse(%s) = %+v, %v", js, e, err)
			}
		}
	}
	other := `{"text":"x","author":"agent","ts":"2026-10-23T18:00:00+00:00","epoch":5,"id":"MSG-x"}`
	if _, ok := parseFast(other); ok {
		t.Fatal("parseFast accepted another layout")
	}
	if e, err := parseEntry(other); err != nil || e.Text != "x" || e.Epoch != 5 {
		t.Fatalf("parseEntry(other layout) = %+v, %v", e, err)
	}
	for _, bad := range []string{"", "{", `{"id":"x"}`, `{"id":"MSG","epoch":1,"ts":"t","author":"a","text":"t"`, "null",
		`{"id":"MSG","epoch":5,"ts":"t","author":"a","text":"t","rev":4}`} {
		if _, err := entryOfJSON(bad); err == nil {
			t.Fatalf("entryOfJSON(%q) accepted", bad)
		}
	}
}

// TestV2Encoding: what the scripts store for a message with v2 state (the
// v2 object split around its rev, with the rev put in by the script) is
// byte for byte chatrelay.MarshalMessageV2, and reads back as the message.
func TestV2Encoding(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1792778400123)
	ask := chatrelay.Ask{Type: chatrelay.Input, Prompt: "Which <branch>?", Choices: []chatrelay.Choice{{Value: "main", Label: "Main \"branch\""}}, Timeout: time.Minute}
	answered := ask.Interaction(now)
	answered.State, answered.Answer, answered.AnsweredBy, answered.AnsweredAt = chatrelay.Answered, &chatrelay.Answer{Value: "main"}, chatrelay.Operator, now.UnixMilli()+5
	base := chatrelay.Message{ID: "MSG-20261023-180000-a1b2c3", Epoch: now.UnixMilli(), TS: "2026-10-23T18:00:00+00:00", Author: chatrelay.Hermes, Text: "line\nbreak & <b> ,\"rev\":1,"}
	for _, m := range []chatrelay.Message{
		{AuthorName: "Alex \u2028", ClientID: "tab-1:2"},
		{Interaction: ask.Interaction(now)},
		{Interaction: answered, Reactions: chatrelay.Reactions{"👍": {chatrelay.Hermes, "p:p_1a2b3c4d"}, "🎉": {chatrelay.Operator}}},
		{Card: &chatrelay.Card{Title: "Build", FallbackText: "green", Blocks: []chatrelay.Block{{Type: chatrelay.CodeBlock, Text: "a\tb", Language: "go"}}}},
	} {
		m.ID, m.Epoch, m.TS, m.Author, m.Text = base.ID, base.Epoch, base.TS, base.Author, base.Text
		if !hasV2(&m) {
			t.Fatalf("hasV2(%+v) = false", m)
		}
		v1 := chatrelay.MarshalMessage(m)
		head, tail := string(v1[:len(v1)-1])+`,"rev":`, v2Tail(m)
		m.Rev = m.Epoch + 42
		stored := head + strconv.FormatInt(m.Rev, 10) + tail
		if want := string(chatrelay.MarshalMessageV2(m)); stored != want {
			t.Fatalf("stored\n%s\nwant\n%s", stored, want)
		}
		e, err := entryOfJSON(stored)
		if err != nil || !reflect.DeepEqual(e.Message, m) || string(e.JSON) != string(chatrelay.MarshalMessage(m)) || string(e.JSON2) != stored {
			t.Fatalf("entryOfJSON(%s) = %+v, %v", stored, e, err)
		}
	}
	if hasV2(&base) {
		t.Fatal("a plain message has v2 fields")
	}
	// A v2 object beside another message's v1 JSON is refused.
	m := base
	m.ClientID, m.Rev = "c1", m.Epoch
	other := base
	other.Epoch++
	for _, v1 := range [][]byte{chatrelay.MarshalMessage(other), []byte("{}"), {}} {
		if _, err := v2Entry(v1, string(chatrelay.MarshalMessageV2(m))); err == nil {
			t.Fatalf("v2Entry(%s) accepted another message's v2 object", v1)
		}
	}
	if _, err := v2Entry(chatrelay.MarshalMessage(m), string(chatrelay.MarshalMessageV2(m))); err != nil {
		t.Fatal(err)
	}
}

// TestAppendAfterAnOlderVersion: a thread written before meta kept what an
// append needs (no "last", "first", "sec", "sfx") is appended to as any
// other: the epoch follows its newest message, the id is not one its
// second already has, and retention by age still drops its old messages.
func TestAppendAfterAnOlderVersion(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400500))
	s := openStore(t, srv, Options{Now: clk.Now, Retention: chatrelay.Retention{Age: time.Hour}})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	m := store.NewMessage{Text: "x", Author: chatrelay.Operator}
	old := must[store.Entry](t)(s.Append(ctx, th, m))
	clk.Advance(50 * time.Minute)
	var es []store.Entry
	for range 3 {
		es = append(es, must[store.Entry](t)(s.Append(ctx, th, m)))
	}
	forget := func() {
		t.Helper()
		if err := s.rdb.HDel(ctx, s.metaKey(th), "last", "first", "sec", "sfx", "n").Err(); err != nil {
			t.Fatal(err)
		}
	}
	forget()
	// The same second as the three, the suffixes of two of them offered first.
	res := must[[]string](t)(s.runAppend(ctx, th, &appendReq{m: m}, []string{es[0].ID[20:], es[2].ID[20:], "abcdef"}))
	e := must[store.Entry](t)(parseEntry(res[1]))
	if res[0] != "ok" || e.Epoch != es[2].Epoch+1 || e.ID[20:] != "abcdef" {
		t.Fatalf("append after the older version: %q", res)
	}
	forget()
	clk.Advance(20 * time.Minute) // the first message is past the hour
	e = must[store.Entry](t)(s.Append(ctx, th, m))
	p := must[store.Page](t)(s.Since(ctx, th, 0, 0))
	if len(p.Messages) != 5 || p.Messages[0].ID != es[0].ID || p.Cursor != e.Epoch || !must[store.Page](t)(s.Since(ctx, th, old.Epoch-1, 0)).Reset {
		t.Fatalf("after retention: %d messages from %s, cursor %d", len(p.Messages), p.Messages[0].ID, p.Cursor)
	}
}
