package redisstore

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// TestSweepRevokedEventHoldsNoDigest: the participant.revoked the sweep
// queues for a link still active as it removes the thread is, in the
// events stream, the participant object an older chatrelay (one node of
// a rolling deploy, or after a rollback) sends as it is: no grant with
// its token's digest, and in state revoked. The stream held the stored
// grant, which only a node of this version redacted.
func TestSweepRevokedEventHoldsNoDigest(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	const dest = "0123456789abcdef"
	s := openStore(t, srv, Options{Webhooks: []string{dest}, Now: clk.Now, Retention: chatrelay.Retention{Age: time.Hour}})
	ctx := t.Context()
	const th = "abcdabcdabcdabcd"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Author: chatrelay.Hermes, Text: "hello"}))
	g, _ := chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter, ExpiresIn: 24 * time.Hour}.Grant(clk.Now())
	assert.Success(t, s.Invite(ctx, th, g))
	clk.Advance(3 * time.Hour)
	st, err := s.Sweep(ctx)
	assert.Success(t, err)
	assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)

	es, err := srv.Client(t).XRange(ctx, s.events, "-", "+").Result()
	assert.Success(t, err)
	n := 0
	for _, e := range es {
		for k, v := range e.Values {
			s, _ := v.(string)
			assert.True(t, !strings.Contains(s, g.Digest) && !strings.Contains(s, `"digest"`), "the stream's %s holds a digest: %s", k, s)
		}
		if e.Values["t"] != store.EventParticipantRevoked {
			continue
		}
		n++
		p, _ := e.Values["p"].(string)
		var got chatrelay.Participant
		assert.Success(t, json.Unmarshal([]byte(p), &got))
		assert.True(t, got.ID == g.ID && got.Name == "Alex" && got.State == chatrelay.Revoked && got.ExpiresAt == g.ExpiresAt && got.CreatedAt == g.CreatedAt,
			"the participant an older node sends: %s", p)
	}
	assert.Equal(t, "participant.revoked events", n, 1)
}
