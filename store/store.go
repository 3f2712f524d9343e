// Package store keeps chat threads: the one truth that the poll endpoint, the
// live streams and the host CLI all read.
//
// This package is the contract only: the Store interface and its optional
// capabilities (Participants, Checker, FeedStater), the values they
// exchange (Entry, Page, Batch), Options, Backend and the registry that
// Open reads, the errors, and what every backend and reader do the same
// way over an Entry (NewEntry, ReplayOf, WouldChange, EpochOrder, Watch).
// It holds no backend: store/filestore (one JSON file per thread, shared
// safely between processes; "file:DIR") and store/redisstore
// ("redis://…") register themselves in their init, and a binary imports
// the ones it ships (cmd/chatrelay imports both). The domain rules they
// apply (chatrelay.ApplyChange, NewMessage.Prepare, AdmitGrant,
// GrantRefusal, PruneGrants) are the root package's.
package store

import (
	"cmp"
	"context"

	"github.com/chatrelay/chatrelay"
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
	// messages is an empty page, and reading it creates nothing. This is
	// the v1 view: Page.Cursor is the newest message's epoch.
	Since(ctx context.Context, thread string, since int64, limit int) (Page, error)

	// Changes is the v2 view: every retained message with rev > since,
	// oldest change first, each in its current state; with since 0, the
	// newest limit messages (all if limit <= 0), oldest first. Page.Cursor
	// is the thread's newest change epoch, and Page.Reset says that
	// retention dropped a message changed after since.
	Changes(ctx context.Context, thread string, since int64, limit int) (Page, error)

	// Change applies c to the message or interaction it names, atomically
	// with every other writer of the thread (of any process or node), and
	// returns the message in its current state. A change that changes
	// something takes the thread's next epoch as the message's rev and is
	// announced on the feed; one that changes nothing (a reaction the
	// reactor already has) stores nothing. It returns NotFound for an
	// unknown thread, message or interaction, InteractionClosed (with the
	// current message) for an answer or cancel that comes too late — the
	// first answer wins — and InvalidAnswer for an answer that does not
	// fit its interaction.
	Change(ctx context.Context, thread string, c Change) (Entry, error)

	// Pending lists the pending interactions of every thread, for the
	// timers that expire them.
	Pending(ctx context.Context) ([]PendingInteraction, error)

	// Threads lists every stored thread, newest activity first
	// (ThreadOrder).
	Threads(ctx context.Context) ([]ThreadInfo, error)

	// Sweep applies the retention age to every thread, removing threads
	// whose messages have all expired.
	Sweep(ctx context.Context) (SweepStats, error)

	// Follow calls fn with every change from now on, by this process or
	// another: each new message and each changed message, in its state as
	// of that change (its Rev), in the thread's change order, until ctx is
	// done. Changes of one message that another process made between two
	// reads of the feed may come as one: its latest state, at the place of
	// its latest change, so a batch's new messages need not be in epoch
	// order (EpochOrder puts them in it). A reader tells a message it has
	// not seen (Epoch past the cursor it had before the batch) from a change
	// of one it has. A Reset batch says messages may have been missed
	// (a watch was lost, or retention trimmed faster than the feed read):
	// subscribers of that thread must resume from the store. fn must not
	// block. The first call of fn is Batch{Ready: true}, made once the feed
	// is registered: every append after that is delivered, so a reader that
	// waits for it and then reads the store misses nothing. Follow returns
	// nil when ctx is done, and an error when the store closes under it.
	Follow(ctx context.Context, fn func(Batch)) error

	// Close releases what the store holds.
	Close() error
}

// NewMessage and Change are the domain's (chatrelay.NewMessage, prepared
// by its Prepare; chatrelay.Change, applied by chatrelay.ApplyChange),
// named here as the words of the contract.
type (
	NewMessage = chatrelay.NewMessage
	Change     = chatrelay.Change
	ChangeOp   = chatrelay.ChangeOp
)

// The changes (chatrelay's).
const (
	Respond = chatrelay.Respond
	Cancel  = chatrelay.Cancel
	Expire  = chatrelay.Expire
	React   = chatrelay.React
	Unreact = chatrelay.Unreact
)

// Entry is a stored message together with its v1 and v2 JSON, encoded once.
type Entry struct {
	chatrelay.Message
	JSON  []byte // chatrelay.MarshalMessage(Message); shared, never modified
	JSON2 []byte // chatrelay.MarshalMessageV2(Message); shared, never modified
	// Replayed says that Append found the message by its client_id and
	// stored nothing (never stored; only on Append's answer).
	Replayed bool
}

