package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// FuzzStoreDiff is the differential test of the backends: one random
// sequence of operations, decoded from the fuzz input, applied in turn to
// the file store, the file store with its append logs, one Redis, two
// Redis shards and a Redis Cluster (each fresh for the input, under a
// prefix of its own on servers and a cluster shared by the fuzz run, all
// on one test clock), and everything a user could observe of each answer
// compared with the file store's: the messages and their order, epochs, revs and ts, cursors,
// resets, titles, the error codes (and the message an error is about),
// interaction states, grants, audit trails, attachments, agent keys (and
// their scopes) and push subscriptions (up to LimitPushSubscriptions and
// LimitPushParticipants).
//
// And the live feed (diff_feed_test.go): each backend's store.Feed is
// followed by a reader of every thread, one of each thread and one of
// AgentsTopic, and a store.Watch with updates, from the input's start
// (and again after a restart). After every operation, each
// reader must have been handed exactly the writes its store acknowledged
// (each new message and each change that changed something, in its
// state as answered, in order, none lost or repeated), waited for until a
// deadline that fails the input (no sleep); what each reader was handed
// up to them (with the Resets and the interactions retention closed) is
// compared thread by thread, as the answers are. Participants and agent
// batches (no message) are not compared, only required: after an invite
// every reader of the thread is handed a Participants batch of it, and
// after an agent key is added a reader of AgentsTopic an Agents batch
// (signalCheck), before the next operation.
//
// What is normalised, because it may legitimately differ:
//   - the random part of the ids a store makes (a message id's six hex
//     after its second, an interaction's and an attachment's 12 hex):
//     each is named by the order in which it first appears in that
//     backend's answers, so that an id still has to be the same one
//     everywhere it appears;
//   - an error's words (only its code and its About are the contract),
//     except in the answers of participants, devices, agent keys and
//     push subscriptions (answerW), whose refusals every backend words
//     with the same domain function, and which a user reads;
//   - the order of Pending (the contract gives none): sorted;
//   - a list that is nil or empty (every caller answers both as none:
//     host.ListThreads, the CLI's list --json, the routes);
//   - SweepStats.Threads (how many threads a sweep looked at: the file
//     store's counts the documents on disk, Redis's the indexed threads,
//     neither observable by a user).
//
// A divergence fails the input with the operations so far and both
// answers. The seed corpus (seedsDiff and testdata/fuzz/FuzzStoreDiff) runs
// in every go test of the package; seedsBulk only when fuzzing.
func FuzzStoreDiff(f *testing.F) {
	for _, s := range seedsDiff() {
		f.Add(s)
	}
	if fl := flag.Lookup("test.fuzz"); fl != nil && fl.Value.String() != "" {
		for _, s := range seedsBulk() {
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runDiff(t, data)
	})
}

// The backends the differential test compares, the first the reference.
var diffBackends = []string{File, FileAppendLog, Redis, RedisShards, RedisCluster}

var diffThreads = []string{thA, thB, thC}

// The operations. Each reads its arguments from the input after its byte.
const (
	opAppend = iota
	opAsk
	opCard
	opReact
	opAnswer
	opClock
	opSince
	opChanges
	opThreads
	opSweep
	opPending
	opInvite
	opDevice
	opRevoke
	opGrants
	opResolve
	opParticipantPost
	opUsed
	opAudit
	opUpload
	opOpenAttachment
	opAgent
	opObserve
	opReopen
	opBulk
	opPush
	opCount
)

// opSpace is how many op codes an input's byte names (modulo): the codes
// past opCount observe, so that an op added later changes the meaning of
// none of the corpus's inputs but those that named a free code.
const opSpace = 32

var opNames = [...]string{"append", "ask", "card", "react", "answer", "clock", "since", "changes", "threads",
	"sweep", "pending", "invite", "device", "revoke", "grants", "resolve", "participant-post", "used", "audit",
	"upload", "open-attachment", "agent", "observe", "reopen", "bulk", "push"}

// maxDiffOps bounds the operations of one diffInput (a run's time).
const maxDiffOps = 80

// diffInput reads the fuzz input a byte at a time; past its end every byte is 0.
type diffInput struct {
	b []byte
	i int
}

func (in *diffInput) more() bool { return in.i < len(in.b) }

func (in *diffInput) byte() byte {
	if in.i >= len(in.b) {
		return 0
	}
	in.i++
	return in.b[in.i-1]
}

// pick returns a choice in [0, n).
func (in *diffInput) pick(n int) int { return int(in.byte()) % n }

// diffBackend is one backend under test and what its answers named so far.
type diffBackend struct {
	name  string
	b     *Backend
	st    store.Store
	p     store.Participants
	a     store.Attachments
	ag    store.Agents
	pu    store.Push
	canon map[string]string // a store-made id → its name by first appearance
	seq   int

	msgs    []store.Entry // appended (not replayed), in order
	ixs     []string      // the interactions of msgs, in order
	atts    []string      // the uploads' ids, in order
	cursors []int64       // cursors of pages read

	feed  *diffFeed                   // its readers (diff_feed_test.go)
	taken map[*feedSub]map[string]int // per reader and thread, the events compared so far
	// per reader, the Participants batches of each thread (and the Agents
	// batches, under AgentsTopic) counted at the last signalCheck
	signals map[*feedSub]map[string]int
	acks    map[string][]store.Entry // per thread, the writes the feed owes since the last check
	ackRev  map[string]int64         // per thread, the newest rev acknowledged

	partsOwed  map[string]bool // threads whose participants record a write changed since the last check
	agentsOwed bool            // an agent key was added since the last check
}

var madeID = regexp.MustCompile(`MSG-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}|ix_[0-9a-f]{12}|at_[0-9a-f]{12}`)

// norm names the store-made ids of s by their first appearance.
func (d *diffBackend) norm(s string) string {
	return madeID.ReplaceAllStringFunc(s, func(id string) string {
		c, ok := d.canon[id]
		if !ok {
			d.seq++
			keep := 3 // ix_, at_
			if strings.HasPrefix(id, "MSG-") {
				keep = len("MSG-20060102-150405-")
			}
			c = fmt.Sprintf("%s#%d", id[:keep], d.seq)
			d.canon[id] = c
		}
		return c
	})
}

// observed is what a backend answered to one operation, as compared.
type observed struct {
	Value any    `json:",omitempty"`
	Err   string `json:",omitempty"` // the code
	About string `json:",omitempty"`
	Words string `json:",omitempty"` // the error's message, where it is compared (answerW)
	Bad   string `json:",omitempty"` // an answer inconsistent in itself
}

