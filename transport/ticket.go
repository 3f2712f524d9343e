package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
)

// Tickets are read-only, thread-scoped, expiring credentials for browsers,
// which cannot set X-Chat-Token on EventSource or WebSocket:
//
//	t1.<thread>.<expires epoch ms>.<base64url HMAC-SHA256 of "t1.<thread>.<expires>">
//	t2.<thread>.<grant id>.<expires>.<HMAC of the rest>   (minted from a share link or a device)
//	f1.<thread>.<attachment id>.<expires>.<HMAC of the rest>
//	f2.<thread>.<grant id>.<attachment id>.<expires>.<HMAC of the rest>
//
// They carry the thread (not secret: it is a hash of the token) and never
// the token. They subscribe and can never post. A t2 or f2 ticket names
// its grant, and dies with it (a revoked or expired grant refuses its
// tickets). An f ticket (a file ticket) opens one attachment's bytes and
// nothing else: the page puts it in the address of an <img> or a link,
// which a person may copy and paste elsewhere, and that address must not
// open the conversation (the thread's stream) too.
type tickets struct {
	key  []byte // the key given; empty: this server issues no tickets
	ttl  time.Duration
	now  func() time.Time
	ring *keyRing // where the key may change (Config.TicketKeys); nil: key is fixed
}

// mint returns a ticket for thread (for the participant pid, if not "";
// for the one attachment file, if not "") and its expiry.
func (t tickets) mint(thread, pid, file string) (string, int64) {
	key := t.key
	if t.ring != nil {
		key = t.ring.current()
	}
	exp := t.now().Add(t.ttl).UnixMilli()
	kind, parts := "t", []string{thread}
	if file != "" {
		kind = "f"
	}
	if pid == "" {
		kind += "1"
	} else {
		kind += "2"
		parts = append(parts, pid)
	}
	if file != "" {
		parts = append(parts, file)
	}
	body := kind + "." + strings.Join(parts, ".") + "." + strconv.FormatInt(exp, 10)
	return body + "." + signWith(key, body), exp
}

// fileTicket reports whether ticket has the shape of a file ticket (one
// that opens one attachment), signed or not: for the words of a refusal.
func fileTicket(ticket string) bool {
	return strings.HasPrefix(ticket, "f1.") || strings.HasPrefix(ticket, "f2.")
}

// sign signs body with the key held now.
func (t tickets) sign(body string) string {
	if t.ring != nil {
		return signWith(t.ring.held(), body)
	}
	return signWith(t.key, body)
}

func signWith(key []byte, body string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// check returns the thread a ticket grants (and its participant, for a
// t2 or f2 ticket; the one attachment it opens, for a file ticket), or
// InvalidTicket. A signature that does not match the key
// held is checked again with the key read anew, if it may have changed
// (TicketKeys) and was not read in the last ticketRefresh.
func (t tickets) check(ticket string) (thread, pid, file string, err error) {
	bad := func(why string) error { return chatrelay.Errorf(chatrelay.InvalidTicket, "invalid ticket: %s", why) }
	i := strings.LastIndexByte(ticket, '.')
	if i < 0 || len(ticket) > 160 {
		return "", "", "", bad("malformed")
	}
	body, mac := ticket[:i], ticket[i+1:]
	key := t.key
	if t.ring != nil {
		key = t.ring.held()
	}
	if !hmac.Equal([]byte(mac), []byte(signWith(key, body))) {
		ok := false
		if t.ring != nil {
			if fresh := t.ring.current(); !bytes.Equal(fresh, key) {
				ok = hmac.Equal([]byte(mac), []byte(signWith(fresh, body)))
			}
		}
		if !ok {
			return "", "", "", bad("signature does not match")
		}
	}
	parts := strings.Split(body, ".")
	switch {
	case len(parts) == 3 && parts[0] == "t1":
	case len(parts) == 4 && parts[0] == "t2" && chatrelay.ValidGrantID(parts[2]):
		pid = parts[2]
	case len(parts) == 4 && parts[0] == "f1" && chatrelay.AttachmentIDPattern.MatchString(parts[2]):
		file = parts[2]
	case len(parts) == 5 && parts[0] == "f2" && chatrelay.ValidGrantID(parts[2]) && chatrelay.AttachmentIDPattern.MatchString(parts[3]):
		pid, file = parts[2], parts[3]
	default:
		return "", "", "", bad("malformed")
	}
	if !chatrelay.ValidThread(parts[1]) {
		return "", "", "", bad("malformed")
	}
	exp, err := strconv.ParseInt(parts[len(parts)-1], 10, 64)
	if err != nil {
		return "", "", "", bad("malformed")
	}
	if t.now().UnixMilli() >= exp {
		return "", "", "", bad("expired")
	}
	return parts[1], pid, file, nil
}

// ticketAnswer is the 201 of POST /api/chat/ticket.
type ticketAnswer struct {
	Success   bool   `json:"success"`
	Ticket    string `json:"ticket"`
	Thread    string `json:"thread"`
	ExpiresAt int64  `json:"expires_at"`
	// Attachment is the one file a file ticket opens; absent for a
	// thread's ticket.
	Attachment string `json:"attachment,omitempty"`
}
