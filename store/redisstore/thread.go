package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// idCandidates is how many id suffixes an append offers the script. All
// of them are taken only if the thread already holds that many messages
// in the same second with colliding suffixes (odds of 1 in 2^24 each).
const idCandidates = 4

// maxEpoch bounds epochs: Lua computes them in doubles, exact below 2^53.
const maxEpoch = 1 << 53

// Append implements store.Store. A plain message (no v2 field) is one run
// of appendScript; a participant's post reads the thread's grants first
// and runs the script with the grant it read, which the script stores
// with one more post only if the record is still the one read (else it
// is read again).
func (s *Store) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	return s.appendRated(ctx, thread, m, nil)
}

// appendRated is Append, counting the post in rt's rate windows in the
// same script if rt is not nil (AppendLimited).
func (s *Store) appendRated(ctx context.Context, thread string, m store.NewMessage, rt *rateTake) (store.Entry, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return store.Entry{}, err
	}
	ix, err := m.Prepare(s.now())
	if err != nil {
		return store.Entry{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.newAppendReq(ctx, thread, m, ix)
	if err != nil {
		return store.Entry{}, err
	}
	r.rate = rt
	var g chatrelay.Grant
	for {
		if m.Participant != "" {
			if g, err = s.postGrant(ctx, thread, r); err != nil {
				return store.Entry{}, err
			}
		}
		res, err := s.runAppend(ctx, thread, r, nil)
		if err != nil {
			if rt != nil && scriptRefused(err) {
				// Redis refused the script, or it stopped (an error)
				// after counting the post and before storing it: Redis
				// does not undo a script's writes. A failure without
				// Redis's answer (a timeout, a lost connection) is left
				// counted: the script keeps a post's entries only if it
				// stored the post, so an entry there is a stored post's
				// (a script that did not run made none), as is one whose
				// WAIT failed (the script ran).
				s.undoLater(rt)
			}
			return store.Entry{}, s.unavailable("append", err)
		}
		e, retry, err := s.appendAnswer(thread, m, g, rt, res)
		if !retry {
			return e, err
		}
	}
}

// appendAnswer decodes appendScript's answer res: the entry stored (or
// replayed), the refusal, or retry for an answer that asks for another
// try (a taken id suffix, a grants record changed since it was read).
func (s *Store) appendAnswer(thread string, m store.NewMessage, g chatrelay.Grant, rt *rateTake, res []string) (e store.Entry, retry bool, err error) {
	switch res[0] {
	case "ok":
		if len(res) != 3 {
			break
		}
		e, err = stored(res[1], res[2])
		if err != nil {
			return store.Entry{}, false, s.unavailable("append", fmt.Errorf("stored message: %w", err))
		}
		return e, false, nil
	case "replay":
		if len(res) != 2 {
			break
		}
		e, err = v2Entry(nil, res[1])
		if err != nil {
			return store.Entry{}, false, s.unavailable("append", fmt.Errorf("stored message: %w", err))
		}
		e, err = store.ReplayOf(e, m)
		return e, false, err
	case "not_found":
		return store.Entry{}, false, chatrelay.Errorf(chatrelay.NotFound, "no thread %s", thread)
	case "unreadable":
		if len(res) != 2 {
			break
		}
		return store.Entry{}, false, markedUnreadable(thread, res[1])
	case "thread_limit":
		return store.Entry{}, false, chatrelay.Errorf(chatrelay.ThreadLimit, "thread limit reached")
	case "collision", "retry":
		return store.Entry{}, true, nil
	case "cap":
		return store.Entry{}, false, chatrelay.CapRefusal(g)
	case "waiting":
		if len(res) != 2 {
			break
		}
		n, _ := strconv.Atoi(res[1])
		return store.Entry{}, false, chatrelay.WaitingRefusal(n)
	case "attachment":
		if len(res) != 2 {
			break
		}
		return store.Entry{}, false, chatrelay.UnusableAttachment(res[1])
	case "rate":
		if len(res) != 2 || rt == nil {
			break
		}
		wait, _ := strconv.ParseInt(res[1], 10, 64)
		return store.Entry{}, false, rt.l.refusal(wait)
	}
	return store.Entry{}, false, s.unavailable("append", fmt.Errorf("unexpected answer %q", res))
}

// newAppendReq is what appendScript takes for m, whose interaction (if
// any) Prepare made: the attachments it names, its v2 tail, the v1 and v2
// texts of a message with attachments, its interaction's id and deadline,
// and its webhook event.
func (s *Store) newAppendReq(ctx context.Context, thread string, m store.NewMessage, ix *chatrelay.Interaction) (*appendReq, error) {
	r := &appendReq{m: m}
	as, refused, err := s.attachments(ctx, thread, m)
	if err != nil {
		return nil, err
	}
	ids := m.Attachments
	if refused >= 0 {
		// Refused by the script at its place among the checks
		// (attachments) and among the ids: a used or unknown one before
		// it in the post's order is named first, as the file store names
		// it.
		ids = slices.Clone(ids)
		ids[refused] = "!" + ids[refused]
	}
	r.atts = strings.Join(ids, " ")
	if msg := (chatrelay.Message{AuthorName: m.AuthorName, ClientID: m.ClientID, Interaction: ix, Card: m.Card, Attachments: as}); hasV2(&msg) {
		msg.Author, msg.Text = m.Author, m.Text
		r.tail = v2Tail(msg)
		if len(as) > 0 {
			r.v1Text, r.v2Text = chatrelay.V1Text(msg), jsonString(m.Text)
		}
		if ix != nil {
			r.ix, r.deadline = ix.ID, ix.Deadline
		}
	}
	if s.hooks {
		r.event = store.EventOf(nil, &chatrelay.Message{Author: m.Author, Interaction: ix})
		if r.event == "" {
			r.event = "-" // none, but webhooks are on (appendScript)
		}
	}
	return r, nil
}

// postGrant reads the grant of r's participant post and sets what the
// script checks and stores with it: the grant as read (its record's
// version) and with one more post. It refuses a grant the thread does not
// have (NotFound first for a thread that is gone, as the file store
// answers) or that is not active.
func (s *Store) postGrant(ctx context.Context, thread string, r *appendReq) (chatrelay.Grant, error) {
	rec, err := s.readGrants(ctx, thread)
	if err != nil {
		return chatrelay.Grant{}, err
	}
	i := rec.find(r.m.Participant)
	if i < 0 {
		if n, err := s.rdb.XLen(ctx, s.logKey(thread)).Result(); err == nil && n == 0 {
			return chatrelay.Grant{}, chatrelay.Errorf(chatrelay.NotFound, "no thread %s", thread)
		}
		return chatrelay.Grant{}, chatrelay.UnknownShareLink()
	}
	g := rec.grants[i]
	if err := chatrelay.GrantRefusal(g, s.now()); err != nil {
		return chatrelay.Grant{}, err
	}
	next := g
	next.Sent++
	js, _ := json.Marshal(next)
	r.grant, r.version, r.next, r.capSpent = g.ID, rec.version, string(js), chatrelay.CapRefusal(g) != nil
	if s.beforeCAS != nil {
		s.beforeCAS("post")
	}
	return g, nil
}

// appendReq is an append as appendScript takes it: the prepared message,
// and what it stores beside the log.
type appendReq struct {
	m        store.NewMessage
	tail     string // the v2 object after its rev; "" for a message without v2 fields
	ix       string // the new interaction's id, if any
	deadline int64  // and its deadline
	// A participant's post: the grant, the record's version read, the
	// grant with one more post, and whether its cap is spent.
	grant, version, next string
	capSpent             bool
	// A message with attachments: its v1 text (a line per attachment)
	// and its v2 text as JSON.
	v1Text, v2Text string
	// The attachment ids, space-separated, in the post's order; the one
	// the script refuses (attachments' refused) is marked with a "!".
	atts  string
	event string    // the webhook event to queue ("" if webhooks are off, "-" if none)
	rate  *rateTake // the rate windows to count the post in (nil: none)
}

// flag is b as a script's argument: "1" or "0".
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// appendFixedArgs is how many of appendScript's arguments every call
// sends; the others are sent up to the last that is not empty.
const appendFixedArgs = 9

// runAppend runs appendScript once, offering the id suffixes given, or
// idCandidates random ones if suffixes is nil. It returns the script's
// answer as a table: a message stored with no v2 object, which the script
// answers as its JSON alone, is {"ok", JSON, ""}.
func (s *Store) runAppend(ctx context.Context, thread string, r *appendReq, suffixes []string) ([]string, error) {
	now := s.now()
	text := r.m.Text
	if r.v2Text != "" {
		text = r.v1Text
	}
	stamp, ts := s.secondOf(now)
	// The random bytes of the call, read at once: the suffix candidates
	// and the generation id a creation may take.
	var random [idCandidates*3 + 8]byte
	rand.Read(random[:])
	cands := strings.Join(suffixes, " ")
	if suffixes == nil {
		b := make([]byte, 0, idCandidates*7)
		for i := range idCandidates {
			if i > 0 {
				b = append(b, ' ')
			}
			b = hex.AppendEncode(b, random[i*3:i*3+3])
		}
		cands = string(b)
	}
	// What only a creation reads, in one argument (ARGV 4).
	creation := make([]byte, 0, 64)
	creation = strconv.AppendInt(creation, int64(s.threadLimit(ctx)), 10)
	creation = append(creation, ' ')
	creation = append(creation, flag(r.m.MustExist)...)
	creation = append(creation, ' ')
	creation = strconv.AppendInt(creation, s.seen.Load(), 10)
	creation = append(creation, ' ')
	creation = hex.AppendEncode(creation, random[idCandidates*3:])
	keys := s.appendKeys(thread, r.grant != "")
	if r.rate != nil && r.grant != "" {
		// KEYS[15] is the grants key for a participant's post and the
		// thread's rate window for a rated one (appendScript): never both.
		return nil, errors.New("redisstore: a participant's post is never rated in its append")
	}
	rid, clock := "", ""
	if rt := r.rate; rt != nil {
		keys = append(keys, rt.keys()...)
		rid, clock = rt.id, rt.l.clockArg()
	}
	deadline, capSpent, waiting := "", "", ""
	if r.ix != "" {
		deadline = strconv.FormatInt(r.deadline, 10)
	}
	if r.grant != "" {
		capSpent, waiting = flag(r.capSpent), strconv.Itoa(chatrelay.LimitWaitingPosts.Max)
	}
	// The arguments are texts in one array, sent as pointers into it
	// (fcallArgs): boxed one by one, each would be an allocation. Those a
	// plain post leaves empty are sent up to the last that is not.
	jsAuthor, jsText := jsonStrings(string(r.m.Author), text)
	a := &[...]string{thread, strconv.FormatInt(now.UnixMilli(), 10), s.appendSettings(r.rate), string(creation),
		jsAuthor, jsText, stamp, ts, cands,
		rid, r.m.ClientID, r.event, r.tail, r.ix, deadline, r.grant, r.version, r.next, capSpent, waiting,
		r.m.Title, r.atts, r.v2Text, clock}
	n := len(a)
	for n > appendFixedArgs && a[n-1] == "" {
		n--
	}
	args := make([]any, n)
	for i := range args {
		args[i] = &a[i]
	}
	cmd := s.runScript(ctx, appendScript, keys, args...)
	if err := cmd.Err(); err != nil {
		return nil, err
	}
	if js, ok := cmd.Val().(string); ok {
		return []string{"ok", js, ""}, nil // stored, with no v2 object (appendScript)
	}
	return cmd.StringSlice()
}

// appendSettings is appendScript's ARGV 3, the settings that are the
// same at every call of the store: "<keep> <age (ms)> <window (ms)>
// <thread's limit> <address's limit> <feed>", with the rate windows of
// rt (or 0 0 0 for an append counted in none; the address's limit 0 for
// rt counted in the thread's window alone).
func (s *Store) appendSettings(rt *rateTake) string {
	var window int64
	var thread, address int
	if rt != nil {
		window, thread = rt.l.window.Milliseconds(), rt.w[0].limit
		if len(rt.w) == 2 {
			address = rt.w[1].limit
		}
	}
	// The settings are the same at nearly every call: the last text is
	// kept, as Store.secondOf keeps the last second's.
	if st := s.settings.Load(); st != nil && st.window == window && st.thread == thread && st.address == address {
		return st.text
	}
	b := make([]byte, 0, 64+len(s.pubFeed))
	b = strconv.AppendInt(b, int64(s.opt.Retention.Messages), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.opt.Retention.Age.Milliseconds(), 10)
	if rt == nil {
		b = append(b, " 0 0 0 "...)
	} else {
		b = append(b, ' ')
		b = strconv.AppendInt(b, window, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(thread), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(address), 10)
		b = append(b, ' ')
	}
	st := &settingsText{window: window, thread: thread, address: address, text: string(append(b, s.pubFeed...))}
	s.settings.Store(st)
	return st.text
}

// settingsText is appendSettings' text of one set of rate windows (all
// zero: an append counted in none; the retention and the feed are the
// store's, the same at every call).
type settingsText struct {
	window          int64
	thread, address int
	text            string
}

// secondText is secondOf of one second (unix: its Unix time).
type secondText struct {
	unix      int64
	stamp, ts string
}

// secondOf is secondOf(t), formatted once a second: the last second's
// text is kept (Store.second), as nearly every post is in it.
func (s *Store) secondOf(t time.Time) (stamp, ts string) {
	unix := t.Unix()
	if st := s.second.Load(); st != nil && st.unix == unix {
		return st.stamp, st.ts
	}
	stamp, ts = secondOf(t)
	s.second.Store(&secondText{unix: unix, stamp: stamp, ts: ts})
	return stamp, ts
}

// secondOf is what appendScript takes as ARGV 7 and 8: the id stamp
// and the ts of t's second in UTC ("20261023-180000",
// "2026-10-23T18:00:00+00:00"), the same as the script computes.
func secondOf(t time.Time) (stamp, ts string) {
	t = t.UTC()
	b := make([]byte, 0, 40)
	b = t.AppendFormat(b, "20060102-150405")
	n := len(b)
	s := string(t.AppendFormat(b, "2006-01-02T15:04:05+00:00"))
	return s[:n], s[n:]
}

// Since implements store.Store. One script reads the page, the newest
// message, "trimmed" and the generation (gen.go) together (read). Reset is also
// true for a cursor into data that Redis lost (since <= the generation's
// lost epoch). A thread with v2 state takes a second read for the v2
// objects of the page's messages (the v1 view needs only their v1 JSON,
// which never changes; the v2 objects are those of that moment).
func (s *Store) Since(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return store.Page{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var g generation
	msgs, newest, trimmed, v2, title, err := s.read(ctx, thread, since, limit, &g)
	if err != nil {
		return store.Page{}, s.noteUnreadable(ctx, thread, err)
	}
	if v2 && len(msgs) > 0 {
		if err := s.withV2(ctx, thread, msgs); err != nil {
			return store.Page{}, s.noteUnreadable(ctx, thread, err)
		}
	}
	g = s.checkGen(ctx, g, nil)
	p := store.Page{Thread: thread, Messages: msgs, Title: title}
	if newest != nil {
		p.Cursor = newest.Epoch
		p.Awaiting = newest.Author != chatrelay.Hermes
		s.see(p.Cursor)
	}
	p.Reset = since > 0 && (since < trimmed || since <= g.lost)
	return p, nil
}

// withV2 replaces the entries of msgs that have v2 state by that state.
func (s *Store) withV2(ctx context.Context, thread string, msgs []store.Entry) error {
	fields := make([]string, len(msgs))
	for i, e := range msgs {
		fields[i] = strconv.FormatInt(e.Epoch, 10)
	}
	vals, err := s.rdb.HMGet(ctx, s.v2Key(thread), fields...).Result()
	if err != nil {
		return s.unavailable("read", err)
	}
	for i, v := range vals {
		if js, ok := v.(string); ok {
			e, err := v2Entry(msgs[i].JSON, js)
			if err != nil {
				return unreadableEntry(thread, "v2 of "+fields[i]+"-0", err)
			}
			msgs[i] = e
		}
	}
	return nil
}

// read returns the thread's messages with epoch > since (the newest limit
// of them if limit > 0), oldest first, as their v1 JSON has them, its
// newest message (nil if none; its v1 fields only), its trimmed epoch,
// whether it has v2 state, and its title. It also reads the generation
// (creating it if it is missing) into *g, all together: one MULTI
// (readTx), or, if Redis refuses it because it is full, one script that
// only reads (readScript), which a full Redis still runs. The MULTI
// stays the first choice because it costs Redis a third of what the
// script does (Lua converts every entry it reads: 45 against 130 µs of
// Redis's CPU for a page of 50, BenchmarkSince).
func (s *Store) read(ctx context.Context, thread string, since int64, limit int, g *generation) (msgs []store.Entry, newest *store.Entry, trimmed int64, v2 bool, title string, err error) {
	since = min(max(since, 0), maxEpoch) // epochs are below 2^53; since+1 must not overflow
	from := strconv.FormatInt(since+1, 10) + "-0"
	res, err := s.readTx(ctx, thread, from, limit)
	if refusedTx(err) {
		res, err = s.readScripted(ctx, thread, from, limit)
	}
	if err != nil {
		return nil, nil, 0, false, "", s.unavailable("read", err)
	}
	if len(res) == 2 && res[0] == "unreadable" {
		return nil, nil, 0, false, "", markedUnreadable(thread, res[1])
	}
	if len(res) < 8 || len(res)%2 != 0 {
		return nil, nil, 0, false, "", s.unavailable("read", fmt.Errorf("unexpected answer of %d values", len(res)))
	}
	*g = genFrom(res)
	trimmed, v2, title = parseInt(res[3]), res[4] != "", res[5]
	if res[6] != "" {
		e, err := entryOf(thread, res[6], res[7])
		if err != nil {
			return nil, nil, 0, false, "", err
		}
		newest = &e
	}
	rest := res[8:]
	if len(rest) == 0 {
		return nil, newest, trimmed, v2, title, nil
	}
	msgs = make([]store.Entry, 0, len(rest)/2)
	for i := 0; i < len(rest); i += 2 {
		e, err := entryOf(thread, rest[i], rest[i+1])
		if err != nil {
			return nil, nil, 0, false, "", err
		}
		msgs = append(msgs, e)
	}
	plainEntries(msgs)
	return msgs[:len(msgs):len(msgs)], newest, trimmed, v2, title, nil
}

// readTx reads what read needs in one MULTI that also creates the
// generation if it is missing, and answers it as readScript does. A full
// Redis refuses it (refusedTx).
func (s *Store) readTx(ctx context.Context, thread, from string, limit int) ([]string, error) {
	log := s.logKey(thread)
	var page, last *redis.XMessageSliceCmd
	var marks, gen *redis.SliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if limit > 0 {
			page = p.XRevRangeN(ctx, log, "+", from, int64(limit))
		} else {
			page = p.XRange(ctx, log, from, "+")
		}
		last = p.XRevRangeN(ctx, log, "+", "-", 1)
		marks = p.HMGet(ctx, s.metaKey(thread), "trimmed", "v2", "title", markField)
		gen = s.genCmds(ctx, p)
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, err
	}
	m := marks.Val()
	if len(m) != 4 {
		return nil, fmt.Errorf("unexpected answer of %d marks", len(m))
	}
	if mark, ok := m[3].(string); ok {
		return []string{"unreadable", mark}, nil
	}
	str := func(v any) string { x, _ := v.(string); return x }
	trimmed, v2 := "0", ""
	if m[0] != nil {
		trimmed = str(m[0])
	}
	if m[1] != nil {
		v2 = "1"
	}
	gv := gen.Val()
	if len(gv) != 3 {
		return nil, fmt.Errorf("unexpected answer of %d generation fields", len(gv))
	}
	xs := page.Val()
	res := make([]string, 8, 8+2*len(xs))
	res[0], res[1], res[2], res[3], res[4], res[5] = str(gv[0]), str(gv[1]), str(gv[2]), trimmed, v2, str(m[2])
	if l := last.Val(); len(l) > 0 {
		res[6], res[7] = l[0].ID, str(l[0].Values["j"])
	}
	for i := range xs {
		x := xs[i]
		if limit > 0 {
			x = xs[len(xs)-1-i]
		}
		res = append(res, x.ID, str(x.Values["j"]))
	}
	return res, nil
}

// readScripted is readTx as a script that only reads (readScript), for a
// Redis that refuses every MULTI because it is full.
func (s *Store) readScripted(ctx context.Context, thread, from string, limit int) ([]string, error) {
	keys := []string{s.logKey(thread), s.metaKey(thread), s.genKey}
	return s.withGen(ctx, func() ([]string, error) {
		return readScript.Run(ctx, s.rdb, keys, from, limit).StringSlice()
	})
}

// refusedTx reports whether err is Redis's refusal of a MULTI whose
// commands it would not queue: what a full Redis (maxmemory with
// noeviction) answers to every MULTI, reads and all.
func refusedTx(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (strings.HasPrefix(re.Error(), "EXECABORT") || strings.HasPrefix(re.Error(), "OOM"))
}

// entryOf decodes one stream entry of id id, its v1 JSON js (its field
// "j"): the entry has no v2 object or rev (plainEntries adds them). An
// entry that does not decode (written by something else) makes the thread
// unreadable, as a broken file does.
func entryOf(thread, id, js string) (store.Entry, error) {
	e, err := parseV1(js)
	var want [24]byte
	if err == nil && string(append(strconv.AppendInt(want[:0], e.Epoch, 10), '-', '0')) != id {
		err = fmt.Errorf("epoch %d in entry %s", e.Epoch, id)
	}
	if err != nil {
		return store.Entry{}, unreadableEntry(thread, id, err)
	}
	return e, nil
}

// Threads implements store.Store.
func (s *Store) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	infos, _, err := s.ThreadsReport(ctx)
	return infos, err
}