// entryView is an Entry as a user sees it.
type entryView struct {
	chatrelay.Message
	Replayed bool `json:",omitempty"`
}

func (d *diffBackend) entry(e store.Entry, bad *[]string) entryView {
	if e.ID != "" && (!bytes.Equal(e.JSON, chatrelay.MarshalMessage(e.Message)) || !bytes.Equal(e.JSON2, chatrelay.MarshalMessageV2(e.Message))) {
		*bad = append(*bad, fmt.Sprintf("the JSON of %s is not its message's: %s / %s", e.ID, e.JSON, e.JSON2))
	}
	return entryView{Message: e.Message, Replayed: e.Replayed}
}

type pageView struct {
	Thread   string
	Messages []entryView
	Cursor   int64
	Awaiting bool
	Title    string
	Reset    bool
}

func (d *diffBackend) page(p store.Page, bad *[]string) pageView {
	v := pageView{Thread: p.Thread, Cursor: p.Cursor, Awaiting: p.Awaiting, Title: p.Title, Reset: p.Reset}
	for _, e := range p.Messages {
		v.Messages = append(v.Messages, d.entry(e, bad))
	}
	return v
}

// answer records value and err as the backend's answer, normalised.
func (d *diffBackend) answer(value any, err error, bad []string) string {
	return d.answerOf(value, err, bad, false)
}

// answerW is answer with the error's words too: the answers of the
// participants, devices, agent keys and push subscriptions, whose
// refusals every backend makes with the same domain function (AdmitGrant,
// AdmitPush, GrantIndex, UnknownAgent) and a user reads.
func (d *diffBackend) answerW(value any, err error, bad []string) string {
	return d.answerOf(value, err, bad, true)
}

func (d *diffBackend) answerOf(value any, err error, bad []string, words bool) string {
	if v := reflect.ValueOf(value); v.Kind() == reflect.Slice && v.Len() == 0 {
		value = nil // nil or empty: every caller answers both as none
	}
	o := observed{Value: value, Bad: strings.Join(bad, "; ")}
	if err != nil {
		o.Value = nil
		var ce *chatrelay.Error
		if errors.As(err, &ce) {
			o.Err, o.About = string(ce.Code), string(ce.About)
			if words {
				o.Words = ce.Message
			}
		} else {
			o.Err = "not a domain error: " + err.Error()
		}
	}
	js, jerr := json.Marshal(o)
	if jerr != nil {
		return "unencodable: " + jerr.Error()
	}
	return d.norm(string(js))
}

// diffRun is one diffInput's run.
type diffRun struct {
	t      *testing.T
	clk    *testclock.Clock
	bs     []*diffBackend
	log    []string
	grants []chatrelay.Grant // made by invite and device, the same for every backend
	agents []chatrelay.AgentKey
	pushes []string // the ids of the push subscriptions asked for, the same for every backend
	ops    int
	opt    Options
	high   time.Time // the latest time the test clock reached
}

func runDiff(t *testing.T, data []byte) {
	in := &diffInput{b: data}
	opt := Options{}
	switch in.pick(4) {
	case 1:
		opt.Retention.Messages = 3
	case 2:
		opt.Retention.Age = time.Hour
	case 3:
		opt.Retention = chatrelay.Retention{Messages: 5, Age: 2 * time.Hour}
	}
	if in.pick(4) == 3 {
		opt.MaxThreads = 2
	}
	clk := testclock.New(t0)
	opt.Now = clk.Now
	r := &diffRun{t: t, clk: clk, opt: opt, high: t0}
	r.log = append(r.log, fmt.Sprintf("options: retention %+v, max threads %d", opt.Retention, opt.MaxThreads))
	for _, name := range diffBackends {
		b := Open(t, name, opt)
		dropKeysAtEnd(t, b)
		d := &diffBackend{name: name, canon: map[string]string{}, acks: map[string][]store.Entry{}, ackRev: map[string]int64{}, partsOwed: map[string]bool{}}
		d.open(t, b)
		r.startFeed(d)
		r.bs = append(r.bs, d)
	}
	for in.more() && r.ops < maxDiffOps {
		r.ops++
		r.step(in)
		r.feedCheck()
	}
	r.observeAll()
	// A last post in every thread that has messages: what the feed
	// handed on after the last write (an interaction the sweep closed)
	// comes before it.
	r.ops++
	for _, th := range diffThreads {
		r.each("fence "+th, func(d *diffBackend) string {
			return r.appendTo(d, th, store.NewMessage{Author: chatrelay.Operator, Text: "fence", MustExist: true})
		})
	}
	r.feedCheck()
}

// open makes b the backend d uses.
func (d *diffBackend) open(t *testing.T, b *Backend) {
	d.b, d.st = b, b.Store
	var ok bool
	if d.p, ok = b.Store.(store.Participants); !ok {
		t.Fatalf("%s keeps no participants", d.name)
	}
	if d.a, ok = b.Store.(store.Attachments); !ok {
		t.Fatalf("%s keeps no attachments", d.name)
	}
	if d.ag, ok = b.Store.(store.Agents); !ok {
		t.Fatalf("%s keeps no agent keys", d.name)
	}
	if d.pu = store.PushOf(b.Store); d.pu == nil {
		t.Fatalf("%s keeps no push subscriptions", d.name)
	}
}

// dropKeysAtEnd deletes the keys of a Redis backend once its store is
// closed, so that a long fuzz run does not fill the shared servers.
func dropKeysAtEnd(t *testing.T, b *Backend) {
	var srvs []*Server
	switch b.Name {
	case Redis:
		srvs = []*Server{b.Server}
	case RedisShards:
		srvs = b.Servers
	case RedisCluster:
		// One cluster for the fuzz run (SharedCluster), flushed of each
		// input's keys node by node, one key a command (a node refuses
		// keys of several slots in one).
		t.Cleanup(func() {
			b.Close()
			ctx := context.Background()
			err := b.Cluster.Client(t).ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
				iter := c.Scan(ctx, 0, b.Prefix+"*", 1000).Iterator()
				p := c.Pipeline()
				for iter.Next(ctx) {
					p.Unlink(ctx, iter.Val())
				}
				if err := iter.Err(); err != nil {
					return err
				}
				_, err := p.Exec(ctx)
				return err
			})
			if err != nil { // keys left would be the next input's
				t.Errorf("unlinking the input's keys on the shared cluster: %v", err)
			}
		})
		return
	}
	if len(srvs) == 0 {
		return
	}
	t.Cleanup(func() {
		b.Close()
		ctx := context.Background()
		for _, s := range srvs {
			c := s.Client(t)
			iter := c.Scan(ctx, 0, b.Prefix+"*", 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			for len(keys) > 0 {
				n := min(len(keys), 500)
				c.Unlink(ctx, keys[:n]...)
				keys = keys[n:]
			}
		}
	})
}

