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
//
// They carry the thread (not secret: it is a hash of the token) and never
// the token. They subscribe and can never post. A t2 ticket names its
// grant, and dies with it (a revoked or expired grant refuses its
// tickets).
type tickets struct {
	key  []byte // the key given; empty: this server issues no tickets
	ttl  time.Duration
	now  func() time.Time
	ring *keyRing // where the key may change (Config.TicketKeys); nil: key is fixed
}

// mint returns a ticket for thread (for the participant pid, if not "")
// and its expiry.
func (t tickets) mint(thread, pid string) (string, int64) {
	key := t.key
	if t.ring != nil {
		key = t.ring.current()
	}
	exp := t.now().Add(t.ttl).UnixMilli()
	body := "t1." + thread + "." + strconv.FormatInt(exp, 10)
	if pid != "" {
		body = "t2." + thread + "." + pid + "." + strconv.FormatInt(exp, 10)
	}
	return body + "." + signWith(key, body), exp
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
// t2 ticket), or InvalidTicket. A signature that does not match the key
// held is checked again with the key read anew, if it may have changed
// (TicketKeys) and was not read in the last ticketRefresh.
func (t tickets) check(ticket string) (thread, pid string, err error) {
	bad := func(why string) error { return chatrelay.Errorf(chatrelay.InvalidTicket, "invalid ticket: %s", why) }
	i := strings.LastIndexByte(ticket, '.')
	if i < 0 || len(ticket) > 160 {
		return "", "", bad("malformed")
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
			return "", "", bad("signature does not match")
		}
	}
	parts := strings.Split(body, ".")
	switch {
	case len(parts) == 3 && parts[0] == "t1":
	case len(parts) == 4 && parts[0] == "t2" && chatrelay.ValidGrantID(parts[2]):
		pid = parts[2]
	default:
		return "", "", bad("malformed")
	}
	if !chatrelay.ValidThread(parts[1]) {
		return "", "", bad("malformed")
	}
	exp, err := strconv.ParseInt(parts[len(parts)-1], 10, 64)
	if err != nil {
		return "", "", bad("malformed")
	}
	if t.now().UnixMilli() >= exp {
		return "", "", bad("expired")
	}
	return parts[1], pid, nil
}

// ticketAnswer is the 201 of POST /api/chat/ticket.
type ticketAnswer struct {
	Success   bool   `json:"success"`
	Ticket    string `json:"ticket"`
	Thread    string `json:"thread"`
	ExpiresAt int64  `json:"expires_at"`
}
