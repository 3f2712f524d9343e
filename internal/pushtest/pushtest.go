// Package pushtest is a Web Push service for tests: an HTTPS server on
// 127.0.0.1 standing in for FCM or Mozilla's autopush. It decrypts every
// push with the subscription's private keys (RFC 8291, written here
// apart from package webpush, from the RFC's text) and verifies its VAPID
// JWT (RFC 8292: ES256 over the key it names, which must be the server's;
// aud the endpoint's origin; exp within 24 hours).
package pushtest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var b64 = base64.RawURLEncoding

// Subscription is a browser's side of a push subscription: its endpoint
// at the Service and its keys.
type Subscription struct {
	Endpoint string
	Key      *ecdh.PrivateKey
	Auth     []byte
}

// P256dh and AuthKey are the keys as PushSubscription.toJSON gives them.
func (s Subscription) P256dh() string  { return b64.EncodeToString(s.Key.PublicKey().Bytes()) }
func (s Subscription) AuthKey() string { return b64.EncodeToString(s.Auth) }

// JSON is the subscription's body of POST /api/chat/push.
func (s Subscription) JSON() map[string]any {
	return map[string]any{"endpoint": s.Endpoint, "keys": map[string]string{"p256dh": s.P256dh(), "auth": s.AuthKey()}}
}

// Push is one push the Service received, decrypted and checked.
type Push struct {
	Path    string
	Plain   []byte // the decrypted payload
	TTL     string
	Urgency string
	Topic   string
	Claims  map[string]any // the VAPID JWT's claims
	Key     string         // the VAPID public key it named (k=)
	Err     error          // what did not decrypt or verify; nil if all did
	At      time.Time

	held *heldPush // a deferred Service's push as received, until it is checked
}

// heldPush is what a deferred Service keeps of a push to check it later:
// its request as received.
type heldPush struct {
	sub           Subscription
	known         bool // a subscription at the push's path
	method, enc   string
	authorization string
	body          []byte
}

// Answer is what the Service answers a push: a status and headers.
type Answer struct {
	Status  int
	Headers http.Header
}

// Service is the push service. Respond, if set before use, picks the
// answer to each push (n counts the pushes to that path, from 1);
// otherwise every push gets 201.
type Service struct {
	*httptest.Server
	Respond func(path string, n int) Answer

	mu     sync.Mutex
	subs   map[string]Subscription
	pushes []Push
	counts map[string]int
	bound  map[string]string // path → the VAPID key its subscription was made with
	wake   chan struct{}
	conns  atomic.Int64 // connections accepted

	// deferred: a push is kept as received and decrypted and verified
	// only when Pushes is asked for (once each), so that a benchmark's
	// push service does its checking off the clock (newService's defer).
	deferred bool
}

// Conns is how many connections the Service accepted so far.
func (s *Service) Conns() int64 { return s.conns.Load() }

// Bind makes the Service refuse (403) a push to path signed by another
// VAPID key than key, as a push service refuses a push whose key is not
// the applicationServerKey the subscription was made with.
func (s *Service) Bind(path, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bound == nil {
		s.bound = map[string]string{}
	}
	s.bound[path] = key
}

// NewService starts a Service on 127.0.0.1 (closed at the test's end).
func NewService(tb testing.TB) *Service {
	s := newService(false, nil)
	tb.Cleanup(s.Close)
	return s
}

// NewServiceOn starts a Service listening on l (closed at the test's
// end), for a test that keeps to its own ports.
func NewServiceOn(tb testing.TB, l net.Listener) *Service {
	s := newServiceOn(l, false, nil)
	tb.Cleanup(s.Close)
	return s
}

// NewHTTP2Service starts a Service on 127.0.0.1 that offers HTTP/2, as
// the real push services do (closed at the test's end).
func NewHTTP2Service(tb testing.TB) *Service {
	s := newService(true, nil)
	tb.Cleanup(s.Close)
	return s
}

// newService starts a Service, offering HTTP/2 if h2; control, if not
// nil, makes the handler of the paths under /_control/.
func newService(h2 bool, control func(*Service) http.Handler) *Service {
	return newServiceOn(nil, h2, control)
}