// each applies op to every backend, in turn, and compares their answers
// with the first's.
func (r *diffRun) each(what string, op func(d *diffBackend) string) {
	r.t.Helper()
	r.log = append(r.log, fmt.Sprintf("%3d %s at %s", r.ops, what, r.clk.Now().Format("15:04:05.000")))
	var want string
	for i, d := range r.bs {
		got := op(d)
		if i == 0 {
			want = got
			if debugDiff {
				r.t.Logf("%s\n    %.400s", what, got)
			}
			continue
		}
		if got != want {
			r.t.Fatalf("the backends differ at operation %d (%s)\n%s\n%s answered:\n  %s\n%s answered:\n  %s",
				r.ops, what, strings.Join(r.log, "\n"), r.bs[0].name, want, d.name, got)
		}
	}
}

var ctxb = context.Background()

var debugDiff = os.Getenv("DIFF_DEBUG") != ""

var (
	texts     = []string{"hello", "again", "", "   ", "<b>x</b> \u202e", "ünïcödé 🎉", strings.Repeat("x", chatrelay.MaxText+1)}
	clientIDs = []string{"", "c1", "c2", "c3"}
	authors   = []chatrelay.Author{chatrelay.Operator, chatrelay.Hermes, chatrelay.Agent, ""}
	emojis    = []string{"👍", "🎉", "", "a b", "❤️"}
	steps     = []time.Duration{time.Millisecond, 500 * time.Millisecond, time.Second, time.Minute, 30 * time.Minute,
		time.Hour, 25 * time.Hour, -time.Hour, 0, 31 * 24 * time.Hour, -26 * time.Hour}
	limits = []int{0, 1, 2, 5, chatrelay.PollPage}
)

// cursor picks a cursor for d: 0, a message's epoch or rev (or one off),
// a cursor a page answered, or one in the future.
func (d *diffBackend) cursor(in *diffInput) (int64, string) {
	k, n := in.pick(6), int(in.byte())
	switch k {
	case 1, 2, 3:
		if len(d.msgs) > 0 {
			e := d.msgs[n%len(d.msgs)]
			return e.Epoch + int64(k-2), fmt.Sprintf("message %d's epoch%+d", n%len(d.msgs), k-2)
		}
	case 4:
		if len(d.cursors) > 0 {
			return d.cursors[n%len(d.cursors)], fmt.Sprintf("cursor %d", n%len(d.cursors))
		}
	case 5:
		return t0.Add(1000*time.Hour).UnixMilli() + int64(n), "the future"
	}
	return 0, "0"
}

