package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// docVersion is the version of the thread document this code writes. A
// field added to the document or its messages bumps it: an older binary
// then refuses the newer file (and never rewrites it) instead of silently
// dropping what it does not know. This code reads version 1 too and
// writes it anew as version 2 on its first write (a migration that needs
// nothing: a v1 message is a v2 message that never changed). Version 3
// added the thread's title; a thread without one is still written as
// version 2 (the same bytes), so only a titled thread is refused by an
// older binary.
//
// Version 4 added attachments (Part 5); a document is written as version 4
// only while a message carries attachments.
//
// Version 5 added the thread's log, <thread>.log beside the document
// (log.go): messages appended since the document was written, which a
// reader must add to it. The document of a thread whose log may hold
// messages is version 5 (whatever else it holds), so that a binary that
// knows no log (versions 1 to 4) refuses the thread instead of hiding the
// log's messages and then writing a document without them. Only a store
// with FileOptions.AppendLog writes version 5: a new message is written
// as version 5 (the next one then goes to the log); a write that is no
// new message (a change, a sweep of a thread whose document was not
// version 5), and every write of a store without the option, is written
// as its content's version, and empties the log: an older binary may
// read that thread again.
const docVersion = 5

// logVersion is the first document version a log may follow: a writer
// appends to a thread's log only while its document is at this version.
const logVersion = 5

// document is the JSON file of one thread, <data>/chat/<thread>.json:
//
//	{"version":2,"thread":"a1b2c3d4e5f60718","trimmed":0,"trimmed_rev":0,"rev":1792780800123,"messages":[{…},…]}
//
// messages are oldest first with strictly increasing epochs, each the v2
// message object (the v1 fields, rev, and the v2 fields it has). trimmed
// and trimmed_rev are the newest epoch and rev retention ever dropped (0
// if none), which tell a resuming reader whether it missed messages; rev
// is the thread's newest change epoch, which the next change passes.
//
// Version 1 had no rev and no trimmed_rev, and v1 message objects.
type document struct {
	Version    int                 `json:"version"`
	Thread     string              `json:"thread"`
	Title      string              `json:"title,omitempty"` // version 3
	Trimmed    int64               `json:"trimmed"`
	TrimmedRev int64               `json:"trimmed_rev"`
	Rev        int64               `json:"rev"`
	Messages   []chatrelay.Message `json:"messages"`
}

var errBadDocument = errors.New("not a thread document")

// parseDocument decodes and checks a thread document (versions 1 to
// docVersion). It returns the thread with every message's JSON encoded once.
func parseDocument(data []byte, thread string) (threadDoc, error) {
	d, _, err := parseDocumentV(data, thread)
	return d, err
}

// parseDocumentV is parseDocument that also returns the document's version.
func parseDocumentV(data []byte, thread string) (threadDoc, int, error) {
	var d document
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return threadDoc{}, 0, fmt.Errorf("%w: %v", errBadDocument, err)
	}
	if dec.More() {
		return threadDoc{}, 0, fmt.Errorf("%w: data after the document", errBadDocument)
	}
	if d.Version < 1 || d.Version > docVersion {
		return threadDoc{}, 0, fmt.Errorf("%w: version %d, this chatrelay reads versions 1 to %d", errBadDocument, d.Version, docVersion)
	}
	if d.Title != "" && (d.Version < 3 || chatrelay.CheckTitle(d.Title) != nil) {
		return threadDoc{}, 0, fmt.Errorf("%w: a title that version %d cannot hold", errBadDocument, d.Version)
	}
	if d.Thread != thread {
		return threadDoc{}, 0, fmt.Errorf("%w: holds thread %q", errBadDocument, d.Thread)
	}
	if d.Trimmed < 0 || d.TrimmedRev < 0 || d.Rev < 0 {
		return threadDoc{}, 0, fmt.Errorf("%w: a negative mark", errBadDocument)
	}
	td := threadDoc{msgs: make([]store.Entry, len(d.Messages)), trimmed: d.Trimmed, trimmedRev: max(d.TrimmedRev, d.Trimmed), rev: d.Rev, title: d.Title}
	prev := d.Trimmed
	for i, m := range d.Messages {
		if m.Epoch <= prev || m.ID == "" || m.Author == "" {
			return threadDoc{}, 0, fmt.Errorf("%w: message %d is out of order or incomplete", errBadDocument, i)
		}
		if d.Version < 4 && len(m.Attachments) > 0 {
			return threadDoc{}, 0, fmt.Errorf("%w: message %d of a version %d document has attachments", errBadDocument, i, d.Version)
		}
		if d.Version == 1 && (m.Rev != 0 || m.Interaction != nil || m.Card != nil || m.Reactions != nil || m.ClientID != "" || m.AuthorName != "") {
			return threadDoc{}, 0, fmt.Errorf("%w: message %d of a version 1 document has v2 fields", errBadDocument, i)
		}
		if m.Rev == 0 {
			m.Rev = m.Epoch
		}
		if m.Rev < m.Epoch {
			return threadDoc{}, 0, fmt.Errorf("%w: message %d changed before it was written", errBadDocument, i)
		}
		if err := checkStored(m); err != nil {
			return threadDoc{}, 0, fmt.Errorf("%w: message %d: %v", errBadDocument, i, err)
		}
		prev = m.Epoch
		td.rev = max(td.rev, m.Rev)
		td.msgs[i] = store.NewEntry(m)
	}
	if d.Version == 1 {
		td.rev = max(td.rev, d.Trimmed)
	}
	return td, d.Version, nil
}

