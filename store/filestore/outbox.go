package filestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Webhook events (store.Outbox) in the file store: a queue file per
// destination, DATA/webhooks/<destination>.queue, one JSON line per event
// after a header line that names the file's generation. A writer appends
// a change's events under the thread's lock, and under the queue's own
// lock (<destination>.queue.lock: writers of different threads, in any
// process, append to the same file), and fsyncs them BEFORE it writes the
// document (mutateOnce). So:
//
//   - a crash before the events are synced stores neither the events nor
//     the change (the change was never acknowledged);
//   - a crash between the events and the document leaves events of a
//     change that was not stored: the deliverer confirms every event
//     against the thread before its first attempt (confirm), under the
//     thread's lock when the lock-free read does not find it (a writer
//     may be between its two writes), and drops an event whose change is
//     not in the document (a retry is not confirmed again: the sweep may
//     have removed the thread since);
//   - a crash after the document leaves both.
//
// Never an event for a change that was not stored, never a stored change
// without its event. A change refused because its document could not be
// written leaves its events behind, which the confirmation drops alike.
//
// The server alone delivers (it holds the folder, lockServe): it keeps
// its progress in DATA/webhooks/<destination>.state (the generation and
// offset up to which every event is settled, and the attempts of the
// events past it), written atomically at most once a second (and at
// Close): after a crash, events settled since are sent again (at least
// once). Once every event of a queue file is settled, it is replaced by
// an empty one of a new generation under the queue's lock (at once past
// queueCompactSize, else at most every compactEvery: a settled event's
// text stays in no file for long); a state of another generation starts
// at the new file's first event.

const (
	queueCompactSize = 1 << 20          // a settled queue file larger than this is emptied at once
	compactEvery     = 10 * time.Second // a smaller settled one, at most this often (as Redis trims its stream)
	queueMemory      = 10000            // events read ahead into memory per destination
	stateSaveEvery   = time.Second
)

// hookWriter queues the events of a change for every destination.
type hookWriter struct {
	dir   string   // DATA/webhooks
	dests []string // destination IDs
	sync  bool
	mu    sync.Mutex // orders this process's appends (flock is per open file)
}

// queueLine is one event of a queue file.
type queueLine struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Thread  string          `json:"thread"`
	Epoch   int64           `json:"epoch"` // the message's
	At      int64           `json:"at"`    // ms
	Message json.RawMessage `json:"message,omitempty"`
	// Participant is the participant object of a participant's event.
	Participant json.RawMessage `json:"participant,omitempty"`
}

type queueHeader struct {
	Queue string `json:"queue"`
	Gen   string `json:"gen"`
}

const queueMagic = "chatrelay webhook events"

func newHookWriter(data string, dests []string, sync bool) *hookWriter {
	if len(dests) == 0 {
		return nil
	}
	return &hookWriter{dir: filepath.Join(data, "webhooks"), dests: dests, sync: sync}
}

// eventsOf returns the queue lines of the change from old to nd at epoch
// ms at: the messages whose rev is past old's newest change, and the
// interactions retention dropped while pending (interaction.closed,
// expired: store.DroppedInteraction). Every message is looked at: the
// messages are in epoch order, not in rev order (an interaction answered
// after later messages is changed while they are not).
func eventsOf(thread string, old, nd threadDoc, at int64) []byte {
	top := old.rev
	if n := len(old.msgs); n > 0 {
		top = max(top, old.msgs[n-1].Epoch)
	}
	var out []byte
	for i := range old.msgs { // retention drops the oldest: those before nd's first
		m := &old.msgs[i]
		if len(nd.msgs) > 0 && m.Epoch >= nd.msgs[0].Epoch {
			break
		}
		if js, ok := store.DroppedInteraction(m.Message, at); ok {
			b, _ := json.Marshal(queueLine{ID: store.NewEventID(), Type: store.EventInteractionClosed, Thread: thread, Epoch: m.Epoch, At: max(at, m.Rev), Message: js})
			out = append(append(out, b...), '\n')
		}
	}
	for i := len(nd.msgs) - 1; i >= 0; i-- {
		m := &nd.msgs[i]
		rev := max(m.Rev, m.Epoch)
		if rev <= top {
			continue // unchanged by this write
		}
		var was *chatrelay.Message
		if m.Epoch <= top {
			j := sort.Search(len(old.msgs), func(j int) bool { return old.msgs[j].Epoch >= m.Epoch })
			if j < len(old.msgs) && old.msgs[j].Epoch == m.Epoch {
				was = &old.msgs[j].Message
			} else {
				continue
			}
		}
		typ := store.EventOf(was, &m.Message)
		if typ == "" {
			continue
		}
		b, _ := json.Marshal(queueLine{ID: store.NewEventID(), Type: typ, Thread: thread, Epoch: m.Epoch, At: rev, Message: m.JSON2})
		out = append(append(out, b...), '\n')
	}
	return out
}