func (r *diffRun) step(in *diffInput) {
	op := in.pick(opSpace)
	if op >= opCount {
		op = opObserve
	}
	th := diffThreads[in.pick(len(diffThreads))]
	name := opNames[op] + " " + th
	switch op {
	case opAppend:
		m := store.NewMessage{Author: authors[in.pick(len(authors))], Text: texts[in.pick(len(texts))],
			ClientID: clientIDs[in.pick(len(clientIDs))]}
		flags := in.byte()
		m.MustExist = flags&1 != 0
		if flags&2 != 0 {
			m.Title = fmt.Sprintf("Title %d", flags>>4)
		}
		var att int
		if flags&4 != 0 {
			att = int(flags>>2) + 1
		}
		r.each(fmt.Sprintf("%s %+v attachment %d", name, m, att), func(d *diffBackend) string {
			m := m
			if att > 0 && len(d.atts) > 0 {
				m.Attachments = []string{d.atts[(att-1)%len(d.atts)]}
			}
			return r.appendTo(d, th, m)
		})
	case opAsk:
		ask := &chatrelay.Ask{Type: chatrelay.Approval, Prompt: "May I?"}
		switch in.pick(4) {
		case 1:
			ask = &chatrelay.Ask{Type: chatrelay.Input, Prompt: "Which?", Choices: []chatrelay.Choice{{Value: "a"}, {Value: "b"}}}
		case 2:
			ask = &chatrelay.Ask{Type: chatrelay.Input, Prompt: "Say", AllowText: true}
		case 3:
			ask = &chatrelay.Ask{Type: chatrelay.Approval, Prompt: "  "} // refused
		}
		ask.Timeout = []time.Duration{0, time.Second, time.Minute, 2 * time.Hour}[in.pick(4)]
		cid := clientIDs[in.pick(len(clientIDs))]
		r.each(fmt.Sprintf("%s %+v client_id %q", name, *ask, cid), func(d *diffBackend) string {
			a := *ask
			return r.appendTo(d, th, store.NewMessage{Author: chatrelay.Hermes, Ask: &a, ClientID: cid})
		})
	case opCard:
		cid := clientIDs[in.pick(len(clientIDs))]
		title := []string{"Card", "Other"}[in.pick(2)]
		r.each(fmt.Sprintf("%s %q client_id %q", name, title, cid), func(d *diffBackend) string {
			c := &chatrelay.Card{Title: title, FallbackText: "fallback", Blocks: []chatrelay.Block{{Type: chatrelay.TextBlock, Text: "body"}}}
			return r.appendTo(d, th, store.NewMessage{Author: chatrelay.Hermes, Card: c, ClientID: cid})
		})
	case opReact:
		unreact, n := in.pick(2) == 1, int(in.byte())
		emoji, by := emojis[in.pick(len(emojis))], authors[in.pick(3)]
		c := store.Change{Op: store.React, Emoji: emoji, By: by}
		if unreact {
			c.Op = store.Unreact
		}
		r.each(fmt.Sprintf("%s %s message %d %q by %s", name, c.Op, n, emoji, by), func(d *diffBackend) string {
			c := c
			c.MessageID = "MSG-20260101-000000-000000"
			if len(d.msgs) > 0 && n < 250 {
				c.MessageID = d.msgs[n%len(d.msgs)].ID
			}
			e, err := d.st.Change(ctxb, th, c)
			if err == nil {
				d.ack(th, e)
			}
			var bad []string
			return d.answer(d.entry(e, &bad), err, bad)
		})
	case opAnswer:
		k, n := in.pick(6), int(in.byte())
		c := store.Change{By: chatrelay.Operator}
		switch k {
		case 0:
			c.Op, c.Answer = store.Respond, chatrelay.Answer{Decision: chatrelay.Approve}
		case 1:
			c.Op, c.Answer = store.Respond, chatrelay.Answer{Decision: chatrelay.Deny}
		case 2:
			c.Op, c.Answer = store.Respond, chatrelay.Answer{Value: "a"}
		case 3:
			c.Op, c.Answer = store.Respond, chatrelay.Answer{Value: "free text"}
		case 4:
			c.Op, c.By = store.Cancel, chatrelay.Hermes
		case 5:
			c.Op, c.By = store.Expire, ""
		}
		r.each(fmt.Sprintf("%s %s %+v interaction %d", name, c.Op, c.Answer, n), func(d *diffBackend) string {
			c := c
			c.InteractionID = "ix_000000000000"
			if len(d.ixs) > 0 && n < 250 {
				c.InteractionID = d.ixs[n%len(d.ixs)]
			}
			e, err := d.st.Change(ctxb, th, c)
			if err == nil {
				d.ack(th, e)
			}
			var bad []string
			return d.answer(d.entry(e, &bad), err, bad)
		})
	case opClock:
		step := steps[in.pick(len(steps))]
		// A step back goes no lower than the latest time the run reached
		// less the removed threads' floors' life (Retention.RemoveAfter)
		// and a minute: the file store judges a floor's life by the test
		// clock and Redis by its own (PX), which a test clock does not
		// move; below that line a floor the file store's sweep let go,
		// and Redis still holds, would decide the epoch of a thread made
		// again. With real clocks both judge alike.
		if low := r.high.Add(-r.opt.Retention.RemoveAfter() + time.Minute); r.clk.Now().Add(step).Before(low) {
			step = low.Sub(r.clk.Now())
		}
		r.log = append(r.log, fmt.Sprintf("%3d clock %+v", r.ops, step))
		r.clk.Advance(step)
		if now := r.clk.Now(); now.After(r.high) {
			r.high = now
		}
	case opSince, opChanges:
		limit := limits[in.pick(len(limits))]
		at := in.i
		r.each(fmt.Sprintf("%s limit %d", name, limit), func(d *diffBackend) string {
			in.i = at
			since, what := d.cursor(in)
			read := d.st.Since
			if op == opChanges {
				read = d.st.Changes
			}
			p, err := read(ctxb, th, since, limit)
			if err == nil {
				d.cursors = append(d.cursors, p.Cursor)
			}
			var bad []string
			return what + ": " + d.answer(d.page(p, &bad), err, bad)
		})
	case opThreads:
		r.each("threads", func(d *diffBackend) string {
			infos, err := d.st.Threads(ctxb)
			return d.answer(infos, err, nil)
		})
	case opSweep:
		r.each("sweep", func(d *diffBackend) string {
			st, err := d.st.Sweep(ctxb)
			st.Threads = 0 // how many it looked at: not observable (see FuzzStoreDiff)
			return d.answer(st, err, nil)
		})
	case opPending:
		r.each("pending", (*diffBackend).pending)
	case opInvite, opDevice:
		life := []time.Duration{0, time.Hour, 2 * time.Hour, time.Minute}[in.pick(4)]
		var g chatrelay.Grant
		var err error
		if op == opInvite {
			iv := chatrelay.Invite{Name: []string{"Alex", "Bo", " \u200b "}[in.pick(3)],
				Role: []chatrelay.Role{chatrelay.Commenter, chatrelay.Viewer}[in.pick(2)], ExpiresIn: life, Cap: []int{0, 1, 2, 5}[in.pick(4)]}
			if err = iv.Check(); err == nil {
				g, _ = iv.Grant(r.clk.Now())
				g.ID = fmt.Sprintf("p_%08x", len(r.grants))
			}
		} else {
			dr := chatrelay.DeviceRequest{Name: "Phone", ExpiresIn: life}
			if err = dr.Check(); err == nil {
				g, _ = dr.Grant(r.clk.Now())
				g.ID = fmt.Sprintf("d_%08x", len(r.grants))
			}
		}
		if err != nil {
			r.log = append(r.log, fmt.Sprintf("%3d %s refused before the store: %v", r.ops, name, err))
			return
		}
		g.Digest = chatrelay.DigestOf(fmt.Sprintf("token %d", len(r.grants)))
		r.grants = append(r.grants, g)
		r.each(fmt.Sprintf("%s %s %+v", name, g.ID, g), func(d *diffBackend) string {
			err := d.p.Invite(ctxb, th, g)
			if err == nil {
				d.partsOwed[th] = true
			}
			return d.answerW(nil, err, nil)
		})
	case opRevoke, opGrants, opResolve, opUsed, opAudit:
		sub, gid := in.pick(4), r.grantID(in)
		switch op {
		case opRevoke:
			r.each(fmt.Sprintf("%s revoke %s", name, gid), func(d *diffBackend) string {
				g, err := d.p.Revoke(ctxb, th, gid)
				return d.answerW(g, err, nil)
			})
		case opGrants:
			r.each(name+" grants", func(d *diffBackend) string {
				gs, err := d.p.Grants(ctxb, th)
				return d.answerW(gs, err, nil)
			})
			r.each(fmt.Sprintf("%s grant %s", name, gid), func(d *diffBackend) string {
				g, err := d.p.Grant(ctxb, th, gid)
				return d.answerW(g, err, nil)
			})
		case opResolve:
			digest := chatrelay.DigestOf("no such token")
			for _, g := range r.grants {
				if g.ID == gid {
					digest = g.Digest
				}
			}
			r.each(fmt.Sprintf("resolve %s's digest", gid), func(d *diffBackend) string {
				thread, g, err := d.p.Resolve(ctxb, digest)
				return d.answerW([]any{thread, g}, err, nil)
			})
		case opUsed:
			r.each(fmt.Sprintf("%s used(%d) %s", name, sub, gid), func(d *diffBackend) string {
				var first bool
				var err error
				switch sub {
				case 0:
					first, err = d.p.MarkUsed(ctxb, th, gid)
				case 1, 2:
					first, err = d.p.Seen(ctxb, th, gid, r.clk.Now().UnixMilli())
				case 3:
					first, err = d.p.NoteExpired(ctxb, th, gid)
				}
				return d.answerW(first, err, nil)
			})
		case opAudit:
			ev := chatrelay.AuditEvent{At: r.clk.Now().UnixMilli(), Event: []string{chatrelay.AuditRefused, chatrelay.AuditIssued, chatrelay.AuditFirstUse, chatrelay.AuditRefused}[sub],
				Participant: gid, Code: chatrelay.Unauthorized}
			r.each(fmt.Sprintf("%s audit %+v", name, ev), func(d *diffBackend) string {
				err := d.p.Audit(ctxb, th, ev)
				log, lerr := d.p.AuditLog(ctxb, th)
				return d.answerW(nil, err, nil) + " then " + d.answerW(log, lerr, nil)
			})
		}
	case opParticipantPost:
		gid := r.grantID(in)
		text := texts[in.pick(len(texts))]
		cid := clientIDs[in.pick(len(clientIDs))]
		g := chatrelay.Grant{ID: gid, Name: "Alex"}
		for _, o := range r.grants {
			if o.ID == gid {
				g = o
			}
		}
		r.each(fmt.Sprintf("%s by %s %q client_id %q", name, gid, text, cid), func(d *diffBackend) string {
			return r.appendTo(d, th, store.NewMessage{Author: g.Author(), AuthorName: g.Name, Text: text, Participant: gid, ClientID: cid})
		})
	case opUpload:
		body := []string{"bytes one", "bytes two", ""}[in.pick(3)]
		by := ""
		if in.pick(2) == 1 {
			by = r.grantID(in)
		}
		fname := []string{"a.txt", "b.png", " "}[in.pick(3)]
		r.each(fmt.Sprintf("%s upload %q %q by %q", name, fname, body, by), func(d *diffBackend) string {
			a, err := d.a.PutAttachment(ctxb, th, store.Upload{Name: fname, Type: "text/plain", Body: strings.NewReader(body), By: by})
			if err == nil {
				d.atts = append(d.atts, a.ID)
			}
			return d.answer(a, err, nil)
		})
	case opOpenAttachment:
		n := int(in.byte())
		reader := ""
		if in.pick(2) == 1 {
			reader = r.grantID(in)
		}
		r.each(fmt.Sprintf("%s open attachment %d as %q", name, n, reader), func(d *diffBackend) string {
			id := "at_000000000000"
			if len(d.atts) > 0 {
				id = d.atts[n%len(d.atts)]
			}
			a, rc, err := d.a.OpenAttachment(ctxb, th, id, reader)
			var body []byte
			if err == nil {
				body, err = io.ReadAll(rc)
				rc.Close()
			}
			return d.answer([]any{a, string(body)}, err, nil)
		})
	case opAgent:
		sub, n := in.pick(4), int(in.byte())
		switch sub {
		case 0:
			k := chatrelay.AgentKey{ID: fmt.Sprintf("a_%08x", len(r.agents)), Name: "agent", CreatedAt: r.clk.Now().UnixMilli(),
				Digest: chatrelay.DigestOf(fmt.Sprintf("agent key %d", len(r.agents)))}
			switch n % 6 {
			case 0, 3:
				k.Threads = []string{th}
			case 4:
				k.Threads = []string{th, diffThreads[(slices.Index(diffThreads, th)+1)%len(diffThreads)]}
			}
			if n%5 == 1 && len(r.agents) > 0 {
				k.ID = r.agents[0].ID // an id already stored: refused
			}
			r.agents = append(r.agents, k)
			r.each(fmt.Sprintf("add agent %+v", k), func(d *diffBackend) string {
				err := d.ag.AddAgent(ctxb, k)
				if err == nil {
					d.agentsOwed = true
				}
				return d.answerW(nil, err, nil)
			})
		case 1:
			id := "a_ffffffff"
			if len(r.agents) > 0 {
				id = r.agents[n%len(r.agents)].ID
			}
			r.each("revoke agent "+id, func(d *diffBackend) string {
				k, err := d.ag.RevokeAgent(ctxb, id)
				return d.answerW(k, err, nil)
			})
		case 2:
			digest := chatrelay.DigestOf("no such key")
			if len(r.agents) > 0 {
				digest = r.agents[n%len(r.agents)].Digest
			}
			r.each("resolve agent", func(d *diffBackend) string {
				k, err := d.ag.ResolveAgent(ctxb, digest)
				return d.answerW(k, err, nil)
			})
		case 3:
			r.each("agent keys", func(d *diffBackend) string {
				ks, err := d.ag.AgentKeys(ctxb)
				return d.answerW(ks, err, nil)
			})
		}
	case opObserve:
		r.observe(th)
	case opBulk:
		r.bulk(in, th, name)
	case opPush:
		r.push(in, th, name)
	case opReopen:
		// A restart: the store closed and opened again on the same data
		// (the same folder, the same Redis and prefix).
		r.log = append(r.log, fmt.Sprintf("%3d reopen", r.ops))
		for _, d := range r.bs {
			d.stopFeed()
			d.b.Close()
			d.open(r.t, d.b.Another(r.t, r.opt))
			r.startFeed(d)
		}
	}
}

