package pushtest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/webpush"
)

// A deferred service (the benchmark's, in a process of its own) keeps
// each push as received and checks it when Pushes is asked for: a push
// that decrypts is read back, one that does not still fails, and each is
// checked once.
func TestDeferredServiceChecksWhenAsked(t *testing.T) {
	t.Parallel()
	s := newService(true, func(s *Service) http.Handler {
		s.deferred = true
		return http.NotFoundHandler()
	})
	t.Cleanup(s.Close)
	good, other := s.Subscribe(t, "good"), s.Subscribe(t, "other")
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	v, _ := webpush.ParseVAPID(webpush.NewVAPIDKey(), "mailto:ops@example.com")
	sender := &webpush.Sender{VAPID: v, Client: webpush.NewClient(&webpush.Guard{Allow: []string{"127.0.0.1"}}, &tls.Config{RootCAs: pool})}
	send := func(endpoint string, keys Subscription) {
		ep, _ := url.Parse(endpoint)
		r, err := sender.Send(t.Context(), webpush.Message{Endpoint: ep, Keys: webpush.Keys{P256dh: keys.Key.PublicKey().Bytes(), Auth: keys.Auth},
			Payload: []byte(`{"hello":"world"}`), TTL: 60})
		assert.Success(t, err)
		assert.Equal(t, "answer", r.Status, http.StatusCreated)
	}
	send(good.Endpoint, good)
	send(other.Endpoint, good) // encrypted to another subscription's keys: does not decrypt
	s.mu.Lock()
	unchecked := s.pushes[0].Plain == nil && s.pushes[0].held != nil && s.pushes[1].held != nil
	s.mu.Unlock()
	assert.True(t, unchecked, "a deferred service checked a push as it arrived")
	for range 2 { // asked twice: the same answers, each push checked once
		ps := s.Pushes()
		assert.Equal(t, "pushes", len(ps), 2)
		assert.Success(t, ps[0].Err)
		var got map[string]string
		assert.Success(t, json.Unmarshal(ps[0].Plain, &got))
		assert.Equal(t, "payload", got["hello"], "world")
		assert.Equal(t, "VAPID key", ps[0].Key, v.PublicKey())
		assert.True(t, ps[1].Err != nil, "a push encrypted to another subscription's keys decrypted")
		assert.True(t, ps[0].held == nil && ps[1].held == nil, "a push returned unchecked")
	}
}
