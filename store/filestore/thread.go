package filestore

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// A thread document in memory, and what the file store does to it under
// the thread's lock: give epochs and ids, append (store.ReplayOf for a
// repeated client_id), apply retention, answer Since and Changes, apply a
// change (chatrelay.ApplyChange) and check a participant's post
// (chatrelay.GrantRefusal, CapRefusal, WaitingRefusal). The Redis store
// does the same in its scripts with the same root rules.

// threadDoc is one version of a thread: its retained messages, oldest
// first, and its marks. It is never modified: a change makes a new one.
type threadDoc struct {
	msgs       []store.Entry
	trimmed    int64 // the newest epoch retention dropped (v1 resets)
	trimmedRev int64 // the newest rev retention dropped (v2 resets)
	rev        int64 // the thread's newest change epoch
	title      string
}

// nextEpoch is the epoch of the thread's next change at now: now, or one
// past the newest change if now is not later (epochs strictly increase,
// whatever the clock does).
func (d *threadDoc) nextEpoch(now time.Time) int64 {
	e := now.UnixMilli()
	if e <= d.rev {
		e = d.rev + 1
	}
	return e
}

// newID returns a message id for the second of at that no message of msgs
// has.
//
// An id names the second of its message's epoch, and epochs only grow, so
// only the newest messages, those of that second, can have it.
func newID(msgs []store.Entry, at time.Time) string {
	second := at.Truncate(time.Second).UnixMilli()
	i := len(msgs)
	for i > 0 && msgs[i-1].Epoch >= second {
		i--
	}
	same := msgs[i:]
	// Built in one buffer: one allocation an id (the string), where the
	// concatenation of Format's and EncodeToString's strings made three.
	var buf [len("MSG-20060102-150405-") + 2*3]byte
	for {
		var b [3]byte
		rand.Read(b[:])
		id := string(hex.AppendEncode(at.AppendFormat(append(buf[:0], "MSG-"...), "20060102-150405-"), b[:]))
		if !slices.ContainsFunc(same, func(e store.Entry) bool { return e.ID == id }) {
			return id
		}
	}
}

// appendTo returns d with the new message m (prepared, with its
// interaction ix) appended at now and retention r applied, and the new
// entry; or, if m carries the client_id of a retained message, d itself
// and that message (Replayed) or ClientIDConflict.
func appendTo(d threadDoc, m store.NewMessage, ix *chatrelay.Interaction, as []chatrelay.Attachment, r chatrelay.Retention, now time.Time) (threadDoc, store.Entry, error) {
	if m.ClientID != "" {
		if i := slices.IndexFunc(d.msgs, func(e store.Entry) bool { return e.ClientID == m.ClientID }); i >= 0 {
			e := d.msgs[i]
			e, err := store.ReplayOf(e, m)
			return d, e, err
		}
	}
	epoch := d.nextEpoch(now)
	at := time.UnixMilli(epoch).UTC()
	e := store.NewEntry(chatrelay.Message{
		ID: newID(d.msgs, at), Epoch: epoch, TS: at.Format("2006-01-02T15:04:05+00:00"),
		Author: m.Author, Text: m.Text, Rev: epoch,
		AuthorName: m.AuthorName, ClientID: m.ClientID, Interaction: ix, Card: m.Card, Attachments: as,
	})
	// Appended in place when the array has room: a document is never
	// changed, but every holder of d sees only d.msgs[:len], and appends
	// are serialized by the thread's lock, so the slot past the end is
	// free (a discarded attempt's entry there is written over).
	msgs := append(d.msgs[:len(d.msgs):cap(d.msgs)], e)
	nd := threadDoc{trimmed: d.trimmed, trimmedRev: d.trimmedRev, rev: epoch, title: d.title}
	if m.Title != "" {
		nd.title = m.Title
	}
	nd.msgs, nd.trimmed, nd.trimmedRev = trim(r, msgs, now, d.trimmed, d.trimmedRev)
	return nd, e, nil
}

// changeIn applies c to d at now. It returns the new document (d itself if
// nothing changed), the message in its current state, whether it changed,
// and the change's error (a change and an error can come together: an
// answer after the deadline stores the expiry and is refused).
func changeIn(d threadDoc, c store.Change, now time.Time) (threadDoc, store.Entry, bool, error) {
	i := slices.IndexFunc(d.msgs, func(e store.Entry) bool {
		if c.Op == store.React || c.Op == store.Unreact {
			return e.ID == c.MessageID
		}
		return e.Interaction != nil && e.Interaction.ID == c.InteractionID
	})
	if i < 0 {
		if c.Op == store.React || c.Op == store.Unreact {
			return d, store.Entry{}, false, chatrelay.Errorf(chatrelay.NotFound, "no message %s in this thread", c.MessageID)
		}
		return d, store.Entry{}, false, chatrelay.Errorf(chatrelay.NotFound, "no interaction %s in this thread", c.InteractionID)
	}
	m := chatrelay.CloneMessage(d.msgs[i].Message)
	changed, err := chatrelay.ApplyChange(&m, c, now)
	if !changed {
		e := d.msgs[i]
		if err != nil {
			err = chatrelay.WithAbout(err, e.JSON2)
		}
		return d, e, false, err
	}
	m.Rev = d.nextEpoch(now)
	e := store.NewEntry(m)
	msgs := slices.Clone(d.msgs)
	msgs[i] = e
	nd := d
	nd.msgs, nd.rev = msgs, m.Rev
	if err != nil {
		err = chatrelay.WithAbout(err, e.JSON2)
	}
	return nd, e, true, err
}

