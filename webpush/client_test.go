package webpush

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
)

// TestClientConnections: pushes due at once to a push service that
// offers HTTP/2 all go over one connection, the first one included (not
// one dial each before the client knows the service speaks HTTP/2); to
// one that speaks HTTP/1.1 only, over at most 16.
func TestClientConnections(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		svc  func(testing.TB) *pushtest.Service
		most int64
	}{{"HTTP/2", pushtest.NewHTTP2Service, 1}, {"HTTP/1.1", pushtest.NewService, 16}} {
		t.Run(c.name, func(t *testing.T) {
			svc := c.svc(t)
			pool := x509.NewCertPool()
			pool.AddCert(svc.Certificate())
			v, _ := ParseVAPID(NewVAPIDKey(), "mailto:ops@example.com")
			s := &Sender{VAPID: v, Client: NewClient(&Guard{Allow: []string{"127.0.0.1"}}, &tls.Config{RootCAs: pool})}
			const n = 40
			for round := range 2 {
				var wg sync.WaitGroup
				for i := range n {
					sub := svc.Subscribe(t, fmt.Sprint(round, "-", i))
					ep, _ := url.Parse(sub.Endpoint)
					wg.Go(func() {
						r, err := s.Send(t.Context(), Message{Endpoint: ep, Keys: Keys{P256dh: sub.Key.PublicKey().Bytes(), Auth: sub.Auth}, Payload: []byte(`{}`), TTL: 60})
						if err != nil || r.Status != 201 {
							t.Errorf("push %d: %+v %v", i, r, err)
						}
					})
				}
				wg.Wait()
			}
			assert.Equal(t, "pushes received", len(svc.Pushes()), 2*n)
			assert.True(t, svc.Conns() >= 1 && svc.Conns() <= c.most, "%d connections for %d pushes, at most %d wanted", svc.Conns(), 2*n, c.most)
		})
	}
}

// TestFirstPushHoldsBackNoOther: a push service that takes its time over
// its answer to the first push to it holds back none of the pushes to it
// that come meanwhile, and they share the first one's connection. The
// client held every push to an origin until its first was answered, up to
// the 25 s it waits for an answer: one slow answer of FCM's, where every
// Chrome subscription lives, held every push.
func TestFirstPushHoldsBackNoOther(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewHTTP2Service(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before svc.Close, which waits for its handlers
	svc.Respond = func(path string, _ int) pushtest.Answer {
		if path == "/push/slow" {
			<-release
		}
		return pushtest.Answer{Status: 201}
	}
	pool := x509.NewCertPool()
	pool.AddCert(svc.Certificate())
	v, _ := ParseVAPID(NewVAPIDKey(), "mailto:ops@example.com")
	s := &Sender{VAPID: v, Client: NewClient(&Guard{Allow: []string{"127.0.0.1"}}, &tls.Config{RootCAs: pool})}
	send := func(name string) error {
		sub := svc.Subscribe(t, name)
		ep, _ := url.Parse(sub.Endpoint)
		r, err := s.Send(t.Context(), Message{Endpoint: ep, Keys: Keys{P256dh: sub.Key.PublicKey().Bytes(), Auth: sub.Auth}, Payload: []byte(`{}`), TTL: 60})
		if err == nil && r.Status != 201 {
			err = fmt.Errorf("status %d", r.Status)
		}
		return err
	}
	slow := make(chan error, 1)
	go func() { slow <- send("slow") }()
	assert.Eventually(t, 10*time.Second, "the slow push at the service", func() bool { return svc.Conns() == 1 })
	done := make(chan error, 1)
	go func() { done <- send("quick") }()
	select {
	case err := <-done:
		assert.Success(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a push is held back 10 s behind the first push to its service, not yet answered")
	}
	once.Do(func() { close(release) })
	assert.Success(t, <-slow)
	assert.Equal(t, "connections", svc.Conns(), int64(1))
}

// TestSendFollowsNoRedirect: a push service's redirect is the push's
// answer, never followed: a push is dialled only where its endpoint,
// checked by the Guard, says (the client resolves and checks the host it
// dials, and a Location names another). The redirect's target, another
// host the guard allows here, gets nothing (pushe2e probe: a 307 to
// another loopback host).
func TestSendFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	svc, other := pushtest.NewService(t), pushtest.NewService(t)
	target := other.Subscribe(t, "target")
	svc.Respond = func(string, int) pushtest.Answer {
		return pushtest.Answer{Status: http.StatusTemporaryRedirect, Headers: http.Header{"Location": {target.Endpoint}}}
	}
	pool := x509.NewCertPool()
	pool.AddCert(svc.Certificate())
	pool.AddCert(other.Certificate())
	v, _ := ParseVAPID(NewVAPIDKey(), "mailto:ops@example.com")
	s := &Sender{VAPID: v, Client: NewClient(&Guard{Allow: []string{"127.0.0.1"}}, &tls.Config{RootCAs: pool})}
	sub := svc.Subscribe(t, "redirected")
	ep, _ := url.Parse(sub.Endpoint)
	r, err := s.Send(t.Context(), Message{Endpoint: ep, Keys: Keys{P256dh: sub.Key.PublicKey().Bytes(), Auth: sub.Auth}, Payload: []byte(`{}`), TTL: 60})
	assert.Success(t, err)
	assert.Equal(t, "the push's answer", r.Status, http.StatusTemporaryRedirect)
	assert.Equal(t, "pushes at the endpoint", len(svc.Pushes()), 1)
	assert.Equal(t, "pushes at the redirect's target", len(other.Pushes()), 0)
}
