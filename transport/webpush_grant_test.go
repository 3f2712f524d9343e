package transport

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// grantStore is a store.Push holding one thread's subscriptions whose
// PushUnsubscribe answers unsub, and a store.Participants that knows no
// grant (every grant ended and was removed).
type grantStore struct {
	store.Push
	store.Participants
	subs   []chatrelay.PushSubscription
	unsub  error
	claims int
}

func (g *grantStore) PushSubscriptions(context.Context, string) ([]chatrelay.PushSubscription, error) {
	return g.subs, nil
}

func (g *grantStore) PushUnsubscribe(_ context.Context, _, id string) (chatrelay.PushSubscription, error) {
	return chatrelay.PushSubscription{ID: id}, g.unsub
}

func (g *grantStore) ClaimPush(context.Context, string, string, time.Duration, []byte) (won, settled bool, err error) {
	g.claims++
	return true, false, nil
}

func (g *grantStore) Grant(context.Context, string, string) (chatrelay.Grant, error) {
	return chatrelay.Grant{}, chatrelay.Errorf(chatrelay.NotFound, "no such participant")
}

// TestPushRevokedCountedWhenDeleted: a participant's subscription whose
// grant is gone is counted "revoked" once its delete removed it; not when
// the delete failed (the store is down: it stays, and is tried again at
// the next change), nor when another node deleted it first. Either way
// nothing is claimed or sent for a change nobody gets.
func TestPushRevokedCountedWhenDeleted(t *testing.T) {
	for _, c := range []struct {
		name    string
		unsub   error
		revoked float64
	}{
		{"deleted", nil, 1},
		{"the delete failed", chatrelay.Errorf(chatrelay.StoreUnavailable, "the store cannot be reached"), 0},
		{"another node deleted it", chatrelay.Errorf(chatrelay.NotFound, "no push subscription"), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &grantStore{unsub: c.unsub, subs: []chatrelay.PushSubscription{{
				ID: "w_00000001", Endpoint: "https://push.example.com/x", Events: []chatrelay.PushEvent{chatrelay.PushReply},
				Subscriber: "p:pa_0123456789ab",
			}}}
			ps := &pusher{
				s:      &Server{cfg: Config{Now: time.Now}, parts: g, log: slog.New(slog.NewTextHandler(io.Discard, nil))},
				st:     g,
				total:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t"}, []string{"result"}),
				claims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c"}, []string{"won"}),
			}
			ps.fanOut(context.Background(), "a1b2c3d4e5f60718", chatrelay.Message{ID: "m1", Author: chatrelay.Hermes, Text: "hello"}, false, false, pushOwed{})
			assert.Equal(t, "revoked", testutil.ToFloat64(ps.total.WithLabelValues(pushRevoked)), c.revoked)
			assert.Equal(t, "claims made", g.claims, 0)
		})
	}
}
