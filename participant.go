package chatrelay

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Participants (contract Part 3): the owner of a thread (whoever holds its
// token) invites people or agents with share links. Each link is one
// grant: one participant, one role, until it expires or is revoked.

// Role is what a participant may do.
type Role string

// The roles. The owner is not a grant's role but a principal's.
const (
	Owner     Role = "owner"
	Viewer    Role = "viewer"    // reads
	Commenter Role = "commenter" // reads and posts
)

// Kind says whether a participant is a person or an agent.
type Kind string

// The participant kinds.
const (
	Human     Kind = "human"
	AgentKind Kind = "agent"
)

const sharePrefx = "chp_"

// GrantState is where a grant stands.
type GrantState string

// The grant states.
const (
	Active  GrantState = "active" // a grant whose cap is spent stays active
	Revoked GrantState = "revoked"
	Lapsed  GrantState = "expired"
)

// Participant is the participant object of every answer that shows one:
// never with its token or digest.
type Participant struct {
	ID        string     `json:"id"` // "p_" + 8 lowercase hex
	Name      string     `json:"name"`
	Kind      Kind       `json:"kind"`
	Role      Role       `json:"role"`
	CreatedAt int64      `json:"created_at"`
	ExpiresAt int64      `json:"expires_at"`
	State     GrantState `json:"state"`
	Cap       int        `json:"cap"`
	Sent      int        `json:"sent"`
}

// Grant is a participant as the store keeps it: the participant object
// and the SHA-256 digest of its share token, when it was revoked, and
// whether it was ever used.
type Grant struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Kind      Kind   `json:"kind"`
	Role      Role   `json:"role"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at"`
	RevokedAt int64  `json:"revoked_at,omitempty"`
	Cap       int    `json:"cap"`
	Sent      int    `json:"sent"`
	Digest    string `json:"digest"` // hex SHA-256 of the share token
	Used      bool   `json:"used,omitempty"`
	// LastSeen is a device's latest request (epoch ms; to
	// DeviceSeenEvery); 0 before its first, and for a participant.
	LastSeen int64 `json:"last_seen,omitempty"`
	// ExpiryNoted says the expiry was audited (once, when first noticed).
	ExpiryNoted bool `json:"expiry_noted,omitempty"`
}

// StateAt is the grant's state at now.
func (g *Grant) StateAt(now time.Time) GrantState {
	switch {
	case g.RevokedAt != 0:
		return Revoked
	case now.UnixMilli() >= g.ExpiresAt:
		return Lapsed
	}
	return Active
}

// Participant is the grant's public object at now.
func (g *Grant) Participant(now time.Time) Participant {
	return Participant{ID: g.ID, Name: g.Name, Kind: g.Kind, Role: g.Role, CreatedAt: g.CreatedAt,
		ExpiresAt: g.ExpiresAt, State: g.StateAt(now), Cap: g.Cap, Sent: g.Sent}
}

// Author is the stored author of the participant's messages: "p:" + id.
func (g *Grant) Author() Author { return Author("p:" + g.ID) }

// NewShareToken returns a fresh share token ("chp_" + 43 base64url
// characters of 32 random bytes) and its digest (hex SHA-256).
func NewShareToken() (token, digest string) {
	token = newSecret(sharePrefx)
	return token, DigestOf(token)
}

// DigestOf is the hex SHA-256 of a share token: what the store keeps.
func DigestOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ValidShareToken reports whether s has the form of a share token.
func ValidShareToken(s string) bool { return validSecret(s, sharePrefx) }

// NewParticipantID returns a fresh "p_" + 8 lowercase hex.
func NewParticipantID() string { return newID("p_", 4) }

// ValidParticipantID reports whether s has the form of a participant id.
func ValidParticipantID(s string) bool { return validID(s, "p_", 4) }

// cleanedAway says what cleaning a name takes away, in a refusal of one
// with nothing left.
const cleanedAway = "([ ] < > and invisible format characters are removed, control characters, blank fillers and white space trimmed)"

// CleanName cleans a participant's name as the contract says: control
// characters and line breaks become spaces, [ ] < > and invisible format
// characters (Unicode's Cf: bidi controls such as U+202E, zero width
// characters, U+FEFF) are removed, blank fillers (the Hangul fillers,
// U+2800) are white space, runs of white space become one space,
// the ends are trimmed, and it is cut to 64 code points. It returns
// InvalidName if nothing is left, or if name is not valid UTF-8. So no name can forge an attribution
// line, draw itself reversed, or pass for another by an invisible
// difference.
func CleanName(name string) (string, error) {
	if !utf8.ValidString(name) { // as the API refuses it: no name the user never wrote
		return "", Errorf(InvalidName, "the name is not valid UTF-8")
	}
	s := cleanName(name, LimitName.Max)
	if s == "" {
		return "", Errorf(InvalidName, "the name is empty once cleaned "+cleanedAway)
	}
	return s, nil
}

// blank reports whether r is drawn as nothing though Unicode calls it a
// letter or a symbol: the Hangul fillers and the blank Braille pattern,
// with which a name would look empty or pass for another. Cleaning takes
// them as white space.
func blank(r rune) bool {
	switch r {
	case '\u115f', '\u1160', '\u3164', '\uffa0', '\u2800':
		return true
	}
	return false
}

