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
// grant, which only a node of this version redacted. Likewise the
// interaction.closed of an interaction still pending holds its message
// closed expired: the stream held it pending.
func TestSweepRevokedEventHoldsNoDigest(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	const dest = "0123456789abcdef"
	s := openStore(t, srv, Options{Webhooks: []string{dest}, Now: clk.Now, Retention: chatrelay.Retention{Age: time.Hour}})
	ctx := t.Context()
	const th = "abcdabcdabcdabcd"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Author: chatrelay.Hermes, Text: "hello"}))
	ix := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: 24 * time.Hour}}))
	g, _ := chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter, ExpiresIn: 24 * time.Hour}.Grant(clk.Now())
	assert.Success(t, s.Invite(ctx, th, g))
	clk.Advance(3 * time.Hour)
	st, err := s.Sweep(ctx)
	assert.Success(t, err)
	assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)

	es, err := srv.Client(t).XRange(ctx, s.events, "-", "+").Result()
	assert.Success(t, err)
	n, closed := 0, 0
	for _, e := range es {
		if e.Values["t"] == store.EventInteractionClosed {
			closed++
			js, _ := e.Values["m"].(string)
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal([]byte(js), &m))
			assert.True(t, m.ID == ix.ID && m.Interaction != nil && m.Interaction.State == chatrelay.Expired &&
				m.Interaction.AnsweredAt == clk.Now().UnixMilli() && m.Rev >= m.Interaction.AnsweredAt,
				"the message an older node sends: %s", js)
			// The script's edit is the file store's rendering, byte for byte.
			want, ok := store.DroppedInteraction(ix.Message, clk.Now().UnixMilli())
			assert.True(t, ok, "no rendering of a pending interaction")
			assert.Equal(t, "the message as store.DroppedInteraction renders it", js, string(want))
		}
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
		// The script's object is the file store's, byte for byte.
		want, ok := store.RemovedGrant(g, clk.Now())
		assert.True(t, ok, "no rendering of an active link")
		assert.Equal(t, "the participant as store.RemovedGrant renders it", p, string(want))
	}
	assert.Equal(t, "participant.revoked events", n, 1)
	assert.Equal(t, "interaction.closed events", closed, 1)
}
