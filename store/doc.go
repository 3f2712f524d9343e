package store

import (
	"github.com/chatrelay/chatrelay"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// docVersion is the version of the thread document this code reads and
// writes. A field added to the document or its messages bumps it: an older
// binary then refuses the newer file (and never rewrites it) instead of
// silently dropping what it does not know.
const docVersion = 1

// document is the JSON file of one thread, <data>/chat/<thread>.json:
//
//	{"version":1,"thread":"a1b2c3d4e5f60718","trimmed":0,"messages":[{…},…]}
//
// messages are oldest first with strictly increasing epochs, each exactly
// the v1 message object. trimmed is the epoch of the newest message that
// retention ever dropped (0 if none), which tells a resuming reader whether
// it missed messages.
type document struct {
	Version  int                 `json:"version"`
	Thread   string              `json:"thread"`
	Trimmed  int64               `json:"trimmed"`
	Messages []chatrelay.Message `json:"messages"`
}

var errBadDocument = errors.New("not a thread document")

// parseDocument decodes and checks a thread document. It returns the
// messages as entries, each with its v1 JSON encoded once.
func parseDocument(data []byte, thread string) ([]Entry, int64, error) {
	var d document
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", errBadDocument, err)
	}
	if dec.More() {
		return nil, 0, fmt.Errorf("%w: data after the document", errBadDocument)
	}
	if d.Version != docVersion {
		return nil, 0, fmt.Errorf("%w: version %d, this chatrelay reads version %d", errBadDocument, d.Version, docVersion)
	}
	if d.Thread != thread {
		return nil, 0, fmt.Errorf("%w: holds thread %q", errBadDocument, d.Thread)
	}
	if d.Trimmed < 0 {
		return nil, 0, fmt.Errorf("%w: negative trimmed", errBadDocument)
	}
	entries := make([]Entry, len(d.Messages))
	prev := d.Trimmed
	for i, m := range d.Messages {
		if m.Epoch <= prev || m.ID == "" || m.Author == "" {
			return nil, 0, fmt.Errorf("%w: message %d is out of order or incomplete", errBadDocument, i)
		}
		prev = m.Epoch
		entries[i] = Entry{Message: m, JSON: chatrelay.MarshalMessage(m)}
	}
	return entries, d.Trimmed, nil
}

// encodeDocument writes the document of a thread.
func encodeDocument(thread string, msgs []Entry, trimmed int64) []byte {
	return appendDocument(nil, thread, msgs, trimmed)
}

// appendDocument appends the document of a thread to b (a recycled buffer).
func appendDocument(b []byte, thread string, msgs []Entry, trimmed int64) []byte {
	n := 128 // the head and the tail
	for _, e := range msgs {
		n += len(e.JSON) + 1
	}
	if cap(b)-len(b) < n {
		b = append(make([]byte, 0, len(b)+n), b...)
	}
	b = append(b, `{"version":`...)
	b = fmt.Appendf(b, "%d", docVersion)
	b = append(b, `,"thread":"`...)
	b = append(b, thread...) // 16 hex, checked by the caller
	b = fmt.Appendf(b, `","trimmed":%d,"messages":[`, trimmed)
	for i, e := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.JSON...)
	}
	b = append(b, "]}\n"...)
	return b
}
