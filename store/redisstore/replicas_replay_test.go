package redisstore

import (
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// TestWaitReplicasReplayNotAcknowledgedEarly: with wait-replicas=1, a
// post refused 503 because the only replica is stopped is on the
// primary alone; its retry (the same client_id) on another node, whose
// connections last wrote before the replica stopped, must not be
// acknowledged as a replay while no replica holds the message: a
// failover then would lose a post the client was told was stored.
func TestWaitReplicasReplayNotAcknowledgedEarly(t *testing.T) {
	t.Parallel()
	primary := redistest.StartServer(t, redistest.ServerOptions{})
	replica := primary.StartReplica(t)
	// A second for the wait, so that the first post, with the replica
	// running, is acknowledged within it on a loaded machine.
	a := openWaiting(t, primary, "?wait-replicas=1&wait-timeout=1s")
	b := openWaiting(t, primary, "?wait-replicas=1&wait-timeout=1s")
	ctx := t.Context()
	const th = "a1b2c3d4e5f60002"
	must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "while the replica runs"}))

	replica.Stop(t)
	_, err := a.Append(ctx, th, store.NewMessage{Text: "on the primary alone", ClientID: "c-1"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	e, err := b.Append(ctx, th, store.NewMessage{Text: "on the primary alone", ClientID: "c-1"})
	if err == nil {
		t.Fatalf("the retry was acknowledged (replayed %v) while no replica holds %s", e.Replayed, e.ID)
	}
	wantCode(t, err, chatrelay.StoreUnavailable)
	replica.Cont()
	var again store.Entry
	assert.Eventually(t, 10*time.Second, "the retry acknowledged once the replica is back", func() bool {
		e, err := b.Append(ctx, th, store.NewMessage{Text: "on the primary alone", ClientID: "c-1"})
		again = e
		return err == nil // else StoreUnavailable: the replica still catching up, retried as a client would
	})
	if !again.Replayed || !onReplica(t, replica.Client(t), b, th, again.Epoch) {
		t.Fatalf("after the replica is back: replayed %v, on the replica %v", again.Replayed, onReplica(t, replica.Client(t), b, th, again.Epoch))
	}
}