// newServiceOn is newService listening on l (nil: a free port of
// 127.0.0.1).
func newServiceOn(l net.Listener, h2 bool, control func(*Service) http.Handler) *Service {
	s := &Service{subs: map[string]Subscription{}, counts: map[string]int{}, wake: make(chan struct{})}
	var extra http.Handler
	if control != nil {
		extra = control(s)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if extra != nil && strings.HasPrefix(r.URL.Path, "/_control/") {
			extra.ServeHTTP(w, r)
			return
		}
		s.serve(w, r)
	})
	if l != nil {
		s.Server = &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	} else {
		s.Server = httptest.NewUnstartedServer(h)
	}
	s.EnableHTTP2 = h2
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	return s
}

// Subscribe makes a subscription whose endpoint is at the Service.
func (s *Service) Subscribe(tb testing.TB, name string) Subscription {
	tb.Helper()
	sub, err := newSubscription(s.URL, name)
	if err != nil {
		tb.Fatal(err)
	}
	s.add(name, sub)
	return sub
}

func (s *Service) add(name string, sub Subscription) {
	s.mu.Lock()
	s.subs["/push/"+name] = sub
	s.mu.Unlock()
}

// newSubscription makes a subscription's keys, its endpoint at base.
func newSubscription(base, name string) (Subscription, error) {
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return Subscription{}, err
	}
	sub := Subscription{Endpoint: base + "/push/" + name, Key: k, Auth: make([]byte, 16)}
	rand.Read(sub.Auth)
	return sub, nil
}

// Pushes returns every push received so far, in order, each decrypted
// and verified (a deferred Service checks each the first time it is asked
// for, with the clock of its receipt).
func (s *Service) Pushes() []Push {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.pushes {
		if h := s.pushes[i].held; h != nil {
			s.pushes[i].held = nil
			check(&s.pushes[i], h)
		}
	}
	return append([]Push(nil), s.pushes...)
}

// Count is how many pushes were received so far (Pushes without the copy).
func (s *Service) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pushes)
}

// Wait returns a channel closed at the next push.
func (s *Service) Wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wake
}

func (s *Service) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8192))
	p := Push{Path: r.URL.Path, TTL: r.Header.Get("TTL"), Urgency: r.Header.Get("Urgency"), Topic: r.Header.Get("Topic"), At: time.Now()}
	s.mu.Lock()
	sub, ok := s.subs[r.URL.Path]
	s.counts[r.URL.Path]++
	n := s.counts[r.URL.Path]
	want, bound := s.bound[r.URL.Path]
	s.mu.Unlock()
	h := &heldPush{sub: sub, known: ok, method: r.Method, enc: r.Header.Get("Content-Encoding"), authorization: r.Header.Get("Authorization"), body: body}
	if s.deferred && !bound {
		p.held = h // checked when Pushes is asked for
	} else {
		check(&p, h)
	}
	a := Answer{Status: http.StatusCreated}
	if s.Respond != nil {
		a = s.Respond(r.URL.Path, n)
	}
	if bound && p.Key != want {
		a = Answer{Status: http.StatusForbidden}
	}
	s.mu.Lock()
	s.pushes = append(s.pushes, p)
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
	for k, v := range a.Headers {
		w.Header()[k] = v
	}
	w.WriteHeader(a.Status)
}

// check decrypts and verifies h into p (Plain, Claims, Key, Err), with
// the clock of p's receipt.
func check(p *Push, h *heldPush) {
	switch {
	case !h.known:
		p.Err = fmt.Errorf("no subscription at %s", p.Path)
	case h.method != http.MethodPost || h.enc != "aes128gcm":
		p.Err = fmt.Errorf("%s with Content-Encoding %q", h.method, h.enc)
	default:
		u, _ := url.Parse(h.sub.Endpoint)
		p.Claims, p.Key, p.Err = VerifyVAPID(h.authorization, u, p.At)
		if p.Err == nil {
			p.Plain, p.Err = Decrypt(h.body, h.sub.Key, h.sub.Auth)
		}
	}
}

