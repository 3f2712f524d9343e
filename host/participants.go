package host

import (
	"context"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Participants is the owner's side of share links (contract Part 3):
// invite, list, revoke and the audit, implemented once over a store that
// keeps participants, behind the HTTP routes (transport) and `chatrelay
// share`. Each change is audited here, with the caller's address when
// there is one. It is safe for concurrent use.
//
// Part 5's devices and agent keys take the same shape: a type over the
// store's record of them, a Now, methods that take the Caller, and a link
// built by link.
type Participants struct {
	Store store.Participants
	Now   func() time.Time // defaults to time.Now
	// Log takes an audit event that could not be written (an audit failure
	// never fails the change it records); nil: not logged.
	Log *slog.Logger
}

// Caller is who asks for a change, as the audit records it: the client's
// address over HTTP, nothing from the host's CLI.
type Caller struct {
	IP string
}

func (p *Participants) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Invited is an invite's outcome: the participant, and its token and link,
// shown this once (the store keeps neither).
type Invited struct {
	Participant chatrelay.Participant
	Token       string
	Link        string
}

// Invite checks in (the contract's codes), stores a new grant in thread
// and audits it. The link is base's share link (see ShareLink).
func (p *Participants) Invite(ctx context.Context, thread string, in chatrelay.Invite, base string, by Caller) (Invited, error) {
	g, token, now, err := p.issue(ctx, thread, &in, by)
	if err != nil {
		return Invited{}, err
	}
	return Invited{Participant: g.Participant(now), Token: token, Link: ShareLink(base, token)}, nil
}

// grantRequest asks for a grant: an invite or a device's request.
type grantRequest interface {
	Check() error
	Grant(now time.Time) (chatrelay.Grant, string)
}

// issue checks in (the contract's codes), stores the grant it asks for in
// thread and audits it; it returns the grant, its token and when it was
// made.
func (p *Participants) issue(ctx context.Context, thread string, in grantRequest, by Caller) (chatrelay.Grant, string, time.Time, error) {
	if err := in.Check(); err != nil {
		return chatrelay.Grant{}, "", time.Time{}, err
	}
	now := p.now()
	g, token := in.Grant(now)
	if err := p.Store.Invite(ctx, thread, g); err != nil {
		return chatrelay.Grant{}, "", time.Time{}, err
	}
	p.AuditGrant(ctx, thread, g, chatrelay.AuditIssued, by)
	return g, token, now, nil
}

// ShareLink is the link that opens the page with a share token: base (the
// server's public address, with its prefix) + "/p#" + token. Without a
// base it is the path alone, for the server's address to come before it.
func ShareLink(base, token string) string { return link(base, "/p#", token) }

// link is a page's link carrying a token in its fragment (never sent to
// a server): base + page + token.
func link(base, page, token string) string {
	return strings.TrimSuffix(base, "/") + page + token
}

// List returns the thread's participants, newest first (never a device).
func (p *Participants) List(ctx context.Context, thread string) ([]chatrelay.Participant, error) {
	grants, err := p.Store.Grants(ctx, thread)
	if err != nil {
		return nil, err
	}
	now := p.now()
	out := make([]chatrelay.Participant, 0, len(grants))
	for _, g := range grants {
		if !g.Device() {
			out = append(out, g.Participant(now))
		}
	}
	return out, nil
}

// Revoke revokes a participant of thread and returns it; revoking again
// answers the same (and audits nothing). NotFound for no such participant.
func (p *Participants) Revoke(ctx context.Context, thread, id string, by Caller) (chatrelay.Participant, error) {
	if !chatrelay.ValidParticipantID(id) {
		return chatrelay.Participant{}, chatrelay.Errorf(chatrelay.NotFound, "no participant %q in this thread", clipAt(id, 256))
	}
	g, err := p.revoke(ctx, thread, id, by)
	if err != nil {
		return chatrelay.Participant{}, err
	}
	return g.Participant(p.now()), nil
}

// revoke revokes the grant id of thread (a participant's or a device's)
// and returns it; it audits the revoke the first time.
func (p *Participants) revoke(ctx context.Context, thread, id string, by Caller) (chatrelay.Grant, error) {
	before, err := p.Store.Grant(ctx, thread, id)
	if err != nil {
		return chatrelay.Grant{}, err
	}
	g, err := p.Store.Revoke(ctx, thread, id)
	if err != nil {
		return chatrelay.Grant{}, err
	}
	if before.RevokedAt == 0 {
		p.AuditGrant(ctx, thread, g, chatrelay.AuditRevoked, by)
	}
	return g, nil
}

// RevokeAll revokes every active participant of thread and returns those
// it revoked (so far, with the error that stopped it).
func (p *Participants) RevokeAll(ctx context.Context, thread string, by Caller) ([]chatrelay.Participant, error) {
	grants, err := p.Store.Grants(ctx, thread)
	if err != nil {
		return nil, err
	}
	now := p.now()
	var out []chatrelay.Participant
	for _, g := range grants {
		if g.StateAt(now) != chatrelay.Active || g.Device() {
			continue
		}
		r, err := p.Revoke(ctx, thread, g.ID, by)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// AuditLog returns the thread's audit trail, oldest first. It fails
// closed with the participants record: an unreadable record's error.
func (p *Participants) AuditLog(ctx context.Context, thread string) ([]chatrelay.AuditEvent, error) {
	if _, err := p.Store.Grants(ctx, thread); err != nil {
		return nil, err
	}
	return p.Store.AuditLog(ctx, thread)
}

// AuditGrant audits the event ev (chatrelay.AuditIssued, …) of the grant
// g, a participant's or a device's (chatrelay.Grant.AuditOf), with the
// caller's address.
func (p *Participants) AuditGrant(ctx context.Context, thread string, g chatrelay.Grant, ev string, by Caller) {
	if e, ok := g.AuditOf(ev); ok {
		e.IP = by.IP
		p.Audit(ctx, thread, e)
	}
}

// Audit appends an event to the thread's audit trail at Now. A failure
// is logged, never returned: the audit never undoes what it records.
func (p *Participants) Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) {
	ev.At = p.now().UnixMilli()
	if err := p.Store.Audit(context.WithoutCancel(ctx), thread, ev); err != nil && p.Log != nil {
		p.Log.Warn("audit", "thread", thread, "event", ev.Event, "err", err)
	}
}

// clipAt cuts s to at most n bytes, on a character's start, marking the cut.
func clipAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