// trim applies r to msgs (oldest first) at time now. It returns the kept
// messages and the newest epoch and rev dropped (or trimmed and trimmedRev
// if retention drops nothing newer).
func trim(r chatrelay.Retention, msgs []store.Entry, now time.Time, trimmed, trimmedRev int64) ([]store.Entry, int64, int64) {
	cut := 0
	if n := len(msgs) - r.Messages; n > 0 {
		cut = n
	}
	oldest := now.Add(-r.Age).UnixMilli()
	for cut < len(msgs) && msgs[cut].Epoch < oldest {
		cut++
	}
	for _, e := range msgs[:cut] {
		trimmed, trimmedRev = max(trimmed, e.Epoch), max(trimmedRev, e.Rev)
	}
	return msgs[cut:], trimmed, trimmedRev
}

// page builds the answer to Since (v1) from a thread's retained messages.
func page(thread string, d threadDoc, since int64, limit int) store.Page {
	msgs := d.msgs
	p := store.Page{Thread: thread, Reset: since > 0 && since < d.trimmed, Title: d.title}
	if len(msgs) == 0 {
		return p
	}
	last := msgs[len(msgs)-1]
	p.Cursor = last.Epoch
	p.Awaiting = last.Author != chatrelay.Hermes
	// First message with epoch > since: epochs strictly increase.
	lo, _ := slices.BinarySearchFunc(msgs, since, func(e store.Entry, s int64) int {
		if e.Epoch <= s {
			return -1
		}
		return 1
	})
	out := msgs[lo:]
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	p.Messages = out[:len(out):len(out)]
	return p
}

// changesPage builds the answer to Changes (v2).
func changesPage(thread string, d threadDoc, since int64, limit int) store.Page {
	p := store.Page{Thread: thread, Cursor: d.rev, Reset: since > 0 && since < d.trimmedRev, Title: d.title}
	if len(d.msgs) == 0 {
		return p
	}
	p.Awaiting = d.msgs[len(d.msgs)-1].Author != chatrelay.Hermes
	if since <= 0 {
		out := d.msgs
		if limit > 0 && len(out) > limit {
			out = out[len(out)-limit:]
		}
		p.Messages = out[:len(out):len(out)]
		return p
	}
	var out []store.Entry
	for _, e := range d.msgs {
		if e.Rev > since {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b store.Entry) int { return cmp.Compare(a.Rev, b.Rev) })
	p.Messages = out
	return p
}

// threadInfo summarises a thread that has messages.
func threadInfo(thread string, d threadDoc) store.ThreadInfo {
	last := d.msgs[len(d.msgs)-1]
	return store.ThreadInfo{
		Thread: thread, Messages: len(d.msgs), LastAuthor: last.Author,
		LastEpoch: last.Epoch, Rev: d.rev, Awaiting: last.Author != chatrelay.Hermes,
		Title: d.title,
	}
}

// checkParticipantPost checks that the participant of m may post to d now:
// its grant is active, under its cap, and it has fewer than
// LimitWaitingPosts.Max messages after hermes's newest. It returns the
// grant's index in grants.
func checkParticipantPost(grants []chatrelay.Grant, d threadDoc, m store.NewMessage, now time.Time) (int, error) {
	i := slices.IndexFunc(grants, func(g chatrelay.Grant) bool { return g.ID == m.Participant })
	if i < 0 {
		return -1, chatrelay.UnknownShareLink()
	}
	g := grants[i]
	if err := chatrelay.GrantRefusal(g, now); err != nil {
		return -1, err
	}
	if m.ClientID != "" && slices.ContainsFunc(d.msgs, func(e store.Entry) bool { return e.ClientID == m.ClientID }) {
		return i, nil // a replay: appendTo answers it, and it counts nowhere
	}
	if err := chatrelay.CapRefusal(g); err != nil {
		return -1, err
	}
	waiting := 0
	for j := len(d.msgs) - 1; j >= 0 && d.msgs[j].Author != chatrelay.Hermes; j-- {
		if d.msgs[j].Author == g.Author() {
			waiting++
		}
	}
	if err := chatrelay.WaitingRefusal(waiting); err != nil {
		return -1, err
	}
	return i, nil
}