// pending answers Pending, in an order of its own (the contract gives
// none): its interactions' ids as named, sorted.
func (d *diffBackend) pending() string {
	ps, err := d.st.Pending(ctxb)
	var out []string
	for _, p := range ps {
		out = append(out, d.norm(fmt.Sprintf("%s %s %d", p.Thread, p.InteractionID, p.Deadline)))
	}
	slices.Sort(out)
	return d.answer(out, err, nil)
}

// grantID picks a grant made so far, or one no thread has.
func (r *diffRun) grantID(in *diffInput) string {
	n := int(in.byte())
	if len(r.grants) == 0 || n >= 250 {
		return "p_ffffffff"
	}
	return r.grants[n%len(r.grants)].ID
}

// appendTo appends m to th in d and answers what it returned.
func (r *diffRun) appendTo(d *diffBackend, th string, m store.NewMessage) string {
	e, err := d.st.Append(ctxb, th, m)
	if err == nil && !e.Replayed {
		d.msgs = append(d.msgs, e)
		d.ack(th, e)
		if e.Interaction != nil {
			d.ixs = append(d.ixs, e.Interaction.ID)
		}
	}
	var bad []string
	return d.answer(d.entry(e, &bad), err, bad)
}

// observe compares everything a reader of thread sees.
func (r *diffRun) observe(th string) {
	r.each("observe "+th, func(d *diffBackend) string {
		var out []string
		for _, read := range []func(context.Context, string, int64, int) (store.Page, error){d.st.Since, d.st.Changes} {
			p, err := read(ctxb, th, 0, 0)
			var bad []string
			out = append(out, d.answer(d.page(p, &bad), err, bad))
		}
		gs, err := d.p.Grants(ctxb, th)
		out = append(out, d.answer(gs, err, nil))
		log, err := d.p.AuditLog(ctxb, th)
		out = append(out, d.answer(log, err, nil))
		subs, err := d.pu.PushSubscriptions(ctxb, th)
		out = append(out, d.answerW(subs, err, nil))
		return strings.Join(out, "\n  ")
	})
}

// observeAll compares every thread, the thread list and the pending
// interactions at the end of an diffInput.
func (r *diffRun) observeAll() {
	for _, th := range diffThreads {
		r.observe(th)
	}
	r.each("threads at the end", func(d *diffBackend) string {
		infos, err := d.st.Threads(ctxb)
		return d.answer(infos, err, nil)
	})
	r.each("pending at the end", (*diffBackend).pending)
	r.each("agent keys at the end", func(d *diffBackend) string {
		ks, err := d.ag.AgentKeys(ctxb)
		return d.answerW(ks, err, nil)
	})
}