// checkStored checks what a reader relies on in a stored message's v2
// fields: an interaction with an id, a known type and state; reactions
// with reactors.
func checkStored(m chatrelay.Message) error {
	if ix := m.Interaction; ix != nil {
		if !chatrelay.InteractionIDPattern.MatchString(ix.ID) {
			return errors.New("an interaction without a valid id")
		}
		if ix.Type != chatrelay.Approval && ix.Type != chatrelay.Input {
			return fmt.Errorf("interaction type %q", ix.Type)
		}
		switch ix.State {
		case chatrelay.Pending, chatrelay.Approved, chatrelay.Denied, chatrelay.Answered, chatrelay.Expired, chatrelay.Canceled:
		default:
			return fmt.Errorf("interaction state %q", ix.State)
		}
	}
	for emoji, who := range m.Reactions {
		if emoji == "" || len(who) == 0 {
			return errors.New("an empty reaction")
		}
	}
	return nil
}

// appendDocument appends the document of a thread to b (a recycled
// buffer), at the least version its content needs.
func appendDocument(b []byte, thread string, d threadDoc) []byte {
	return appendDocumentV(b, thread, d, 0)
}

// appendDocumentV is appendDocument at version atLeast if that is more
// (5: the thread's log may hold messages).
func appendDocumentV(b []byte, thread string, d threadDoc, atLeast int) []byte {
	n := 160 // the head and the tail
	for _, e := range d.msgs {
		n += len(e.JSON2) + 1
	}
	if cap(b)-len(b) < n {
		b = append(make([]byte, 0, len(b)+n), b...)
	}
	version := 2 // a thread without a title is the version 2 document it was
	if d.title != "" {
		version = 3
	}
	if slices.ContainsFunc(d.msgs, func(e store.Entry) bool { return len(e.Attachments) > 0 }) {
		version = 4
	}
	version = max(version, atLeast)
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(version), 10)
	b = append(b, `,"thread":"`...)
	b = append(b, thread...) // 16 hex, checked by the caller
	b = append(b, '"')
	if d.title != "" {
		b = append(b, `,"title":`...)
		b = appendJSONString(b, d.title)
	}
	b = append(b, `,"trimmed":`...)
	b = strconv.AppendInt(b, d.trimmed, 10)
	b = append(b, `,"trimmed_rev":`...)
	b = strconv.AppendInt(b, d.trimmedRev, 10)
	b = append(b, `,"rev":`...)
	b = strconv.AppendInt(b, d.rev, 10)
	b = append(b, `,"messages":[`...)
	for i, e := range d.msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.JSON2...)
	}
	return append(b, "]}\n"...)
}

// appendJSONString appends s (valid UTF-8, checked) as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
