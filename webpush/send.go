package webpush

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
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
// no redirect followed (Sender.Do bounds each request to 30 s:
// the client has no Timeout, see Do). roots, if not nil, replaces the
// system's certificate authorities (tests). A push service that offers
// HTTP/2 (FCM, autopush and Apple's do) gets one connection, kept alive,
// that carries every push to it at once: the first request to an origin
// goes alone (firstContact), so that the pushes due together do not each
// dial before the transport knows the origin speaks HTTP/2. One that
// speaks HTTP/1.1 gets at most 16 connections.
func NewClient(guard *Guard, roots *tls.Config) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           guard.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		MaxConnsPerHost:       16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 25 * time.Second,
		TLSClientConfig:       roots,
	}
	return &http.Client{
		Transport:     &firstContact{next: tr, answered: map[string]chan struct{}{}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// maxOrigins bounds the origins firstContact remembers: past it, a new
// origin's requests are not held back (they may dial at once, as the
// transport does on its own).
const maxOrigins = 1024

// firstContact holds a request to an origin while the first one to it
// is under way, until that one has its connection (GotConn: dialled, and
// TLS has said whether the origin speaks HTTP/2, when every later request
// goes over it) or ends. It held them until the first was answered: a
// push service that took its time over that answer (every browser's
// subscriptions share one origin, FCM's for Chrome) held every other push
// to it for as long, up to ResponseHeaderTimeout.
type firstContact struct {
	next     http.RoundTripper
	mu       sync.Mutex
	answered map[string]chan struct{} // origin → closed once a request to it was answered
}

func (f *firstContact) RoundTrip(req *http.Request) (*http.Response, error) {
	origin := req.URL.Scheme + "://" + req.URL.Host
	f.mu.Lock()
	done, ok := f.answered[origin]
	if !ok && len(f.answered) < maxOrigins {
		done = make(chan struct{})
		f.answered[origin] = done
		f.mu.Unlock()
		var once sync.Once
		connected := func() { once.Do(func() { close(done) }) }
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected() }}
		resp, err := f.next.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil { // the next request to it is the first again
			f.mu.Lock()
			delete(f.answered, origin)
			f.mu.Unlock()
		}
		connected()
		return resp, err
	}
	f.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return f.next.RoundTrip(req)
}

// CloseIdleConnections closes the transport's idle connections.
func (f *firstContact) CloseIdleConnections() {
	if c, ok := f.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Send encrypts m's payload for its subscription, signs the request with
// VAPID and posts it. It returns the push service's answer; an error is
// a push that never got one (it could not be made, or the connection
// failed or was refused by the Guard). It is Request then Do.
func (s *Sender) Send(ctx context.Context, m Message) (Result, error) {
	req, err := s.Request(ctx, m)
	if err != nil {
		return Result{}, err
	}
	return s.Do(req)
}

// Request makes m's request: its payload encrypted for its subscription
// (a fresh ECDH key pair and salt, RFC 8291), signed with VAPID. It is
// Send's CPU work (about 150 µs; the VAPID JWT is signed once per push
// service origin and reused), apart from Do's network round trip, so
// that a caller can bound how much of it runs at once.
func (s *Sender) Request(ctx context.Context, m Message) (*http.Request, error) {
	if m.Topic != "" && !ValidTopic(m.Topic) {
		return nil, fmt.Errorf("webpush: topic %q is not 1 … 32 base64url characters", m.Topic)
	}
	body, err := Encrypt(m.Payload, m.Keys)
	if err != nil {
		return nil, err
	}
	auth, err := s.VAPID.Authorization(m.Endpoint, s.now())
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.Endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
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
	return req, nil
}

// requestTimeout bounds a push request, from Do's call to the end of
// the answer's body.
var requestTimeout = 30 * time.Second

// Do posts a request Request made and returns the push service's
// answer, within requestTimeout. The bound is the request's context's
// deadline, not the http.Client's Timeout: with a Timeout, a client whose
// transport is not net/http's own (NewClient's is firstContact) also
// starts a goroutine, a cancel channel and a second timer to cancel each
// request, for every push (the context's copy of the request and its one
// timer are Do's own cost either way).
func (s *Sender) Do(req *http.Request) (Result, error) {
	ctx, cancel := context.WithTimeout(req.Context(), requestTimeout)
	defer cancel()
	resp, err := s.Client.Do(req.WithContext(ctx))
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return Result{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), s.now())}, nil
}

func (s *Sender) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date. A
// number of seconds longer than a Duration holds is the longest Duration
// (not a wrapped, negative one, nor none).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(math.MaxInt64/int64(time.Second)) {
			return math.MaxInt64
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// IsBlocked reports whether err is a push the Guard refused to dial.
func IsBlocked(err error) bool { return errors.Is(err, ErrBlocked) }
