package redisstore

import (
	"testing"

	"github.com/chatrelay/chatrelay"
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
	a := openWaiting(t, primary, "?wait-replicas=1&wait-timeout=200ms")
	b := openWaiting(t, primary, "?wait-replicas=1&wait-timeout=200ms")
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
	again := must[store.Entry](t)(b.Append(ctx, th, store.NewMessage{Text: "on the primary alone", ClientID: "c-1"}))
	if !again.Replayed || !onReplica(t, replica.Client(t), b, th, again.Epoch) {
		t.Fatalf("after the replica is back: replayed %v, on the replica %v", again.Replayed, onReplica(t, replica.Client(t), b, th, again.Epoch))
	}
}
