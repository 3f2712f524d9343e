package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/store"
)

// The participant routes (contract Part 3): invite, list, revoke, audit,
// whoami; and the registry that ends a participant's streams within a
// second of a revoke or an expiry, wherever the revoke happened.

// liveGrants holds the grants that have open streams here: each with a
// context that its streams end with, cancelled (with chatrelay.ErrLinkRevoked or
// chatrelay.ErrLinkExpired) when the store's feed says the thread's participants
// changed and the grant is no longer active, or when its expiry timer
// fires. It is safe for concurrent use.
type liveGrants struct {
	s  *Server
	mu sync.Mutex // guards m
	m  map[string]*liveGrant
	// noting is held (write) while an expiry is noted and audited here;
	// one who finds an expiry noted takes it (read) first, so that what
	// follows (a refusal, a stream's end) comes after the audit event.
	noting sync.RWMutex
}

type liveGrant struct {
	thread, id string
	ctx        context.Context
	cancel     context.CancelCauseFunc
	refs       int
	timer      interface{ Stop() bool }
}

func grantKey(thread, id string) string { return thread + " " + id }

// acquire returns the context of a participant's stream and a release
// to call when the stream ends.
func (l *liveGrants) acquire(thread string, g chatrelay.Grant) (context.Context, func()) {
	key := grantKey(thread, g.ID)
	l.mu.Lock()
	defer l.mu.Unlock()
	lg := l.m[key]
	if lg == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		lg = &liveGrant{thread: thread, id: g.ID, ctx: ctx, cancel: cancel}
		wait := time.UnixMilli(g.ExpiresAt).Sub(l.s.cfg.Now())
		lg.timer = l.s.cfg.AfterFunc(wait, func() { l.expire(thread, g) })
		l.m[key] = lg
	}
	lg.refs++
	var once sync.Once
	return lg.ctx, func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if lg.refs--; lg.refs == 0 {
				lg.timer.Stop()
				lg.cancel(nil)
				if l.m[key] == lg {
					delete(l.m, key)
				}
			}
		})
	}
}

// end cancels the streams of a grant with cause.
func (l *liveGrants) end(thread, id string, cause error) {
	l.mu.Lock()
	lg := l.m[grantKey(thread, id)]
	l.mu.Unlock()
	if lg != nil {
		lg.cancel(cause)
	}
}

// expiryAuditWait is how long an expiry waits at most for its audit
// before ending the grant's streams: a store slower than that does not
// hold them open past the contract's second.
const expiryAuditWait = 500 * time.Millisecond

// expire runs at a grant's expiry: the expiry is audited (once for every
// node and process), then its streams end. Audited first, so that one who
// sees a stream end finds the expiry in the audit (the store records that
// an expiry was noticed before it appends the event: a request refused
// meanwhile writes none), unless the store takes longer than
// expiryAuditWait; the audit then lands a little after.
func (l *liveGrants) expire(thread string, g chatrelay.Grant) {
	noted := make(chan struct{})
	go func() { // ends with the store's calls (each bounded by the store)
		defer close(noted)
		l.s.noteExpired(context.Background(), thread, g)
	}()
	wait := time.NewTimer(expiryAuditWait)
	defer wait.Stop()
	select {
	case <-noted:
	case <-wait.C:
	}
	l.end(thread, g.ID, chatrelay.ErrLinkExpired)
}

// recheck looks again at the grants of thread that have streams here,
// after the feed said its participants changed: a grant no longer active
// ends its streams.
func (l *liveGrants) recheck(thread string) {
	l.mu.Lock()
	var ids []string
	for _, lg := range l.m {
		if lg.thread == thread {
			ids = append(ids, lg.id)
		}
	}
	l.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	grants, err := l.s.parts.Grants(ctx, thread)
	for _, id := range ids {
		if err != nil { // unreadable, or gone with its thread: fail closed
			if chatrelay.CodeOf(err) == chatrelay.StoreUnavailable {
				continue
			}
			l.end(thread, id, chatrelay.ErrLinkRevoked)
			continue
		}
		found := false
		for _, g := range grants {
			if g.ID != id {
				continue
			}
			found = true
			if cause := l.s.grantRefusal(ctx, thread, g); cause != nil {
				l.end(thread, id, cause)
			}
		}
		if !found {
			l.end(thread, id, chatrelay.ErrLinkRevoked)
		}
	}
}