// removedGrantsOf returns the queue lines of the removal of a thread
// whose grants are grants, at now: participant.revoked for each link still
// active (store.RemovedGrant).
func removedGrantsOf(thread string, grants []chatrelay.Grant, now time.Time) []byte {
	var out []byte
	for _, g := range grants {
		p, ok := store.RemovedGrant(g, now)
		if !ok {
			continue
		}
		b, _ := json.Marshal(queueLine{ID: store.NewEventID(), Type: store.EventParticipantRevoked, Thread: thread, At: now.UnixMilli(), Participant: p})
		out = append(append(out, b...), '\n')
	}
	return out
}

// grantEventsOf returns the queue lines of a write of a thread's grants
// from old to nd.
func grantEventsOf(thread string, old, nd []chatrelay.Grant, now time.Time) []byte {
	var out []byte
	for i := range nd {
		g := &nd[i]
		j := slices.IndexFunc(old, func(o chatrelay.Grant) bool { return o.ID == g.ID })
		if j < 0 {
			continue // a new grant: no event
		}
		typ := store.GrantEventOf(&old[j], g)
		if typ == "" {
			continue
		}
		p, _ := json.Marshal(g.Participant(now))
		b, _ := json.Marshal(queueLine{ID: store.NewEventID(), Type: typ, Thread: thread, At: now.UnixMilli(), Participant: p})
		out = append(append(out, b...), '\n')
	}
	return out
}

// queue appends lines (whole lines) to every destination's queue file and
// syncs them. An error means the change must not be stored.
func (h *hookWriter) queue(lines []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return err
	}
	for _, d := range h.dests {
		if err := h.appendTo(d, lines); err != nil {
			return fmt.Errorf("webhook queue %s: %w", d, err)
		}
	}
	return nil
}

func (h *hookWriter) appendTo(dest string, lines []byte) error {
	path := filepath.Join(h.dir, dest+".queue")
	unlock, err := lockPath(context.Background(), path+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer unlock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600) // read: the last byte
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var buf []byte
	if fi.Size() == 0 {
		buf = appendHeader(nil)
	} else {
		// A writer that died in the middle of a line left it torn: end it,
		// so that the next line is whole (the torn one does not parse and
		// is skipped; its change was not stored).
		var last [1]byte
		if _, err := f.ReadAt(last[:], fi.Size()-1); err == nil && last[0] != '\n' {
			buf = append(buf, '\n')
		}
	}
	buf = append(buf, lines...)
	if _, err := f.Write(buf); err != nil {
		return err
	}
	if h.sync {
		if err := f.Sync(); err != nil {
			return err
		}
		if fi.Size() == 0 {
			return syncDir(h.dir)
		}
	}
	return nil
}

func appendHeader(b []byte) []byte {
	var g [8]byte
	rand.Read(g[:])
	hb, _ := json.Marshal(queueHeader{Queue: queueMagic, Gen: hex.EncodeToString(g[:])})
	return append(append(b, hb...), '\n')
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