// seedsDiff are the seed corpus: sequences that reach the interesting
// states (retention trimming what a cursor pointed at, a repeated
// client_id, an interaction answered late, a participant's cap, a
// device, an attachment named by a post, the sweep).
func seedsDiff() [][]byte {
	// s builds an diffInput: the options, then operations (an op byte, the
	// thread, its arguments).
	s := func(opts []byte, ops ...[]byte) []byte {
		out := slices.Clone(opts)
		for _, o := range ops {
			out = append(out, o...)
		}
		return out
	}
	app := func(th, author, text, cid, flags byte) []byte {
		return []byte{opAppend, th, author, text, cid, flags}
	}
	clock := func(step byte) []byte { return []byte{opClock, 0, step} }
	read := func(op, th, limit, kind, n byte) []byte { return []byte{op, th, limit, kind, n} }
	return [][]byte{
		// Appends with and without client_ids, repeated, reads.
		s([]byte{0, 0}, app(0, 0, 0, 1, 0), app(0, 1, 1, 0, 0), app(0, 0, 0, 1, 0), app(0, 0, 1, 1, 0),
			clock(2), app(0, 2, 5, 2, 2), read(opSince, 0, 0, 0, 0), read(opChanges, 0, 1, 2, 0), []byte{opThreads, 0}),
		// Retention by count: a cursor before what was dropped resets.
		s([]byte{1, 0}, app(0, 0, 0, 0, 0), app(0, 0, 1, 0, 0), app(0, 1, 0, 1, 0), app(0, 0, 0, 0, 0), app(0, 0, 0, 2, 0),
			read(opSince, 0, 0, 1, 0), read(opChanges, 0, 0, 2, 1), app(0, 0, 0, 1, 0), read(opSince, 0, 0, 4, 0)),
		// Retention by age and the sweep; max threads.
		s([]byte{2, 3}, app(0, 0, 0, 0, 0), app(1, 0, 0, 0, 0), app(2, 0, 0, 0, 0), clock(4), app(0, 0, 1, 0, 0),
			clock(5), []byte{opSweep, 0}, []byte{opThreads, 0}, app(2, 0, 0, 0, 1), app(1, 0, 0, 0, 0), read(opChanges, 0, 0, 1, 0)),
		// Interactions: asked, answered, answered again, expired, canceled.
		s([]byte{0, 0}, app(0, 0, 0, 0, 0), []byte{opAsk, 0, 0, 2, 0}, []byte{opAsk, 0, 1, 0, 1}, []byte{opAsk, 0, 2, 1, 0},
			[]byte{opAnswer, 0, 0, 0}, []byte{opAnswer, 0, 0, 0}, []byte{opAnswer, 0, 2, 1}, clock(4), []byte{opAnswer, 0, 3, 2},
			[]byte{opPending, 0}, []byte{opAnswer, 0, 4, 1}, []byte{opAnswer, 0, 5, 0}, read(opChanges, 0, 0, 1, 0), []byte{opAsk, 0, 1, 0, 1}),
		// Reactions.
		s([]byte{0, 0}, app(0, 0, 0, 0, 0), app(0, 1, 1, 0, 0), []byte{opReact, 0, 0, 0, 0, 0}, []byte{opReact, 0, 0, 0, 0, 0},
			[]byte{opReact, 0, 0, 1, 1, 1}, []byte{opReact, 0, 1, 0, 0, 0}, []byte{opReact, 0, 0, 1, 2, 0}, []byte{opCard, 0, 1, 0},
			[]byte{opCard, 0, 1, 1}, read(opChanges, 0, 0, 1, 0)),
		// Participants and devices: invite, post, cap, revoke, resolve, used, audit.
		s([]byte{0, 0}, []byte{opInvite, 0, 0, 0, 0, 2}, app(0, 0, 0, 0, 0), []byte{opInvite, 0, 0, 0, 0, 2},
			[]byte{opParticipantPost, 0, 1, 0, 1}, []byte{opParticipantPost, 0, 1, 0, 1}, []byte{opParticipantPost, 0, 1, 1, 0},
			[]byte{opParticipantPost, 0, 1, 5, 0}, []byte{opDevice, 0, 1}, []byte{opUsed, 0, 1, 2}, []byte{opUsed, 0, 0, 1},
			[]byte{opResolve, 0, 0, 1}, []byte{opRevoke, 0, 0, 1}, []byte{opParticipantPost, 0, 1, 0, 2},
			[]byte{opAudit, 0, 0, 1}, clock(6), []byte{opUsed, 0, 3, 2}, []byte{opGrants, 0, 0, 1}),
		// Attachments: upload, post naming it, open as owner and participant.
		s([]byte{0, 0}, app(0, 0, 0, 0, 0), []byte{opInvite, 0, 0, 0, 0, 0}, []byte{opUpload, 0, 0, 0, 0},
			[]byte{opUpload, 0, 1, 1, 1, 1}, []byte{opOpenAttachment, 0, 0, 1, 1}, app(0, 0, 2, 0, 4),
			[]byte{opOpenAttachment, 0, 0, 1, 1}, []byte{opOpenAttachment, 0, 1, 0}, app(0, 0, 2, 0, 4)),
		// Agent keys.
		s([]byte{0, 0}, []byte{opAgent, 0, 0, 0}, []byte{opAgent, 0, 0, 1}, []byte{opAgent, 0, 0, 6}, []byte{opAgent, 0, 1, 0},
			[]byte{opAgent, 0, 1, 0}, []byte{opAgent, 0, 2, 1}, []byte{opAgent, 0, 3, 0}),
		// A clock that goes back, many in one second, titles, must-exist.
		s([]byte{0, 0}, app(1, 0, 0, 0, 1), app(1, 0, 0, 0, 2|0x30), clock(7), app(1, 1, 0, 0, 0), app(1, 1, 0, 0, 0),
			clock(0), app(1, 0, 0, 3, 3), read(opSince, 1, 3, 3, 1), read(opChanges, 1, 2, 1, 0)),
		// A thread the sweep removed, made again on a clock set back: its
		// epochs start above the old ones; participants and uploads of
		// the removed thread are gone with it.
		s([]byte{2, 0}, app(0, 0, 0, 1, 0), []byte{opInvite, 0, 0, 0, 0, 0}, app(0, 0, 0, 0, 0), []byte{opInvite, 0, 0, 0, 0, 0},
			[]byte{opUpload, 0, 0, 0, 0}, []byte{opAsk, 0, 0, 1, 0}, clock(6), []byte{opSweep, 0}, []byte{opPending, 0},
			clock(10), app(0, 0, 1, 1, 0), []byte{opGrants, 0, 0, 1}, []byte{opOpenAttachment, 0, 0, 0},
			read(opSince, 0, 0, 1, 0), read(opChanges, 0, 0, 1, 0), []byte{opReopen, 0}, app(0, 0, 1, 0, 0)),
		// A removed thread's floor (its reaction's epoch) let go by the
		// file store's sweep an hour of test clock later, then the clock
		// set far back: the step back stops where both stores judge the
		// floor alike (runDiff's opClock).
		s([]byte{2, 0}, app(0, 0, 0, 0, 0), clock(4), []byte{opReact, 0, 0, 0, 0, 0}, clock(4), clock(2), []byte{opSweep, 0},
			clock(5), []byte{opSweep, 0}, clock(10), app(0, 0, 1, 0, 0), read(opChanges, 0, 0, 1, 0)),
		// A restart between appends, changes and reads.
		s([]byte{1, 0}, app(0, 0, 0, 1, 0), []byte{opAsk, 0, 0, 0, 0}, app(0, 1, 1, 0, 0), []byte{opReopen, 0},
			[]byte{opReact, 0, 0, 0, 0, 0}, []byte{opAnswer, 0, 0, 0}, app(0, 0, 0, 1, 0), []byte{opReopen, 0},
			app(0, 0, 1, 2, 0), app(0, 0, 1, 3, 0), read(opChanges, 0, 0, 1, 0), []byte{opReopen, 0}, read(opSince, 0, 0, 1, 1)),
		// The feed: a pending interaction retention drops on append
		// (closed, then the post), a reaction and an answer of it before;
		// one the sweep drops (closed, handed on before the last post).
		s([]byte{1, 0}, []byte{opAsk, 0, 0, 3, 0}, []byte{opReact, 0, 0, 0, 0, 0}, app(0, 0, 0, 0, 0), []byte{opAsk, 0, 1, 3, 0},
			app(0, 1, 1, 0, 0), app(0, 0, 0, 0, 0), app(0, 0, 1, 0, 0), []byte{opAnswer, 0, 2, 0}, app(0, 0, 0, 0, 0)),
		s([]byte{2, 0}, app(0, 0, 0, 0, 0), []byte{opAsk, 0, 0, 3, 0}, clock(5), app(0, 1, 1, 0, 0), clock(4), []byte{opSweep, 0},
			[]byte{opPending, 0}, []byte{opReact, 0, 0, 2, 0, 0}, []byte{opReopen, 0}, []byte{opReact, 0, 0, 2, 1, 1}),
		// Push subscriptions: refused before the thread's first message,
		// the owner's and a participant's, the same endpoint again (kept,
		// then its keys and events taken), a participant's taking over the
		// owner's (refused), a step of the clock back, unsubscribe (twice:
		// then not found), the thread swept away and made again.
		s([]byte{2, 0}, []byte{opPush, 0, 0, 0, 0}, app(0, 0, 0, 0, 0), []byte{opInvite, 0, 0, 0, 0, 0},
			[]byte{opPush, 0, 0, 0, 0}, []byte{opPush, 0, 1, 1, 1, 0}, []byte{opPush, 0, 0, 0, 0}, []byte{opPush, 0, 1, 4, 0},
			[]byte{opPush, 0, 0, 0, 1, 0}, clock(7), []byte{opPush, 0, 0, 2, 0}, []byte{opPush, 0, 2, 0},
			[]byte{opPush, 0, 3, 1}, []byte{opPush, 0, 3, 1}, []byte{opPush, 0, 3, 251}, []byte{opReopen, 0}, []byte{opPush, 1, 2, 0},
			clock(6), []byte{opSweep, 0}, app(0, 0, 0, 0, 0), []byte{opPush, 0, 2, 0}),
		// Devices and agent keys with scopes: a device that expires, seen,
		// noted expired (once), revoked; keys of one thread, of two, of
		// every thread, revoked, resolved, listed.
		s([]byte{0, 0}, app(1, 0, 0, 0, 0), []byte{opDevice, 1, 3}, []byte{opDevice, 1, 1}, []byte{opUsed, 1, 1, 0},
			clock(3), clock(3), []byte{opUsed, 1, 3, 0}, []byte{opUsed, 1, 3, 0}, []byte{opUsed, 1, 2, 1}, []byte{opRevoke, 1, 0, 1},
			[]byte{opGrants, 1, 0, 0}, []byte{opAgent, 1, 0, 0}, []byte{opAgent, 2, 0, 4}, []byte{opAgent, 0, 0, 5},
			[]byte{opAgent, 0, 1, 1}, []byte{opAgent, 0, 2, 1}, []byte{opAgent, 0, 3, 0}),
		// Push subscriptions past LimitPushParticipants and
		// LimitPushSubscriptions, one removed, one more of each.
		s([]byte{0, 0}, app(0, 0, 0, 0, 0), []byte{opPush, 0, 4, 8}, []byte{opPush, 0, 3, 0}, []byte{opPush, 0, 0, 1, 1, 0},
			[]byte{opPush, 0, 0, 2, 0}, []byte{opPush, 0, 4, 3}),
	}
}