// Decrypt opens an aes128gcm body (RFC 8188 §2) of one record, keyed
// by RFC 8291 §3.3 from the subscription's private key and auth secret.
func Decrypt(body []byte, ua *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("a body shorter than its header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if idlen != 65 || len(body) < 21+idlen+17 {
		return nil, fmt.Errorf("keyid of %d bytes", idlen)
	}
	asPublic, ct := body[21:21+idlen], body[21+idlen:]
	if uint32(len(ct)) > rs {
		return nil, fmt.Errorf("a record of %d bytes in a record size of %d: more than one record", len(ct), rs)
	}
	as, err := ecdh.P256().NewPublicKey(asPublic)
	if err != nil {
		return nil, err
	}
	secret, err := ua.ECDH(as)
	if err != nil {
		return nil, err
	}
	mac := func(key []byte, parts ...[]byte) []byte {
		h := hmac.New(sha256.New, key)
		for _, p := range parts {
			h.Write(p)
		}
		return h.Sum(nil)
	}
	// RFC 8291 §3.4: PRK_key, then IKM (one HKDF-Expand block), then
	// RFC 8188 §2.2–2.3: PRK, CEK and NONCE.
	prkKey := mac(auth, secret)
	ikm := mac(prkKey, []byte("WebPush: info\x00"), ua.PublicKey().Bytes(), asPublic, []byte{1})
	prk := mac(salt, ikm)
	cek := mac(prk, []byte("Content-Encoding: aes128gcm\x00"), []byte{1})[:16]
	nonce := mac(prk, []byte("Content-Encoding: nonce\x00"), []byte{1})[:12]
	block, _ := aes.NewCipher(cek)
	gcm, _ := cipher.NewGCM(block)
	plain, err := gcm.Open(nil, nonce, ct, nil)
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexFunc(plain, func(r rune) bool { return r != 0 })
	if i < 0 || plain[i] != 2 {
		return nil, errors.New("no last-record delimiter")
	}
	return plain[:i], nil
}

// VerifyVAPID checks an Authorization header "vapid t=<JWT>, k=<key>"
// (RFC 8292 §3): an ES256 JWT signed by k, whose aud is endpoint's origin
// and whose exp is after now and at most 24 hours after it. It returns
// the claims and k.
func VerifyVAPID(h string, endpoint *url.URL, now time.Time) (map[string]any, string, error) {
	scheme, params, ok := strings.Cut(h, " ")
	if !ok || scheme != "vapid" {
		return nil, "", fmt.Errorf("authorization %q is not vapid", h)
	}
	var t, k string
	for p := range strings.SplitSeq(params, ",") {
		name, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch name {
		case "t":
			t = v
		case "k":
			k = v
		}
	}
	raw, err := b64.DecodeString(k)
	if err != nil {
		return nil, k, fmt.Errorf("k is not base64url: %w", err)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return nil, k, fmt.Errorf("k is not an uncompressed P-256 point: %w", err)
	}
	parts := strings.Split(t, ".")
	if len(parts) != 3 {
		return nil, k, errors.New("t is not a JWT")
	}
	var header map[string]any
	hb, _ := b64.DecodeString(parts[0])
	if json.Unmarshal(hb, &header) != nil || header["alg"] != "ES256" {
		return nil, k, fmt.Errorf("JWT header %s", hb)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return nil, k, errors.New("the signature is not r || s")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return nil, k, errors.New("the JWT's signature does not verify with k")
	}
	var claims map[string]any
	cb, _ := b64.DecodeString(parts[1])
	if err := json.Unmarshal(cb, &claims); err != nil {
		return nil, k, err
	}
	origin := endpoint.Scheme + "://" + endpoint.Host
	if claims["aud"] != origin {
		return claims, k, fmt.Errorf("aud %v, want %s", claims["aud"], origin)
	}
	exp, _ := claims["exp"].(float64)
	if e := time.Unix(int64(exp), 0); !e.After(now) || e.After(now.Add(24*time.Hour)) {
		return claims, k, fmt.Errorf("exp %v is not within 24 hours of %v", e, now)
	}
	return claims, k, nil
}
