package webpush

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Urgency values (RFC 8030 §5.3).
const (
	UrgencyHigh   = "high"
	UrgencyNormal = "normal"
)

// MaxTopic is the longest Topic header (RFC 8030 §5.4: at most 32
// characters of the base64url alphabet).
const MaxTopic = 32

// ValidTopic reports whether t may be a Topic: 1 … 32 characters of the
// URL- and filename-safe base64 alphabet.
func ValidTopic(t string) bool {
	if t == "" || len(t) > MaxTopic {
		return false
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Message is one push: where it goes and what it carries.
type Message struct {
	Endpoint *url.URL
	Keys     Keys
	Payload  []byte // at most MaxPayload bytes, encrypted by Send
	TTL      int    // seconds the push service keeps it for a device that is offline
	Urgency  string // UrgencyHigh or UrgencyNormal
	Topic    string // "" or ValidTopic: a later push with the same topic replaces an undelivered one
}

// Result is what a push service answered.
type Result struct {
	Status     int
	RetryAfter time.Duration // its Retry-After, 0 if none
}

// Sender sends pushes. Its fields are set before use; Send is safe for
// concurrent use.
type Sender struct {
	VAPID  *VAPID
	Client *http.Client     // NewClient's
	Now    func() time.Time // defaults to time.Now
}

// NewClient is the HTTP client of pushes: every connection through
// guard's DialContext, no proxy (a proxy would dial for us, unguarded),
// no redirect followed, 30 s per request. roots, if not nil, replaces the
// system's certificate authorities (tests).
func NewClient(guard *Guard, roots *tls.Config) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           guard.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 25 * time.Second,
		TLSClientConfig:       roots,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Send encrypts m's payload for its subscription, signs the request with
// VAPID and posts it. It returns the push service's answer; an error is
// a push that never got one (it could not be made, or the connection
// failed or was refused by the Guard).
func (s *Sender) Send(ctx context.Context, m Message) (Result, error) {
	if m.Topic != "" && !ValidTopic(m.Topic) {
		return Result{}, fmt.Errorf("webpush: topic %q is not 1 … 32 base64url characters", m.Topic)
	}
	body, err := Encrypt(m.Payload, m.Keys)
	if err != nil {
		return Result{}, err
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	auth, err := s.VAPID.Authorization(m.Endpoint, now())
	if err != nil {
		return Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.Endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return Result{}, err
	}
	h := req.Header
	h.Set("Authorization", auth)
	h.Set("Content-Encoding", "aes128gcm")
	h.Set("Content-Type", "application/octet-stream")
	h.Set("TTL", strconv.Itoa(max(m.TTL, 0)))
	if m.Urgency != "" {
		h.Set("Urgency", m.Urgency)
	}
	if m.Topic != "" {
		h.Set("Topic", m.Topic)
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return Result{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now())}, nil
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// IsBlocked reports whether err is a push the Guard refused to dial.
func IsBlocked(err error) bool { return errors.Is(err, ErrBlocked) }