// bulk runs one of the operations that reach a bound only by many
// writes, too slow to reach one at a time in an input of maxDiffOps:
// the audit past LimitAuditKept (and past twice it, where both stores
// compact), invites past LimitActiveGrants, and revoking every grant of
// a thread (toward LimitEndedKept). The answers are compared as one.
func (r *diffRun) bulk(in *diffInput, th, name string) {
	sub, n := in.pick(3), int(in.byte())
	switch sub {
	case 0:
		count := chatrelay.LimitAuditKept.Max - 50 + 10*(n%12) // around the bound
		if n%7 == 6 {
			count = 2*chatrelay.LimitAuditKept.Max + 30 // past the compaction
		}
		kinds := []string{chatrelay.AuditRefused, chatrelay.AuditRefused, chatrelay.AuditIssued, chatrelay.AuditRefused, chatrelay.AuditFirstUse}
		at := r.clk.Now().UnixMilli()
		r.each(fmt.Sprintf("%s %d audit events (pattern %d)", name, count, n), func(d *diffBackend) string {
			var errs []string
			for i := range count {
				ev := chatrelay.AuditEvent{At: at + int64(i), Event: kinds[(i*(n|1))%len(kinds)], Participant: fmt.Sprintf("p_%08x", i%7), Code: chatrelay.Unauthorized}
				if ev.Event != chatrelay.AuditRefused {
					ev.Code = ""
				}
				if err := d.p.Audit(ctxb, th, ev); err != nil {
					errs = append(errs, fmt.Sprintf("%d: %s", i, d.answerW(nil, err, nil)))
				}
			}
			log, err := d.p.AuditLog(ctxb, th)
			return d.answerW(errs, nil, nil) + " then " + d.answerW(log, err, nil)
		})
	case 1:
		count := chatrelay.LimitActiveGrants.Max - 5 + n%10
		var gs []chatrelay.Grant
		for range count {
			iv := chatrelay.Invite{Name: "Guest", Role: chatrelay.Commenter, ExpiresIn: time.Hour, Cap: 1}
			g, _ := iv.Grant(r.clk.Now())
			g.ID = fmt.Sprintf("p_%08x", len(r.grants))
			g.Digest = chatrelay.DigestOf(fmt.Sprintf("token %d", len(r.grants)))
			r.grants = append(r.grants, g)
			gs = append(gs, g)
		}
		r.each(fmt.Sprintf("%s %d invites from %s", name, count, gs[0].ID), func(d *diffBackend) string {
			var out []string
			for _, g := range gs {
				out = append(out, d.answerW(nil, d.p.Invite(ctxb, th, g), nil))
			}
			gs, err := d.p.Grants(ctxb, th)
			return strings.Join(out, ",") + " then " + d.answerW(gs, err, nil)
		})
	case 2:
		r.each(fmt.Sprintf("%s revoke every grant", name), func(d *diffBackend) string {
			var out []string
			for _, g := range r.grants {
				_, err := d.p.Revoke(ctxb, th, g.ID)
				out = append(out, d.answerW(nil, err, nil))
			}
			gs, err := d.p.Grants(ctxb, th)
			return strings.Join(out, ",") + " then " + d.answerW(gs, err, nil)
		})
	}
}

