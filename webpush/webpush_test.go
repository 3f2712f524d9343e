package webpush

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
)

func unb64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	assert.Success(t, err)
	return b
}

// TestRFC8291Example encrypts RFC 8291 Appendix A's plaintext with its
// fixed keys and salt: the body must be the published one, byte for byte,
// and the test receiver must open it with the published private key.
func TestRFC8291Example(t *testing.T) {
	t.Parallel()
	as, err := ecdh.P256().NewPrivateKey(unb64(t, "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
	assert.Success(t, err)
	assert.Equal(t, "the example's as_public", base64.RawURLEncoding.EncodeToString(as.PublicKey().Bytes()),
		"BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8")
	ua, err := ecdh.P256().NewPrivateKey(unb64(t, "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"))
	assert.Success(t, err)
	keys := Keys{
		P256dh: unb64(t, "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"),
		Auth:   unb64(t, "BTBZMqHH6r4Tts7J_aSIgg"),
	}
	assert.True(t, bytes.Equal(ua.PublicKey().Bytes(), keys.P256dh), "the example's ua_public is not its ua_private's")
	plain := []byte("When I grow up, I want to be a watermelon")
	got, err := encrypt(plain, keys, as, unb64(t, "DGv6ra1nlYgDCS1FRnbzlw"))
	assert.Success(t, err)
	want := "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml" +
		"mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPT" +
		"pK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
	assert.Equal(t, "ciphertext", base64.RawURLEncoding.EncodeToString(got), want)
	opened, err := pushtest.Decrypt(got, ua, keys.Auth)
	assert.Success(t, err)
	assert.Equal(t, "decrypted", string(opened), string(plain))
}

// TestEncryptRoundTrip: a fresh encryption of the largest payload opens
// with the subscription's keys; one byte more is refused; two
// encryptions of one payload differ (fresh key and salt).
func TestEncryptRoundTrip(t *testing.T) {
	t.Parallel()
	ua, _ := ecdh.P256().GenerateKey(nil)
	keys := Keys{P256dh: ua.PublicKey().Bytes(), Auth: bytes.Repeat([]byte{7}, 16)}
	plain := bytes.Repeat([]byte("x"), MaxPayload)
	a, err := Encrypt(plain, keys)
	assert.Success(t, err)
	assert.True(t, len(a) <= 4096, "a body of %d bytes", len(a))
	got, err := pushtest.Decrypt(a, ua, keys.Auth)
	assert.Success(t, err)
	assert.True(t, bytes.Equal(got, plain), "round trip changed the payload")
	b, _ := Encrypt(plain, keys)
	assert.True(t, !bytes.Equal(a, b), "two encryptions are the same")
	_, err = Encrypt(append(plain, 'x'), keys)
	assert.True(t, errors.Is(err, ErrPayloadTooLarge), "over MaxPayload: %v", err)
	_, err = Encrypt([]byte("x"), Keys{P256dh: keys.P256dh[:64], Auth: keys.Auth})
	assert.True(t, err != nil, "a short p256dh was taken")
}

// TestVAPID signs for an endpoint with a port and one without: the test
// service verifies each JWT over the key's public half, with aud the
// endpoint's origin and exp within 24 hours; sub is the contact once.
func TestVAPID(t *testing.T) {
	t.Parallel()
	v, err := ParseVAPID(NewVAPIDKey(), "mailto:ops@example.com")
	assert.Success(t, err)
	now := time.Now()
	for _, ep := range []string{"https://push.example.com/x/y", "https://127.0.0.1:8443/p", "https://[::1]:443/p"} {
		u, _ := url.Parse(ep)
		h, err := v.Authorization(u, now)
		assert.Success(t, err)
		claims, k, err := pushtest.VerifyVAPID(h, &url.URL{Scheme: u.Scheme, Host: strings.TrimSuffix(u.Host, ":443")}, now)
		assert.Success(t, err)
		assert.Equal(t, "k", k, v.PublicKey())
		assert.Equal(t, "sub", claims["sub"], any("mailto:ops@example.com"))
		exp := time.Unix(int64(claims["exp"].(float64)), 0)
		assert.True(t, exp.Sub(now) <= MaxJWTLife && exp.After(now.Add(time.Hour)), "exp %v", exp)
	}
	other, _ := ParseVAPID(NewVAPIDKey(), "")
	u, _ := url.Parse("https://push.example.com/x")
	h, _ := other.Authorization(u, now)
	h = strings.Replace(h, other.PublicKey(), v.PublicKey(), 1) // signed by other, naming v's key
	_, _, err = pushtest.VerifyVAPID(h, u, now)
	assert.True(t, err != nil, "a JWT signed by another key verified")
	for _, bad := range []string{"ops@example.com", "mailto:ops", "http://example.com", "https://"} {
		assert.True(t, CheckSubject(bad) != nil, "contact %q taken", bad)
	}
	assert.Success(t, CheckSubject("https://example.com/contact"))
}

// TestVAPIDReuse: one JWT per push service origin, reused (the same
// header) for any endpoint of that origin until it has JWTRenew left,
// then a new one with a full JWTLife; another origin, or a clock set
// back, gets its own; every header verifies at the time it is used. The
// tokens kept are bounded.
func TestVAPIDReuse(t *testing.T) {
	t.Parallel()
	v, err := ParseVAPID(NewVAPIDKey(), "mailto:ops@example.com")
	assert.Success(t, err)
	t0 := time.Unix(1_800_000_000, 0)
	fcm1, _ := url.Parse("https://fcm.googleapis.com/fcm/send/aaa")
	fcm2, _ := url.Parse("https://fcm.googleapis.com/fcm/send/bbb")
	moz, _ := url.Parse("https://updates.push.services.mozilla.com/wpush/v2/ccc")
	auth := func(u *url.URL, now time.Time) (string, int64) {
		t.Helper()
		h, err := v.Authorization(u, now)
		assert.Success(t, err)
		claims, _, err := pushtest.VerifyVAPID(h, &url.URL{Scheme: u.Scheme, Host: u.Host}, now)
		assert.Success(t, err)
		return h, int64(claims["exp"].(float64))
	}
	first, exp := auth(fcm1, t0)
	assert.Equal(t, "first exp", exp, t0.Add(JWTLife).Unix())
	again, _ := auth(fcm2, t0.Add(time.Minute))
	assert.Equal(t, "the same origin a minute later: the same JWT", again, first)
	late, _ := auth(fcm1, t0.Add(JWTLife-JWTRenew-time.Second))
	assert.Equal(t, "the same origin with just over JWTRenew left: the same JWT", late, first)
	other, _ := auth(moz, t0.Add(time.Minute))
	assert.True(t, other != first, "another origin got the same JWT")
	renewAt := t0.Add(JWTLife - JWTRenew)
	renewed, exp := auth(fcm1, renewAt)
	assert.True(t, renewed != first, "a JWT with JWTRenew left was reused")
	assert.Equal(t, "the renewed JWT's exp", exp, renewAt.Add(JWTLife).Unix())
	reused, _ := auth(fcm2, renewAt.Add(time.Minute))
	assert.Equal(t, "the renewed JWT reused", reused, renewed)
	back, exp := auth(fcm1, t0.Add(-13*time.Hour))
	assert.True(t, back != renewed && exp == t0.Add(-time.Hour).Unix(), "a clock set back 13 h: exp %d", exp)

	for i := range maxTokens + 10 {
		u, _ := url.Parse(fmt.Sprintf("https://push%d.example.com/x", i))
		auth(u, t0)
	}
	v.mu.Lock()
	n := len(v.tokens)
	v.mu.Unlock()
	assert.True(t, n > 0 && n <= maxTokens, "%d tokens kept, at most %d", n, maxTokens)
}

// TestGuard: endpoints that are not https, or whose host is or resolves
// to a loopback, private, link-local, shared or unspecified address, or
// that are one byte past the Guard's MaxEndpoint, are refused at the
// check (one of exactly MaxEndpoint bytes is taken); a name that answers
// a public address at the check and a private one at the dial
// (rebinding) is never dialled at the private one. Only the fake dialer "dials": no packet leaves.
func TestGuard(t *testing.T) {
	t.Parallel()
	f := pushtest.NewFakeNet(map[string][][]string{
		"push.example.com":   {{"203.0.114.9", "2606:4700::1"}},
		"inside.example.com": {{"10.1.2.3"}},
		"mixed.example.com":  {{"203.0.114.9", "192.168.1.1"}},
		"rebind.example.com": {{"203.0.114.10"}, {"127.0.0.1", "10.0.0.1"}},
		"cgnat.example.com":  {{"100.64.0.1"}},
		"ula.example.com":    {{"fd00::1"}},
		"mapped.example.com": {{"::ffff:127.0.0.1"}},
		"compat.example.com": {{"::7f00:1"}}, // IPv4-compatible (deprecated ::/96): 127.0.0.1
	})
	g := &Guard{Resolver: f, Dial: f.Dial, MaxEndpoint: 64}
	long := func(n int) string {
		return "https://push.example.com/" + strings.Repeat("a", n-len("https://push.example.com/"))
	}
	ctx := t.Context()
	refused := []string{
		"http://push.example.com/x", "https://127.0.0.1/", "https://[::1]/", "https://10.0.0.1/x",
		"https://192.168.0.10/", "https://172.16.5.4/", "https://169.254.169.254/latest", "https://[fe80::1]/",
		"https://0.0.0.0/", "https://[::]/", "https://100.100.100.100/", "https://[fd12:3456::1]/",
		"https://[::ffff:10.0.0.1]/", "https://[2002:7f00:1::]/", "https://[64:ff9b::a00:1]/",
		"https://inside.example.com/", "https://mixed.example.com/", "https://cgnat.example.com/",
		"https://ula.example.com/", "https://mapped.example.com/", "https://nxdomain.example.com/",
		"https://user:pw@push.example.com/", "https://push.example.com/#frag", "ftp://push.example.com/",
		"push.example.com/x", "https:///x", long(g.MaxEndpoint + 1),
		"https://compat.example.com/", "https://[::7f00:1]/", "https://[::a00:1]/", "https://[::ffff:0:a00:1]/",
		"https://[3fff::1]/", "https://[5f00::1]/", "https://192.88.99.1/",
		"https://push.example.com/a b" + strings.Repeat("c", g.MaxEndpoint-len("https://push.example.com/a b")), // %20 once escaped
	}
	for _, ep := range refused {
		_, err := g.CheckEndpoint(ctx, ep)
		assert.True(t, err != nil, "%s passed the check", ep)
	}
	for _, ep := range []string{"https://push.example.com/x", "https://rebind.example.com/x", "https://8.8.8.8/x", long(g.MaxEndpoint)} {
		_, err := g.CheckEndpoint(ctx, ep)
		assert.True(t, err == nil, "%s refused: %v", ep, err)
	}
	// The dial resolves again: the rebinding name now answers loopback
	// and private addresses, which are never dialled.
	_, err := g.DialContext(ctx, "tcp", "rebind.example.com:443")
	assert.True(t, errors.Is(err, ErrBlocked), "rebinding: %v", err)
	_, err = g.DialContext(ctx, "tcp", "mixed.example.com:443")
	assert.True(t, errors.Is(err, pushtest.ErrNotDialled), "mixed: %v", err)
	for _, a := range []string{"127.0.0.1:443", "[::1]:443", "10.0.0.1:443", "[fd00::1]:443", "[::7f00:1]:443", "compat.example.com:443"} {
		_, err := g.DialContext(ctx, "tcp", a)
		assert.True(t, errors.Is(err, ErrBlocked), "%s: %v", a, err)
	}
	_, err = g.DialContext(ctx, "tcp", "push.example.com:443")
	assert.True(t, errors.Is(err, pushtest.ErrNotDialled), "public: %v", err)
	assert.Equal(t, "dialled", f.Dialled(), []string{"203.0.114.9:443", "203.0.114.9:443", "[2606:4700::1]:443"})

	// An allowed host is exempt, at the check and at the dial.
	g2 := &Guard{Resolver: f, Dial: f.Dial, Allow: []string{"127.0.0.1", "inside.example.com"}}
	for _, ep := range []string{"https://127.0.0.1:9/x", "https://inside.example.com/x"} {
		_, err := g2.CheckEndpoint(ctx, ep)
		assert.True(t, err == nil, "%s (allowed) refused: %v", ep, err)
	}
	_, err = g2.CheckEndpoint(ctx, "https://[::1]/x")
	assert.True(t, err != nil, "an address not allowed passed")
}

// TestControl: the dialer's Control refuses a blocked address before any
// packet is sent (a real net.Dialer, to loopback only, which it refuses).
func TestControl(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"127.0.0.1:443", "[::1]:443", "10.0.0.1:443", "169.254.1.1:80", "[fc00::1]:443", "100.64.1.1:443", "0.0.0.0:443"} {
		assert.True(t, errors.Is(Control("tcp", a, nil), ErrBlocked), "Control took %s", a)
	}
	assert.Success(t, Control("tcp", "203.0.114.9:443", nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.Success(t, err)
	defer ln.Close()
	d := &net.Dialer{Control: Control, Timeout: time.Second}
	_, err = d.DialContext(t.Context(), "tcp", ln.Addr().String())
	assert.True(t, errors.Is(err, ErrBlocked), "the dialer reached %s: %v", ln.Addr(), err)
}

// TestSend posts to the test service (127.0.0.1, allowed): it decrypts
// the payload, verifies the JWT and sees TTL, Urgency and Topic; a
// Retry-After comes back; an invalid topic is refused before anything
// is sent; a client whose guard allows nothing never reaches 127.0.0.1.
func TestSend(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	svc.Respond = func(_ string, n int) pushtest.Answer {
		if n == 1 {
			return pushtest.Answer{Status: 429, Headers: http.Header{"Retry-After": {"7"}}}
		}
		return pushtest.Answer{Status: 201}
	}
	sub := svc.Subscribe(t, "a")
	pool := x509.NewCertPool()
	pool.AddCert(svc.Certificate())
	tlsc := &tls.Config{RootCAs: pool}
	v, _ := ParseVAPID(NewVAPIDKey(), "mailto:ops@example.com")
	s := &Sender{VAPID: v, Client: NewClient(&Guard{Allow: []string{"127.0.0.1"}}, tlsc)}
	ep, _ := url.Parse(sub.Endpoint)
	m := Message{Endpoint: ep, Keys: Keys{P256dh: sub.Key.PublicKey().Bytes(), Auth: sub.Auth},
		Payload: []byte(`{"hello":"world"}`), TTL: 60, Urgency: UrgencyHigh, Topic: "ix_0123456789ab"}
	r, err := s.Send(t.Context(), m)
	assert.Success(t, err)
	assert.Equal(t, "first answer", r, Result{Status: 429, RetryAfter: 7 * time.Second})
	r, err = s.Send(t.Context(), m)
	assert.Success(t, err)
	assert.Equal(t, "second answer", r.Status, 201)
	ps := svc.Pushes()
	assert.Equal(t, "pushes", len(ps), 2)
	for _, p := range ps {
		assert.Success(t, p.Err)
		var got map[string]string
		assert.Success(t, json.Unmarshal(p.Plain, &got))
		assert.Equal(t, "payload", got["hello"], "world")
		assert.Equal(t, "headers", []string{p.TTL, p.Urgency, p.Topic, p.Key}, []string{"60", "high", "ix_0123456789ab", v.PublicKey()})
	}
	m.Topic = strings.Repeat("a", 33)
	_, err = s.Send(t.Context(), m)
	assert.True(t, err != nil, "a 33-character topic was sent")
	guarded := &Sender{VAPID: v, Client: NewClient(&Guard{}, tlsc)}
	m.Topic = ""
	_, err = guarded.Send(t.Context(), m)
	assert.True(t, IsBlocked(err), "a guard that allows nothing: %v", err)
	assert.Equal(t, "pushes", len(svc.Pushes()), 2)
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{"": 0, "3": 3 * time.Second, "-1": 0, "soon": 0,
		"9223372036": 9223372036 * time.Second, "9223372037": math.MaxInt64, "18446744073709551616": math.MaxInt64,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second, now.Add(-time.Minute).Format(http.TimeFormat): 0} {
		assert.Equal(t, v, retryAfter(v, now), want)
	}
}

// TestSendTimeout: a push service that takes a push and never answers
// gets no longer than the request's bound (requestTimeout, 30 s; here
// shortened), though the client has no Timeout of its own (Do's
// context bounds it): Send returns an error, as for no answer.
func TestSendTimeout(t *testing.T) {
	svc := pushtest.NewService(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the service closes: its handler returns
	svc.Respond = func(string, int) pushtest.Answer {
		<-release
		return pushtest.Answer{Status: 201}
	}
	defer func(d time.Duration) { requestTimeout = d }(requestTimeout)
	requestTimeout = 300 * time.Millisecond
	sub := svc.Subscribe(t, "a")
	pool := x509.NewCertPool()
	pool.AddCert(svc.Certificate())
	v, _ := ParseVAPID(NewVAPIDKey(), "mailto:ops@example.com")
	s := &Sender{VAPID: v, Client: NewClient(&Guard{Allow: []string{"127.0.0.1"}}, &tls.Config{RootCAs: pool})}
	ep, _ := url.Parse(sub.Endpoint)
	_, err := s.Send(t.Context(), Message{Endpoint: ep, Keys: Keys{P256dh: sub.Key.PublicKey().Bytes(), Auth: sub.Auth}, Payload: []byte(`{}`), TTL: 60})
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "a push never answered: %v", err)
}

// TestEncryptGarbage: one push's encryption leaves at most 61
// allocations (it made 67: the subscription's key parsed twice and the
// record copied before sealing; most of the rest are crypto/hkdf's
// hash values, which we take as they are): a push's garbage is collected
// on the posts' time.
func TestEncryptGarbage(t *testing.T) {
	ua, err := ecdh.P256().GenerateKey(rand.Reader)
	assert.Success(t, err)
	k := Keys{P256dh: ua.PublicKey().Bytes(), Auth: make([]byte, 16)}
	payload := make([]byte, 600)
	n := testing.AllocsPerRun(20, func() {
		if _, err := Encrypt(payload, k); err != nil {
			t.Fatal(err)
		}
	})
	assert.True(t, n <= 61, "allocations of one Encrypt: %v", n)
}