// noteExpired audits a grant's expiry the first time it is noticed. The
// store records that an expiry was noticed, then the event is appended:
// in between, this process's other callers (the feed's recheck that the
// record's change sets off, a request with the token) wait here, so none
// refuses the grant or ends its streams before the event is in the audit.
// (Another process or node may, for that moment.)
func (s *Server) noteExpired(ctx context.Context, thread string, g chatrelay.Grant) {
	if s.parts == nil {
		return
	}
	if g.ExpiryNoted {
		s.live.noting.RLock()
		//lint:ignore SA2001 a barrier: waits for the noting in progress, if any
		s.live.noting.RUnlock()
		return
	}
	s.live.noting.Lock()
	defer s.live.noting.Unlock()
	if first, err := s.parts.NoteExpired(ctx, thread, g.ID); err == nil && first {
		s.auditGrant(nil, thread, g, chatrelay.AuditExpired, "")
	}
}

// NoteExpiries notices the expiry of every grant past it that nothing
// has noticed yet (no stream of it was open at its expiry, no request
// came with its token since): each is audited and, a participant's, is
// its participant.revoked webhook event, once, as when a request notices
// it. The server runs it with each retention sweep, so that a share link
// nobody uses after its expiry still ends with its event. A thread whose
// grants cannot be read is skipped (its share links are refused anyway).
func (s *Server) NoteExpiries(ctx context.Context) error {
	if s.parts == nil {
		return nil
	}
	infos, err := s.store.Threads(ctx)
	if err != nil {
		return err
	}
	for _, info := range infos {
		grants, err := s.parts.Grants(ctx, info.Thread)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		now := s.cfg.Now()
		for _, g := range grants {
			if !g.ExpiryNoted && g.StateAt(now) == chatrelay.Lapsed {
				s.noteExpired(ctx, info.Thread, g)
			}
		}
	}
	return nil
}

// Sweep notices the share links and devices that expired unnoticed
// (NoteExpiries), then runs the store's retention sweep (store.Store.Sweep).
// In that order: a thread the sweep removes takes its grants with it, so an
// expiry looked for after it would find no grant, and the link would end
// with no participant.revoked event.
func (s *Server) Sweep(ctx context.Context) (store.SweepStats, error) {
	var err error
	if nerr := s.NoteExpiries(ctx); nerr != nil {
		err = fmt.Errorf("expiries: %w", nerr)
	}
	stats, serr := s.store.Sweep(ctx)
	return stats, errors.Join(err, serr)
}

// inviteBody is the body of POST /api/chat/participants.
type inviteBody struct {
	Name      *name           `json:"name"`
	Role      *string         `json:"role"`
	Kind      *string         `json:"kind"`
	ExpiresIn json.RawMessage `json:"expires_in"`
	Cap       json.RawMessage `json:"cap"`
}

// inviteAnswer is the 201 of an invite: the token and link are shown this
// once. qr is the link as a QR code (a PNG data URL), for the page.
type inviteAnswer struct {
	Success     bool                  `json:"success"`
	Participant chatrelay.Participant `json:"participant"`
	Token       string                `json:"token"`
	Link        string                `json:"link"`
	QR          string                `json:"qr,omitempty"` // absent for a link too long for a QR code
}

// handleInvite serves POST /api/chat/participants (the owner).
func (s *Server) handleInvite(w http.ResponseWriter, r *http.Request, p principal) {
	var body inviteBody
	if !s.decodeJSON(w, r, &body) {
		return
	}
	in, err := body.invite()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	inv, err := s.people().Invite(r.Context(), p.thread, in, s.publicBase(r), caller(r, s.cfg.Trusted))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, inviteAnswer{Success: true, Participant: inv.Participant, Token: inv.Token, Link: inv.Link, QR: qrDataURL(inv.Link)})
}

