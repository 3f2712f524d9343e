package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/chatrelay/chatrelay"
)

// Every request resolves to one principal (contract Part 3): the owner
// (X-Chat-Token), a participant (Authorization: Bearer chp_…, an active
// grant), or a reader holding a ticket (streams only); or it is refused
// (unauthorized, token_revoked, token_expired, invalid_ticket). Which
// principals a route takes is written once, in the route table
// (chatrelay.Routes, its Callers), which mux.go turns into a who.

// principal is who a request acts as.
type principal struct {
	thread string
	role   chatrelay.Role   // Owner, Viewer or Commenter
	grant  *chatrelay.Grant // a participant's grant; nil for the owner
	ticket bool             // a ticket: reads only
	// ctx ends when the principal's right to the thread ends (a revoked
	// or expired grant; its cause says which): a stream ends with it.
	// Background for the owner.
	ctx context.Context
}

// participant reports whether p is a participant (not the owner).
func (p principal) participant() bool { return p.grant != nil }

// canPost reports whether p may post (and react): the owner and
// commenters, never through a ticket.
func (p principal) canPost() bool {
	return !p.ticket && (p.role == chatrelay.Owner || p.role == chatrelay.Commenter)
}

// author is who p's posts are written as: the kind the owner's body
// chose, or a participant's "p:<id>".
func (p principal) author() chatrelay.Author {
	if p.grant != nil {
		return p.grant.Author()
	}
	return chatrelay.Operator
}

// view is what p sees: a participant's view is redacted.
func (p principal) view(v view) view {
	v.redact = p.participant()
	return v
}

// who says which principals a route takes.
type who uint8

const (
	ownerOnly who = iota // the thread's token only: a participant gets 403 not_permitted
	members              // the owner and every participant
	writers              // the owner and commenters: a viewer gets 403 not_permitted
)

func (w who) String() string {
	return [...]string{"owner", "members", "writers"}[w]
}

// allows reports whether w takes p, or the refusal.
func (w who) allows(p principal) error {
	switch {
	case w == ownerOnly && p.role != chatrelay.Owner:
		return chatrelay.Errorf(chatrelay.NotPermitted, "a participant may not use this route: it is the conversation owner's")
	case w == writers && !p.canPost():
		if p.ticket {
			return chatrelay.Errorf(chatrelay.InvalidTicket, "a ticket is read-only; post with the token")
		}
		return chatrelay.Errorf(chatrelay.NotPermitted, "a viewer may read this conversation but not write to it")
	}
	return nil
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
	if !ok {
		return principal{}, chatrelay.Errorf(chatrelay.Unauthorized, "Authorization must be Bearer chp_… (a share link's token); the owner sends X-Chat-Token")
	}
	return s.participant(r, token)
}

// parseBearer reads "Bearer <share token>" (the scheme in any case, one
// or more spaces). ok is false for anything else.
func parseBearer(h string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(rest, " ")
	if !chatrelay.ValidShareToken(token) {
		return "", false
	}
	return token, true
}

// participant resolves a share token to its participant, refusing a
// revoked or expired grant (and auditing the refusal), and auditing its
// first use.
func (s *Server) participant(r *http.Request, token string) (principal, error) {
	if s.parts == nil {
		return principal{}, chatrelay.Errorf(chatrelay.Unauthorized, "this server keeps no share links")
	}
	thread, g, err := s.parts.Resolve(r.Context(), chatrelay.DigestOf(token))
	if err != nil {
		return principal{}, err
	}
	noteThread(r, thread)
	if err := s.grantRefusal(r.Context(), thread, g); err != nil {
		s.audit(r, thread, chatrelay.AuditEvent{Event: chatrelay.AuditRefused, Participant: g.ID, Code: chatrelay.CodeOf(err)})
		return principal{}, err
	}
	if !g.Used {
		if first, err := s.parts.MarkUsed(r.Context(), thread, g.ID); err == nil && first {
			s.audit(r, thread, chatrelay.AuditEvent{Event: chatrelay.AuditFirstUse, Participant: g.ID})
		}
	}
	noteParticipant(r, thread, g.ID)
	return principal{thread: thread, role: g.Role, grant: &g, ctx: context.Background()}, nil
}

// grantRefusal is the refusal of a grant that is not active: token_revoked
// or token_expired (an expiry is audited once, when first noticed).
func (s *Server) grantRefusal(ctx context.Context, thread string, g chatrelay.Grant) error {
	err := chatrelay.GrantRefusal(g, s.cfg.Now())
	if errors.Is(err, chatrelay.ErrLinkExpired) {
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