// cleanName is CleanName's cleaning, cut to max code points ("" if
// nothing is left): an attachment's name is cleaned the same way.
func cleanName(name string, max int) string {
	if !utf8.ValidString(name) {
		name = strings.ToValidUTF8(name, " ")
	}
	var b strings.Builder
	space := false
	for _, r := range name {
		switch {
		case r == '[' || r == ']' || r == '<' || r == '>' || unicode.Is(unicode.Cf, r):
			continue
		case unicode.IsControl(r) || unicode.IsSpace(r) || r == '\u2028' || r == '\u2029' || blank(r):
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	s := b.String()
	if r := []rune(s); len(r) > max {
		cut := string(r[:max])
		if len(cut) < len(s) && s[len(cut)] != ' ' {
			// The cut splits a word. A secret in it, cut, would no
			// longer have its shape (a token of fixed length, a URL's
			// password without its "@"), and a participant, who reads
			// the name redacted, would read part of it: the word is cut
			// before its first secret (where its redaction starts to
			// differ: a cleaned name holds no "["). The word is read
			// with the one before it first, as a bearer credential's
			// shape ("Bearer <token>") starts a word earlier; a secret
			// wholly in that word is not the cut's concern.
			start := strings.LastIndexByte(cut, ' ') + 1
			end := len(cut) + strings.IndexByte(s[len(cut):]+" ", ' ')
			from := start
			if start > 0 {
				from = strings.LastIndexByte(cut[:start-1], ' ') + 1
			}
			for _, at := range []int{from, start} {
				text := s[at:end]
				r := Redact(text)
				l := 0
				for l < len(text) && l < len(r) && text[l] == r[l] {
					l++
				}
				for l > 0 && l < len(text) && !utf8.RuneStart(text[l]) {
					l--
				}
				if r == text || at+l >= start {
					if r != text && at+l < len(cut) {
						cut = cut[:at+l]
					}
					break
				}
			}
		}
		s = strings.TrimSpace(cut)
	}
	return s
}

// Invite is what the owner asks for: a participant's name, role, kind,
// life and cap (zero values take the defaults).
type Invite struct {
	Name      string
	Role      Role
	Kind      Kind
	ExpiresIn time.Duration
	Cap       int
}

// orOneOf fills an empty *v with def, then answers refused unless *v is
// one of allowed: a field of a few values with a default.
func orOneOf[T ~string](v *T, def T, refused error, allowed ...T) error {
	if *v == "" {
		*v = def
	}
	if !slices.Contains(allowed, *v) {
		return refused
	}
	return nil
}

// Check cleans the name, fills the defaults and checks the rest, with the
// contract's codes.
func (in *Invite) Check() error {
	name, err := CleanName(in.Name)
	if err != nil {
		return err
	}
	in.Name = name
	if err := orOneOf(&in.Role, Commenter, Errorf(InvalidRole, `role is "viewer" or "commenter"`), Viewer, Commenter); err != nil {
		return err
	}
	if err := orOneOf(&in.Kind, Human, Errorf(InvalidKind, `kind is "human" or "agent"`), Human, AgentKind); err != nil {
		return err
	}
	if in.ExpiresIn == 0 {
		in.ExpiresIn = DefaultExpiresIn
	}
	lo, hi := LimitExpiresIn.Duration()
	if in.ExpiresIn < lo || in.ExpiresIn > hi || in.ExpiresIn%time.Second != 0 {
		return Errorf(InvalidExpiry, "expires_in is %d … %d seconds", LimitExpiresIn.Min, LimitExpiresIn.Max)
	}
	if in.Cap == 0 {
		in.Cap = DefaultCap
	}
	if in.Cap < LimitCap.Min || in.Cap > LimitCap.Max {
		return Errorf(InvalidCap, "cap is %d … %d", LimitCap.Min, LimitCap.Max)
	}
	return nil
}

// Grant makes the grant of a checked invite at now, with a fresh id and
// token; the token is returned once and never kept.
func (in Invite) Grant(now time.Time) (Grant, string) {
	token, digest := NewShareToken()
	return Grant{ID: NewParticipantID(), Name: in.Name, Kind: in.Kind, Role: in.Role,
		CreatedAt: now.UnixMilli(), ExpiresAt: now.Add(in.ExpiresIn).UnixMilli(), Cap: in.Cap, Digest: digest}, token
}

// AuditEvent is one event of a thread's audit trail: never a token, a
// digest or a message text. It names a participant or a device
// (Grant.AuditOf).
type AuditEvent struct {
	At          int64  `json:"at"`
	Event       string `json:"event"`                 // issued, revoked, expired, refused, first_use, upload; device_issued, device_revoked, device_expired, device_first_use
	Participant string `json:"participant,omitempty"` // a participant's event: its id
	Device      string `json:"device,omitempty"`      // a device's event: its id
	Code        Code   `json:"code,omitempty"`
	IP          string `json:"ip,omitempty"`
}

// The audit events.
const (
	AuditIssued   = "issued"
	AuditRevoked  = "revoked"
	AuditExpired  = "expired"
	AuditRefused  = "refused"
	AuditFirstUse = "first_use"
	AuditUpload   = "upload" // a participant uploaded an attachment (Part 5)
)