var _ store.ThreadsReporter = (*Store)(nil)

// ThreadsReport implements store.ThreadsReporter: the threads Threads
// leaves out, marked unreadable or whose newest entry does not parse.
func (s *Store) ThreadsReport(ctx context.Context) ([]store.ThreadInfo, []store.ThreadError, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	names, err := s.rdb.ZRevRange(ctx, s.index, 0, -1).Result()
	if err != nil {
		return nil, nil, s.unavailable("threads", err)
	}
	lens := make([]*redis.IntCmd, len(names))
	lasts := make([]*redis.XMessageSliceCmd, len(names))
	revs := make([]*redis.SliceCmd, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			lens[i] = p.XLen(ctx, s.logKey(name))
			lasts[i] = p.XRevRangeN(ctx, s.logKey(name), "+", "-", 1)
			revs[i] = p.HMGet(ctx, s.metaKey(name), "rev", "title", markField)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, nil, s.unavailable("threads", err)
	}
	infos := make([]store.ThreadInfo, 0, len(names))
	var bad []store.ThreadError
	for i, name := range names {
		if !chatrelay.ValidThread(name) {
			continue
		}
		l := lasts[i].Val()
		if len(l) == 0 {
			continue // removed meanwhile
		}
		var rev int64
		var title string
		if m := revs[i].Val(); len(m) == 3 {
			if m[2] != nil {
				mark, _ := m[2].(string)
				bad = append(bad, store.ThreadError{Thread: name, Err: markedUnreadable(name, mark)})
				continue // marked unreadable (unreadable.go), as the file store leaves out a document that does not parse
			}
			rev = toInt(m[0])
			title, _ = m[1].(string)
		}
		js, _ := l[0].Values["j"].(string)
		last, err := entryOf(name, l[0].ID, js)
		if err != nil {
			s.log.Error("redis store: thread does not parse", "thread", name, "err", err)
			s.noteUnreadable(ctx, name, err)
			bad = append(bad, store.ThreadError{Thread: name, Err: unreadableEntry(name, l[0].ID, err)})
			continue
		}
		infos = append(infos, store.ThreadInfo{
			Thread: name, Messages: int(lens[i].Val()), LastAuthor: last.Author,
			LastEpoch: last.Epoch, Rev: max(rev, last.Epoch), Awaiting: last.Author != chatrelay.Hermes,
			Title: title,
		})
	}
	slices.SortFunc(infos, store.ThreadOrder)
	return infos, bad, nil
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
		res, err := sweepScript.Run(sctx, s.rdb, s.keys(name),
			name, now, s.opt.Retention.Messages, s.opt.Retention.Age.Milliseconds(), s.pubFeed, s.opt.Retention.RemoveAfter().Milliseconds(), flag(s.hooks)).Int64Slice()
		cancel()
		if err != nil {
			return st, s.unavailable("sweep", err)
		}
		if len(res) == 3 {
			s.log.Warn("redis store: sweep: thread marked unreadable, kept as it is for an operator to look at", "thread", name, "key", s.metaKey(name))
			continue
		}
		st.Threads++
		st.Dropped += int(res[0])
		if res[1] == 1 {
			st.ThreadsRemoved++
			s.dropPush(ctx, name) // its push subscriptions go with it (push.go)
		}
	}
	return st, s.sweepUploads(ctx) // attach.go
}

// threadIndex returns every thread of the index with its rev (newest change),
// and the generation (created if it is missing), read together by one
// script that only reads (indexScript, run by withGen).
func (s *Store) threadIndex(ctx context.Context) (map[string]int64, generation, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	keys := []string{s.index, s.genKey}
	res, err := s.withGen(ctx, func() ([]string, error) {
		return indexScript.Run(ctx, s.rdb, keys).StringSlice()
	})
	if err == nil && (len(res) < 3 || len(res)%2 != 1) {
		err = fmt.Errorf("unexpected answer of %d values", len(res))
	}
	if err != nil {
		return nil, generation{}, s.unavailable("threads", err)
	}
	m := make(map[string]int64, (len(res)-3)/2)
	for i := 3; i < len(res); i += 2 {
		if name := res[i]; chatrelay.ValidThread(name) {
			score, _ := strconv.ParseFloat(res[i+1], 64)
			m[name] = int64(score)
		}
	}
	return m, genFrom(res), nil
}

// keysOf lists the keys of thread, for tests and operators.
func (s *Store) keysOf(thread string) []string { return s.keys(thread)[:len(threadKeys)] }