// Page is the answer to Since and Changes.
type Page struct {
	Thread   string
	Messages []Entry // oldest first (Changes: oldest change first); shared, never modified
	// Cursor is the epoch of the thread's newest message (Since), or of its
	// newest change (Changes); 0 if empty.
	Cursor   int64
	Awaiting bool // the newest message was not written by hermes
	// Title is the thread's title ("" if it has none: open_thread sets it).
	Title string
	// Reset is true when since > 0 and retention dropped messages newer
	// than since (changed after since, for Changes): the reader missed
	// messages it can no longer get.
	Reset bool
}

// PendingInteraction is an interaction waiting for its answer.
type PendingInteraction struct {
	Thread        string
	InteractionID string
	Deadline      int64 // epoch ms
}

// ThreadInfo summarises one thread for the host CLI.
type ThreadInfo struct {
	Thread     string           `json:"thread"`
	Messages   int              `json:"messages"`
	LastAuthor chatrelay.Author `json:"last_author"`
	LastEpoch  int64            `json:"last_epoch"` // the newest message's epoch (v1 cursor)
	Rev        int64            `json:"rev"`        // the newest change's epoch (v2 cursor)
	Awaiting   bool             `json:"awaiting"`
	Title      string           `json:"title,omitempty"` // open_thread's title, if any
}

// ThreadOrder is the order of Threads and ThreadsReport: newest activity
// (the newest change's epoch, Rev) first, and threads whose newest change
// has the same epoch (epochs are per thread: two threads may change in the
// same millisecond) by id, so that every backend, and every shard of one,
// lists them in one order.
func ThreadOrder(a, b ThreadInfo) int {
	return cmp.Or(cmp.Compare(b.Rev, a.Rev), cmp.Compare(a.Thread, b.Thread))
}

// ThreadError is a thread a list left out because its stored data
// cannot be read: Err is what a read of it returns (a *chatrelay.Error:
// thread_unreadable for data that does not parse, store_unavailable for a
// file the store cannot open or read).
type ThreadError struct {
	Thread string
	Err    error
}

// ThreadsReporter is a Store that can list the threads it reads and name
// those it cannot. Threads leaves out a thread whose data does not parse
// without a word, and the file store's fails as a whole on a document it
// cannot open or read (an error that may pass, which its callers retry);
// ThreadsReport lists every other thread all the same, and names the bad
// ones, for a person who asked for the list (chatrelay list).
type ThreadsReporter interface {
	ThreadsReport(ctx context.Context) ([]ThreadInfo, []ThreadError, error)
}

// ThreadsOf is st's ThreadsReport, or its Threads (naming none) if it has
// none.
func ThreadsOf(ctx context.Context, st Store) ([]ThreadInfo, []ThreadError, error) {
	if b, ok := st.(*Backend); ok {
		st = b.Store
	}
	if r, ok := st.(ThreadsReporter); ok {
		return r.ThreadsReport(ctx)
	}
	infos, err := st.Threads(ctx)
	return infos, nil, err
}

// SweepStats says what a sweep did.
type SweepStats struct {
	Threads        int // threads looked at
	Dropped        int // messages dropped
	ThreadsRemoved int // threads removed because every message expired
}

// Batch is one feed event: changes of one thread, in change order (new
// messages, and changed messages in their new state).
type Batch struct {
	Thread   string
	Messages []Entry
	Reset    bool // messages may have been missed: resume from the store
	Ready    bool // the feed is registered (first call only; no thread, no messages)
	// Participants says the thread's participants record changed (a grant
	// was issued, revoked or used, or the sweep removed the thread):
	// holders of its grants, and waits on its interactions, look again.
	Participants bool
	// Agents says the agent keys changed (Thread is AgentsTopic): a
	// server looks again at the keys of its MCP sessions (agents.go).
	Agents bool
	// Closed are the interactions of the thread that retention dropped
	// while they were pending (on append, in the sweep, or with the
	// thread), each closed expired at the drop (DroppedEntry): what the
	// store no longer holds, announced once, for a reader that owes
	// something to a pending interaction (the pusher's closing push).
	// They are no change of the thread: no cursor moves past them, and
	// no stream hands them on. A feed lost meanwhile loses them (no read
	// of the store finds them).
	Closed []Entry
}
