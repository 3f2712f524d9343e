package transport

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/chatrelay/chatrelay"
)

// Every request resolves to one principal (contract Parts 3 and 5): the
// owner (X-Chat-Token), one of the owner's devices (Authorization: Bearer
// chd_…, an active device grant: it acts as the owner), a participant
// (Bearer chp_…, an active grant), or a reader holding a ticket (streams
// only); or it is refused (unauthorized, token_revoked, token_expired,
// invalid_ticket). A device and a participant are resolved the same way:
// a grant found by its token's digest. Which principals a route takes is
// written once, in the route table (chatrelay.Routes, its Callers), which
// the gate checks against the principal's bit (principal.caller).

// principal is who a request acts as.
type principal struct {
	thread string
	role   chatrelay.Role   // Owner (the owner or a device), Viewer or Commenter
	grant  *chatrelay.Grant // a participant's or a device's grant; nil for the owner's token
	ticket bool             // a ticket: reads only
	// ctx ends when the principal's right to the thread ends (a revoked
	// or expired grant; its cause says which): a stream ends with it.
	// Background for the owner.
	ctx context.Context
}

// participant reports whether p is a participant (neither the owner nor
// one of its devices).
func (p principal) participant() bool { return p.grant != nil && !p.grant.Device() }

// device reports whether p is one of the owner's devices.
func (p principal) device() bool { return p.grant != nil && p.grant.Device() }

// caller is p's bit of the route table's Callers.
func (p principal) caller() chatrelay.Callers {
	switch {
	case p.device():
		return chatrelay.CallerDevice
	case p.grant == nil:
		return chatrelay.CallerOwner
	case p.role == chatrelay.Viewer:
		return chatrelay.CallerViewer
	}
	return chatrelay.CallerCommenter
}

// author is who p's posts are written as: the kind the owner's body
// chose (a device's too), or a participant's "p:<id>".
func (p principal) author() chatrelay.Author {
	if p.participant() {
		return p.grant.Author()
	}
	return chatrelay.Operator
}

// view is what p sees: a participant's view is redacted; the owner's
// devices see what the owner sees.
func (p principal) view(v view) view {
	v.redact = p.participant()
	return v
}

// who says which principals a route takes: the route's Callers.
type who chatrelay.Callers

// The gate's who of the route table's usual sets.
const (
	ownerOnly = who(chatrelay.CallerOwner) // the thread's token only (making devices)
	owners    = who(chatrelay.Owners)      // the owner, on any of its devices
	members   = who(chatrelay.Members)     // the owner and every participant
	writers   = who(chatrelay.Writers)     // the owner and commenters: a viewer gets 403 not_permitted
)

func (w who) String() string {
	switch w {
	case ownerOnly:
		return "owner"
	case owners:
		return "owners"
	case members:
		return "members"
	case writers:
		return "writers"
	}
	return fmt.Sprintf("callers %04b", uint8(w))
}

// reads reports whether w is a route a viewer may use, one a ticket may
// be used on: a ticket reads only.
func (w who) reads() bool { return chatrelay.Callers(w)&chatrelay.CallerViewer != 0 }

// allows reports whether w takes p, or the refusal.
func (w who) allows(p principal) error {
	if chatrelay.Callers(w)&p.caller() != 0 && (!p.ticket || w.reads()) {
		return nil
	}
	switch {
	case p.ticket:
		return chatrelay.Errorf(chatrelay.InvalidTicket, "a ticket is read-only; post with the token")
	case p.device():
		return chatrelay.Errorf(chatrelay.NotPermitted, "a device may not use this route: only the conversation's own token may (making devices)")
	case p.role == chatrelay.Viewer && chatrelay.Callers(w)&chatrelay.CallerCommenter != 0:
		return chatrelay.Errorf(chatrelay.NotPermitted, "a viewer may read this conversation but not write to it")
	case p.participant():
		return chatrelay.Errorf(chatrelay.NotPermitted, "a participant may not use this route: it is the conversation owner's")
	}
	return chatrelay.Errorf(chatrelay.NotPermitted, "this route is not the owner's")
}

