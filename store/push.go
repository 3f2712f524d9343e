package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/webpush"
)

// Push keeps a store's Web Push subscriptions (contract Part 5), per
// thread, and its VAPID key pair, one for every process and node of the
// store. A backend that keeps them implements it; the server finds it by
// a type assertion, like Participants.
type Push interface {
	// PushSubscribe adds sub (its ID and CreatedAt made by the caller)
	// to thread's subscriptions and reports created. If the thread has a
	// subscription with sub's endpoint already, that one takes sub's
	// keys, events and subscriber and keeps its id and created_at, and
	// created is false. It returns NotFound if the thread has no message
	// and PushLimit if it has LimitPushSubscriptions already, or sub is a
	// participant's and the participants hold LimitPushParticipants
	// (chatrelay.AdmitPush).
	PushSubscribe(ctx context.Context, thread string, sub chatrelay.PushSubscription) (out chatrelay.PushSubscription, created bool, err error)

	// PushSubscriptions lists the thread's subscriptions, oldest first
	// (PushOrder: by created_at, then by id, whatever order they were
	// subscribed in; none for a thread that has none, or no message).
	PushSubscriptions(ctx context.Context, thread string) ([]chatrelay.PushSubscription, error)

	// PushUnsubscribe removes the thread's subscription id and returns
	// it: NotFound if it has none of that id.
	PushUnsubscribe(ctx context.Context, thread, id string) (chatrelay.PushSubscription, error)

	// VAPIDKey returns the VAPID private key (the raw P-256 scalar,
	// webpush.NewVAPIDKey's form), made and kept on first use: the same
	// key for every process and node of the store.
	VAPIDKey(ctx context.Context) ([]byte, error)

	// RotateVAPIDKey replaces the VAPID key with a fresh one and returns
	// it. Browsers subscribed with the old key must subscribe again.
	RotateVAPIDKey(ctx context.Context) ([]byte, error)

	// ClaimPush claims the pushes of one change, id, for owner (a node's
	// token of its own) for lease, so that of every node of a shared
	// store, whose feeds all see the change, one sends them. It is won
	// when no node holds id, or when the node that held it let its lease
	// end unsettled (it stopped, or was killed, before every push had its
	// outcome): the caller then sends them all. settled reports that a
	// node settled id (SettlePush): nobody sends it again. A store that
	// one server uses answers won the first time id is claimed.
	//
	// A claim won with a non-nil doc (the transport's own document of the
	// change, opaque to the store) journals doc under id, in the same
	// write as the claim, until SettlePush removes it: a server that
	// starts finds there what a killed one (SIGKILL) was still sending
	// (JournaledPushes).
	ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error)

	// RenewPush extends by lease the claims of ids, each one's for as
	// long as it lasts already if that is longer (a settled one's).
	RenewPush(ctx context.Context, ids []string, lease time.Duration) error

	// SettlePush records that every push of id had its outcome (sent,
	// gone, refused, failed): no node claims it again within keep. It
	// removes id's journal entry in the same write.
	SettlePush(ctx context.Context, id string, keep time.Duration) error

	// JournaledPushes returns the journal's entries: the changes claimed
	// with a document (ClaimPush) and not settled since, in no order.
	// Some may be held by a node that runs (on a shared store); the
	// caller claims each to know (a live claim is not won). A store that
	// one server uses returns, at its start, only what the process
	// before it left: a killed one's changes without every outcome.
	JournaledPushes(ctx context.Context) ([]JournaledPush, error)

	// HandOverPushes keeps the changes whose pushes a stopping server
	// did not send, each a document of the transport's own (opaque to
	// the store), for the next server that starts on the store
	// (TakePushes). Documents handed over before and not yet taken are
	// kept too.
	HandOverPushes(ctx context.Context, docs [][]byte) error

	// TakePushes returns the documents handed over, in the order they
	// were, and removes them: each is taken once, by one server.
	TakePushes(ctx context.Context) ([][]byte, error)
}

// PushOrder is the order of PushSubscriptions, oldest first: by
// CreatedAt, then by ID (two made in one millisecond), so that every
// backend lists them alike (a Redis hash keeps no order of its own).
func PushOrder(a, b chatrelay.PushSubscription) int {
	return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID)) // not a - b: a stored time may be any int64
}

// JournaledPush is an entry of the push journal (Push.JournaledPushes):
// the claim's id and the document it was claimed with.
type JournaledPush struct {
	ID  string
	Doc []byte
}

// PushOf is st's Push, or nil if st keeps no subscriptions.
func PushOf(st Store) Push {
	p, _ := st.(Push)
	return p
}

// CheckVAPID checks a VAPID key as a backend read it (key, or the read's
// error err): a failed read, or a key that does not parse, is an error
// that names where the key is kept.
func CheckVAPID(where string, key []byte, err error) ([]byte, error) {
	if err == nil {
		_, err = webpush.ParseVAPID(key, "")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return key, nil
}

// PushUnreadable is the error of a thread whose push subscriptions record
// does not parse (a newer chatrelay's, or a hand edit; err says why: it
// is logged, never sent). It is ThreadUnreadable, as for the thread's
// other stored data: the record is kept as it is, and nothing writes
// over it.
func PushUnreadable(err error) error {
	return &chatrelay.Error{Code: chatrelay.ThreadUnreadable, Err: err,
		Message: "this thread's push subscriptions record does not parse; it is kept as it is for an operator to look at"}
}
