// Package store keeps chat threads: the one truth that the poll endpoint, the
// live streams and the host CLI all read.
//
// Store is the small interface the server and the CLI use; File is the
// default backend, one JSON file per thread shared safely between processes.
package store

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"time"
)

// Store is what the server and the host CLI need from storage. Every
// implementation is safe for concurrent use by many goroutines and, for
// shared backends, by many processes.
type Store interface {
	// Append stores a new message in thread and returns it with its id,
	// epoch (strictly greater than the thread's newest) and ts. It applies
	// retention. It returns ThreadLimit if the append would create a thread
	// beyond the limit, ThreadUnreadable if the thread's stored document does
	// not parse (it is left as it is), NotFound if m.MustExist and the thread
	// has no messages, InvalidText or TextTooLong for a text that may not be
	// stored, and StoreUnavailable if storage cannot be reached.
	Append(ctx context.Context, thread string, m NewMessage) (Entry, error)

	// Since returns the thread's retained messages with epoch > since, oldest
	// first; if limit > 0, only the newest limit of them. A thread with no
	// messages is an empty page, and reading it creates nothing.
	Since(ctx context.Context, thread string, since int64, limit int) (Page, error)

	// Threads lists every stored thread, newest activity first.
	Threads(ctx context.Context) ([]ThreadInfo, error)

	// Sweep applies the retention age to every thread, removing threads
	// whose messages have all expired.
	Sweep(ctx context.Context) (SweepStats, error)

	// Follow calls fn with every message appended from now on, by this
	// process or another, once each and in epoch order within a thread,
	// until ctx is done. A Reset batch says messages may have been missed
	// (a watch was lost, or retention trimmed faster than the feed read):
	// subscribers of that thread must resume from the store. fn must not
	// block. The first call of fn is Batch{Ready: true}, made once the feed
	// is registered: every append after that is delivered, so a reader that
	// waits for it and then reads the store misses nothing. Follow returns
	// when ctx is done.
	Follow(ctx context.Context, fn func(Batch)) error

	// Close releases what the store holds.
	Close() error
}

// NewMessage is what a writer supplies; the store assigns the rest.
type NewMessage struct {
	Author chatrelay.Author
	Text   string
	// MustExist refuses to create the thread (the host CLI's reply).
	MustExist bool
}

// Entry is a stored message together with its v1 JSON, encoded once.
type Entry struct {
	chatrelay.Message
	JSON []byte // chatrelay.MarshalMessage(Message); shared, never modified
}

// Page is the answer to Since.
type Page struct {
	Thread   string
	Messages []Entry // oldest first; shared, never modified
	Cursor   int64   // the epoch of the thread's newest message, 0 if empty
	Awaiting bool    // the newest message was not written by hermes
	// Reset is true when since > 0 and retention dropped messages newer
	// than since: the reader missed messages it can no longer get.
	Reset bool
}

// ThreadInfo summarises one thread for the host CLI.
type ThreadInfo struct {
	Thread     string           `json:"thread"`
	Messages   int              `json:"messages"`
	LastAuthor chatrelay.Author `json:"last_author"`
	LastEpoch  int64            `json:"last_epoch"`
	Awaiting   bool             `json:"awaiting"`
}

// SweepStats says what a sweep did.
type SweepStats struct {
	Threads        int // threads looked at
	Dropped        int // messages dropped
	ThreadsRemoved int // threads removed because every message expired
}

// Batch is one feed event: new messages of one thread, oldest first.
type Batch struct {
	Thread   string
	Messages []Entry
	Reset    bool // messages may have been missed: resume from the store
	Ready    bool // the feed is registered (first call only; no thread, no messages)
}

// trim applies r to msgs (oldest first) at time now. It returns the kept
// messages and the epoch of the newest dropped one (0 if none was dropped).
func trim(r chatrelay.Retention, msgs []Entry, now time.Time) ([]Entry, int64) {
	cut := 0
	if n := len(msgs) - r.Messages; n > 0 {
		cut = n
	}
	oldest := now.Add(-r.Age).UnixMilli()
	for cut < len(msgs) && msgs[cut].Epoch < oldest {
		cut++
	}
	if cut == 0 {
		return msgs, 0
	}
	return msgs[cut:], msgs[cut-1].Epoch
}

// page builds the answer to Since from a thread's retained messages.
func page(thread string, msgs []Entry, trimmed, since int64, limit int) Page {
	p := Page{Thread: thread}
	if len(msgs) == 0 {
		p.Reset = since > 0 && since < trimmed
		return p
	}
	last := msgs[len(msgs)-1]
	p.Cursor = last.Epoch
	p.Awaiting = last.Author != chatrelay.Hermes
	p.Reset = since > 0 && since < trimmed
	// First message with epoch > since: epochs strictly increase.
	lo, hi := 0, len(msgs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if msgs[mid].Epoch <= since {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	out := msgs[lo:]
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	p.Messages = out[:len(out):len(out)]
	return p
}
