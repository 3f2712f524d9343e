package webpush

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"sync"
	"testing"

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