// invite checks the body's fields, with the contract's codes.
func (b inviteBody) invite() (chatrelay.Invite, error) {
	var in chatrelay.Invite
	if b.Name == nil {
		return in, chatrelay.Errorf(chatrelay.InvalidName, "a participant needs a name")
	}
	in.Name = string(*b.Name)
	if b.Role != nil {
		in.Role = chatrelay.Role(*b.Role)
		if in.Role == "" {
			return in, chatrelay.Errorf(chatrelay.InvalidRole, `role is "viewer" or "commenter"`)
		}
	}
	if b.Kind != nil {
		in.Kind = chatrelay.Kind(*b.Kind)
		if in.Kind == "" {
			return in, chatrelay.Errorf(chatrelay.InvalidKind, `kind is "human" or "agent"`)
		}
	}
	var err error
	if in.ExpiresIn, err = expiresIn(b.ExpiresIn, chatrelay.LimitExpiresIn); err != nil {
		return in, err
	}
	if len(b.Cap) > 0 && string(b.Cap) != "null" {
		n, ok := wholeNumber(b.Cap)
		if !ok || n == 0 {
			return in, chatrelay.Errorf(chatrelay.InvalidCap, "cap is an integer, %d … %d", chatrelay.LimitCap.Min, chatrelay.LimitCap.Max)
		}
		in.Cap = int(max(min(n, 1<<40), -1)) // past the limit either way: Check refuses it
	}
	return in, in.Check()
}

// expiresIn reads the expires_in field of a grant's body, whose bounds
// are lim (absent or null: 0, the default). Not an integer, or 0, is
// InvalidExpiry; any other integer is the request's Check's to bound.
func expiresIn(raw json.RawMessage, lim chatrelay.Limit) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	n, ok := wholeNumber(raw)
	if !ok || n == 0 {
		return 0, chatrelay.Errorf(chatrelay.InvalidExpiry, "expires_in is an integer of seconds, %d … %d", lim.Min, lim.Max)
	}
	return time.Duration(max(min(n, 1<<40), -1)) * time.Second, nil
}

// wholeNumber reads raw as an integer as JSON Schema counts one (the
// bundle's "integer", and MCP's arguments): a whole number, also written
// with a fraction or an exponent (3600.0, as Python writes a float; 1e3).
// ok is false for anything else (1.5, a string, past 2^53 written so).
func wholeNumber(raw json.RawMessage) (n int64, ok bool) {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, false
	}
	var num json.Number
	if json.Unmarshal(raw, &num) != nil {
		return 0, false
	}
	if i, err := num.Int64(); err == nil {
		return i, true
	}
	f, err := num.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// publicBase is the base of share links: Config.PublicURL, or the
// request's scheme (https under TLS, or when a trusted proxy says so in
// X-Forwarded-Proto) and Host, with the prefix. A request with no Host
// (HTTP/1.0 allows it) gets the address it reached, its listener's (a
// link-local one with its zone, %25eth0): its base was "http://", and a
// device link "http://d#chd_…".
func (s *Server) publicBase(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimSuffix(s.cfg.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if proto := r.Header.Get("X-Forwarded-Proto"); proto != "" && fromTrusted(r, s.cfg.Trusted) {
		if p := strings.ToLower(strings.TrimSpace(strings.Split(proto, ",")[0])); p == "https" || p == "http" {
			scheme = p
		}
	}
	host := r.Host
	if host == "" {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			// net/url writes a link-local address's zone escaped, as a
			// URL's host needs it: [fe80::1%25eth0]:8080.
			return (&url.URL{Scheme: scheme, Host: a.String()}).String() + s.cfg.Prefix
		}
	}
	return scheme + "://" + host + s.cfg.Prefix
}

// participantsAnswer is the 200 of GET /api/chat/participants.
type participantsAnswer struct {
	Success      bool                    `json:"success"`
	Participants []chatrelay.Participant `json:"participants"`
}