// authenticate resolves a request's principal from its headers (never a
// URL query: a ticket is taken by the streams only, streamAuth). It
// touches nothing on disk for the owner's token; a share token is looked
// up by its digest.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	if tok := r.Header.Get("X-Chat-Token"); tok != "" || r.Header.Get("Authorization") == "" {
		thread, err := threadOf(r)
		if err != nil {
			return principal{}, err
		}
		return principal{thread: thread, role: chatrelay.Owner, ctx: context.Background()}, nil
	}
	token, ok := parseBearer(r.Header.Get("Authorization"))
	if !ok || len(r.Header.Values("Authorization")) > 1 {
		return principal{}, chatrelay.Errorf(chatrelay.Unauthorized, "Authorization must be Bearer chp_… (a share link's token) or chd_… (a device's); the owner sends X-Chat-Token")
	}
	return s.grantHolder(r, token)
}

// parseBearer reads "Bearer <share or device token>" (the scheme in any
// case, one or more spaces). ok is false for anything else.
func parseBearer(h string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(rest, " ")
	if !chatrelay.ValidShareToken(token) && !chatrelay.ValidDeviceToken(token) {
		return "", false
	}
	return token, true
}

// grantHolder resolves a share or device token to its grant, refusing a
// revoked or expired one (and auditing the refusal), and recording its
// use (its first use audited; a device's last_seen).
func (s *Server) grantHolder(r *http.Request, token string) (principal, error) {
	if s.parts == nil {
		return principal{}, chatrelay.Errorf(chatrelay.Unauthorized, "this server keeps no share links or devices")
	}
	thread, g, err := s.parts.Resolve(r.Context(), chatrelay.DigestOf(token))
	if err != nil {
		return principal{}, err
	}
	if g.Device() != chatrelay.ValidDeviceToken(token) { // a digest of the other kind: never, but never trusted
		return principal{}, chatrelay.UnknownShareLink()
	}
	noteThread(r, thread)
	if err := s.grantRefusal(r.Context(), thread, g); err != nil {
		s.auditGrant(r, thread, g, chatrelay.AuditRefused, chatrelay.CodeOf(err))
		return principal{}, err
	}
	if ri := infoOf(r); ri != nil { // recorded once the request is accepted
		ri.accepted = func() { s.noteUse(r, thread, g) }
	} else {
		s.noteUse(r, thread, g)
	}
	noteParticipant(r, thread, g.ID)
	return principal{thread: thread, role: g.Role, grant: &g, ctx: context.Background()}, nil
}

// noteUse records an accepted request of an active grant: its first use (audited),
// and a device's last_seen when the one recorded is older than
// chatrelay.DefaultDeviceSeen.
func (s *Server) noteUse(r *http.Request, thread string, g chatrelay.Grant) {
	now := s.cfg.Now().UnixMilli()
	var first bool
	var err error
	switch {
	case g.Device() && now-g.LastSeen >= chatrelay.DefaultDeviceSeen.Milliseconds():
		first, err = s.parts.Seen(r.Context(), thread, g.ID, now)
	case !g.Used:
		first, err = s.parts.MarkUsed(r.Context(), thread, g.ID)
	}
	if err == nil && first {
		s.auditGrant(r, thread, g, chatrelay.AuditFirstUse, "")
	}
}

// auditGrant audits the event ev of a grant (a participant's or a
// device's: chatrelay.Grant.AuditOf), with the refusal's code if any.
func (s *Server) auditGrant(r *http.Request, thread string, g chatrelay.Grant, ev string, code chatrelay.Code) {
	if e, ok := g.AuditOf(ev); ok {
		e.Code = code
		s.audit(r, thread, e)
	}
}

// grantRefusal is the refusal of a grant that is not active: token_revoked
// or token_expired (an expiry is audited once, when first noticed).
func (s *Server) grantRefusal(ctx context.Context, thread string, g chatrelay.Grant) error {
	err := chatrelay.GrantRefusal(g, s.cfg.Now())
	if chatrelay.CodeOf(err) == chatrelay.TokenExpired {
		s.noteExpired(ctx, thread, g)
	}
	return err
}

// audit appends an event to the thread's audit trail, with the client's
// address and the server's time. A failure is logged, never answered.
func (s *Server) audit(r *http.Request, thread string, ev chatrelay.AuditEvent) {
	if s.parts == nil {
		return
	}
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
		if ev.IP == "" {
			ev.IP = clientIP(r, s.cfg.Trusted)
		}
	}
	s.people().Audit(ctx, thread, ev)
}
