package transport

import (
	"github.com/chatrelay/chatrelay"

	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// Tickets are read-only, thread-scoped, expiring credentials for browsers,
// which cannot set X-Chat-Token on EventSource or WebSocket:
//
//	t1.<thread>.<expires epoch ms>.<base64url HMAC-SHA256 of "t1.<thread>.<expires>">
//
// They carry the thread (not secret: it is a hash of the token) and never
// the token. They subscribe and can never post.
type tickets struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

const ticketVersion = "t1"

func (t tickets) mint(thread string) (string, int64) {
	exp := t.now().Add(t.ttl).UnixMilli()
	body := ticketVersion + "." + thread + "." + strconv.FormatInt(exp, 10)
	return body + "." + t.sign(body), exp
}

func (t tickets) sign(body string) string {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(body))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// check returns the thread a ticket grants, or InvalidTicket.
func (t tickets) check(ticket string) (string, error) {
	bad := func(why string) error { return chatrelay.Errorf(chatrelay.InvalidTicket, "invalid ticket: %s", why) }
	i := strings.LastIndexByte(ticket, '.')
	if i < 0 || len(ticket) > 128 {
		return "", bad("malformed")
	}
	body, mac := ticket[:i], ticket[i+1:]
	if !hmac.Equal([]byte(mac), []byte(t.sign(body))) {
		return "", bad("signature does not match")
	}
	parts := strings.Split(body, ".")
	if len(parts) != 3 || parts[0] != ticketVersion || !chatrelay.ValidThread(parts[1]) {
		return "", bad("malformed")
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return "", bad("malformed")
	}
	if t.now().UnixMilli() >= exp {
		return "", bad("expired")
	}
	return parts[1], nil
}

// ticketAnswer is the 201 of POST /api/chat/ticket.
type ticketAnswer struct {
	Success   bool   `json:"success"`
	Ticket    string `json:"ticket"`
	Thread    string `json:"thread"`
	ExpiresAt int64  `json:"expires_at"`
}