// handleParticipants serves GET /api/chat/participants (the owner): every
// grant, newest first.
func (s *Server) handleParticipants(w http.ResponseWriter, r *http.Request, p principal) {
	ps, err := s.people().List(r.Context(), p.thread)
	s.answer(w, r, participantsAnswer{Success: true, Participants: ps}, err)
}

// participantAnswer is the 200 of a revoke.
type participantAnswer struct {
	Success     bool                  `json:"success"`
	Participant chatrelay.Participant `json:"participant"`
}

// handleRevoke serves DELETE /api/chat/participants/{id} (the owner).
// Revoking again answers the same.
func (s *Server) handleRevoke(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	pp, err := s.people().Revoke(r.Context(), p.thread, id, caller(r, s.cfg.Trusted))
	if err == nil {
		s.live.end(p.thread, id, chatrelay.ErrLinkRevoked) // here at once; other nodes by the feed
	}
	s.answer(w, r, participantAnswer{Success: true, Participant: pp}, err)
}

// auditAnswer is the 200 of GET /api/chat/participants/audit.
type auditAnswer struct {
	Success bool                   `json:"success"`
	Events  []chatrelay.AuditEvent `json:"events"`
}

// handleAudit serves GET /api/chat/participants/audit (the owner).
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request, p principal) {
	events, err := s.people().AuditLog(r.Context(), p.thread)
	s.answer(w, r, auditAnswer{Success: true, Events: events}, err)
}

// member is a participant as whoami lists the others.
type member struct {
	ID   string         `json:"id"`
	Name string         `json:"name"`
	Kind chatrelay.Kind `json:"kind"`
	Role chatrelay.Role `json:"role"`
}

// whoamiAnswer is the 200 of GET /api/chat/whoami.
type whoamiAnswer struct {
	Success      bool                   `json:"success"`
	Thread       string                 `json:"thread"`
	Role         chatrelay.Role         `json:"role"`
	Participant  *chatrelay.Participant `json:"participant"`
	Device       *chatrelay.Device      `json:"device,omitempty"` // the owner's device the caller is
	Participants []member               `json:"participants"`
}

// handleWhoami serves GET /api/chat/whoami (the owner, a device or a
// participant): who the request is, and who else is in the conversation
// (the active grants of participants).
func (s *Server) handleWhoami(w http.ResponseWriter, r *http.Request, p principal) {
	now := s.cfg.Now()
	out := whoamiAnswer{Success: true, Thread: p.thread, Role: p.role, Participants: []member{}}
	switch {
	case p.device():
		d := p.grant.DeviceObject(now)
		out.Device = &d
	case p.participant():
		pp := p.grant.Participant(now)
		pp.Name = chatrelay.RedactTo(pp.Name, chatrelay.LimitName) // names are the owner's words: a participant sees them redacted
		out.Participant = &pp
	}
	grants, err := s.parts.Grants(r.Context(), p.thread)
	if err != nil { // fails closed, the owner's too: the list needs the record
		s.writeError(w, r, err)
		return
	}
	for _, g := range grants {
		if g.StateAt(now) == chatrelay.Active && !g.Device() { // the owner's devices are no one else's business
			name := g.Name
			if p.participant() {
				name = chatrelay.RedactTo(name, chatrelay.LimitName)
			}
			out.Participants = append(out.Participants, member{g.ID, name, g.Kind, g.Role})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// people is the owner's side of the thread's share links (host.Participants),
// on the server's clock; it needs s.parts.
func (s *Server) people() *host.Participants {
	return &host.Participants{Store: s.parts, Now: s.cfg.Now, Log: s.log}
}

// caller is who makes a request, as the audit records it.
func caller(r *http.Request, trusted []netip.Prefix) host.Caller {
	return host.Caller{IP: clientIP(r, trusted)}
}

// participantsOf is the store's Participants, if it keeps them.
func participantsOf(st store.Store) store.Participants {
	if p, ok := st.(store.Participants); ok {
		return p
	}
	return nil
}