// seedsBulk are the seeds of the bounds bulk writes reach. They are the
// fuzzer's only (go test -fuzz): each makes over a thousand writes on
// every backend, about 1.5 s, and 8 under -race, past what the seed
// corpus may add to a plain go test.
func seedsBulk() [][]byte {
	app := func(th byte) []byte { return []byte{opAppend, th, 0, 0, 0, 0} }
	return [][]byte{
		// The audit at LimitAuditKept and one past it.
		slices.Concat([]byte{0, 0}, app(0), []byte{opBulk, 0, 0, 5}, []byte{opAudit, 0, 0, 0}),
		// Invites past LimitActiveGrants, every grant revoked, then
		// invites past the invite window's.
		slices.Concat([]byte{0, 0}, app(0), []byte{opBulk, 0, 1, 9}, []byte{opParticipantPost, 0, 3, 0, 0},
			[]byte{opBulk, 0, 2, 0}, []byte{opBulk, 0, 1, 0}, []byte{opGrants, 0, 0, 1}),
	}
}

// The push subscriptions' endpoints the generator picks among (reserved
// names: nothing is ever sent to them).
var pushEndpoints = []string{"https://push.example.test/ep/0", "https://push.example.test/ep/1", "https://push.example.test/ep/2", "https://push.example.test/ep/3"}

// pushOf is a subscription to endpoint by subscriber with keys of kind
// keys, asking for events of kind events: its id the run's next, made so
// that ids do not grow with the order they are made in (as
// chatrelay.NewPushID's), and its created_at the test clock's.
func (r *diffRun) pushOf(endpoint, subscriber string, keys, events int) chatrelay.PushSubscription {
	p := pushSub(keys, subscriber)
	p.Endpoint = endpoint
	p.ID = fmt.Sprintf("w_%08x", uint32(len(r.pushes)+1)*2654435761)
	p.CreatedAt = r.clk.Now().UnixMilli()
	if events == 1 {
		p.Events = []chatrelay.PushEvent{chatrelay.PushInteraction}
	}
	r.pushes = append(r.pushes, p.ID)
	return p
}

// subscriber picks the owner or a participant (a grant made so far, or
// one no thread has) as a subscription's subscriber.
func (r *diffRun) subscriber(in *diffInput) string {
	if in.pick(3) == 0 {
		return chatrelay.SubscriberOwner
	}
	return "p:" + r.grantID(in)
}

// push runs an operation on the thread's push subscriptions: subscribe
// (a new endpoint, or one subscribed already, by the owner or a
// participant), list, unsubscribe, or subscribe many at once toward
// LimitPushSubscriptions and LimitPushParticipants.
func (r *diffRun) push(in *diffInput, th, name string) {
	sub, n := in.pick(5), int(in.byte())
	switch sub {
	case 0, 1:
		p := r.pushOf(pushEndpoints[n%len(pushEndpoints)], r.subscriber(in), (n>>2)%2, (n>>3)%2)
		r.each(fmt.Sprintf("%s subscribe %+v", name, p), func(d *diffBackend) string {
			got, created, err := d.pu.PushSubscribe(ctxb, th, p)
			return d.answerW([]any{got, created}, err, nil)
		})
	case 2:
		r.each(name+" subscriptions", func(d *diffBackend) string {
			subs, err := d.pu.PushSubscriptions(ctxb, th)
			return d.answerW(subs, err, nil)
		})
	case 3:
		id := "w_ffffffff"
		if len(r.pushes) > 0 && n < 250 {
			id = r.pushes[n%len(r.pushes)]
		}
		r.each(fmt.Sprintf("%s unsubscribe %s", name, id), func(d *diffBackend) string {
			p, err := d.pu.PushUnsubscribe(ctxb, th, id)
			return d.answerW(p, err, nil)
		})
	case 4:
		count := chatrelay.LimitPushParticipants.Max - 2 + n%9
		var subs []chatrelay.PushSubscription
		for i := range count {
			subscriber := chatrelay.SubscriberOwner
			if (i*(n|1))%4 != 0 {
				subscriber = fmt.Sprintf("p:p_%08x", i%5)
			}
			subs = append(subs, r.pushOf(fmt.Sprintf("https://push.example.test/bulk/%d", i+n%3), subscriber, i%2, 0))
		}
		r.each(fmt.Sprintf("%s %d subscriptions (pattern %d) from %s", name, count, n, subs[0].ID), func(d *diffBackend) string {
			var out []string
			for _, p := range subs {
				_, created, err := d.pu.PushSubscribe(ctxb, th, p)
				out = append(out, d.answerW(created, err, nil))
			}
			got, err := d.pu.PushSubscriptions(ctxb, th)
			return strings.Join(out, ",") + " then " + d.answerW(got, err, nil)
		})
	}
}
