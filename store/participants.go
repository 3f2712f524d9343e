package store

import (
	"context"

	"github.com/chatrelay/chatrelay"
)

// Participants keeps each thread's grants (share links, contract Part 3,
// and the owner's devices, Part 5: a grant whose role is owner) and their
// audit trail. Only the SHA-256 digest of a share token is
// kept. A thread's record that does not parse fails closed: every share
// token of the thread is refused (Unauthorized), the owner's participant
// calls get ParticipantsUnreadable, and nothing writes over it.
type Participants interface {
	// Invite stores a new grant in thread. It returns NotFound if the
	// thread has no message, ParticipantLimit if the thread has the most
	// active grants, RateLimited past the invite window, and
	// ParticipantsUnreadable.
	Invite(ctx context.Context, thread string, g chatrelay.Grant) error

	// Grants lists the thread's grants, newest first, without those that
	// ended long ago (chatrelay.PruneGrants: every backend reads the record so).
	Grants(ctx context.Context, thread string) ([]chatrelay.Grant, error)

	// Revoke revokes a grant and returns it; revoking one already revoked
	// changes nothing. NotFound for no such grant.
	Revoke(ctx context.Context, thread, id string) (chatrelay.Grant, error)

	// Resolve finds the grant of a share token's digest, comparing
	// digests in constant time: its thread and the grant in its current
	// state (the caller checks the state). Unauthorized if no grant has
	// it, or if its thread's record cannot be read.
	Resolve(ctx context.Context, digest string) (thread string, g chatrelay.Grant, err error)

	// Grant returns one grant of thread: NotFound if none. Every backend
	// answers with GrantOf.
	Grant(ctx context.Context, thread, id string) (chatrelay.Grant, error)

	// MarkUsed records that a grant was used, and reports whether this
	// was its first use.
	MarkUsed(ctx context.Context, thread, id string) (first bool, err error)

	// Seen records a request of a device at at (epoch ms): it marks the
	// grant used, as MarkUsed, and sets its LastSeen to at if that is
	// later (chatrelay.DefaultDeviceSeen says how often the transport
	// asks). first reports whether this was the grant's first use. An
	// unknown grant changes nothing.
	Seen(ctx context.Context, thread, id string, at int64) (first bool, err error)

	// NoteExpired records that a grant's expiry was noticed, and reports
	// whether this was the first time (its audit event is written once).
	NoteExpired(ctx context.Context, thread, id string) (first bool, err error)

	// Audit appends an event to the thread's audit trail (none to a
	// thread that has no message: one the sweep removed meanwhile keeps
	// nothing of it for the thread made again); AuditLog returns
	// the events KeptAudit keeps of it (LimitAuditKept at most), oldest
	// first.
	Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) error
	AuditLog(ctx context.Context, thread string) ([]chatrelay.AuditEvent, error)
}

// KeptAudit is what a thread's audit keeps of events (oldest first, as
// appended): LimitAuditKept at most, refusals first to go. Past the bound
// the oldest refused events are dropped; only when none is left do the
// oldest other events go. So a flood of refusals (any share link can make
// them, a viewer's or a revoked link's) replaces only older refusals,
// never the owner's record of issued, first_use, revoked, expired and
// device events. The rule depends only on the events appended, so a
// store may hold more than the bound and cut them with it whenever it
// likes: what it answers is the same. events is not changed.
func KeptAudit(events []chatrelay.AuditEvent) []chatrelay.AuditEvent {
	drop := len(events) - chatrelay.LimitAuditKept.Max
	if drop <= 0 {
		return events
	}
	refused := 0
	for _, e := range events {
		if e.Event == chatrelay.AuditRefused {
			refused++
		}
	}
	dropOthers := max(0, drop-refused) // the oldest others, once every refusal is gone
	kept := make([]chatrelay.AuditEvent, 0, chatrelay.LimitAuditKept.Max)
	for _, e := range events {
		switch {
		case e.Event == chatrelay.AuditRefused && drop > 0:
			drop--
		case e.Event != chatrelay.AuditRefused && dropOthers > 0:
			dropOthers--
			drop--
		default:
			kept = append(kept, e)
		}
	}
	return kept
}

// ParticipantsUnreadable is the error of a thread whose participants
// record does not parse (err says why; it is logged, never sent).
func ParticipantsUnreadable(err error) error {
	return &chatrelay.Error{Code: chatrelay.ParticipantsUnreadable, Err: err,
		Message: "this thread's participants record does not parse; it is kept as it is for an operator to look at, and every share link of the thread is refused"}
}

// GrantOf is Participants.Grant for a backend: the grant id among p's
// Grants of thread, NotFound if none.
func GrantOf(ctx context.Context, p Participants, thread, id string) (chatrelay.Grant, error) {
	grants, err := p.Grants(ctx, thread)
	if err != nil {
		return chatrelay.Grant{}, err
	}
	i, err := chatrelay.GrantIndex(grants, id)
	if err != nil {
		return chatrelay.Grant{}, err
	}
	return grants[i], nil
}
