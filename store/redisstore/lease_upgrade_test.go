package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// TestRetryAnOlderNodeScheduledIsNotClaimedEarly: in a rolling upgrade,
// a node of this version takes an event (marking it in flight, l:<id>),
// a node of the version before claims it once its lease passed, and its
// attempt fails: it records the next attempt an hour on, and (knowing no
// l:<id>) leaves the mark. The event is no longer in flight: the retry
// is due at the time that node set, not as soon as Redis has seen it
// idle for a lease (every 30 s, whatever the schedule).
func TestRetryAnOlderNodeScheduledIsNotClaimedEarly(t *testing.T) {
	t.Parallel()
	now := time.Now()
	srv, s, id := takenEvent(t, now)
	ctx := t.Context()
	// The older node's Retry: the schedule only.
	next := now.Add(time.Hour).UnixMilli()
	assert.Success(t, srv.Client(t).HSet(ctx, s.retryKey(leaseDest), id, fmt.Sprintf("1 %d", next)).Err())

	claim := func(at time.Time) bool {
		t.Helper()
		// A lease of 0: Redis has seen it idle long enough, whenever.
		_, err := claimScript.Run(ctx, s.rdb, []string{s.events, s.retryKey(leaseDest)}, leaseDest, "another",
			at.UnixMilli(), 0, id).Slice()
		if err == redis.Nil {
			return false
		}
		assert.Success(t, err)
		return true
	}
	assert.True(t, !claim(now.Add(time.Minute)), "claimed a minute on, before the retry an hour on")
	assert.True(t, claim(time.UnixMilli(next)), "not claimed at the time of its retry")
}

// TestLeaseOfANodeAheadIsTakenOverOnceIdle: a node whose clock runs an
// hour ahead takes an event and dies: another node takes it over once
// Redis has seen it idle for a lease, not an hour later.
func TestLeaseOfANodeAheadIsTakenOverOnceIdle(t *testing.T) {
	t.Parallel()
	now := time.Now()
	_, s, id := takenEvent(t, now.Add(time.Hour))
	ctx := t.Context()
	// A lease of 0: Redis has seen it idle long enough.
	_, err := claimScript.Run(ctx, s.rdb, []string{s.events, s.retryKey(leaseDest)}, leaseDest, "another", now.UnixMilli(), 0, id).Slice()
	assert.Success(t, err)
}

// leaseDest is the webhook destination of the lease tests.
const leaseDest = "0123456789abcdef"

// takenEvent opens a store on a Redis of its own, queues one event and
// takes it at at (a node whose clock says at): the store, its Redis and
// the event's stream id.
func takenEvent(t *testing.T, at time.Time) (*redistest.Server, *Store, string) {
	t.Helper()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{Webhooks: []string{leaseDest}})
	must[store.Entry](t)(s.Append(t.Context(), "abcdabcdabcdabcd", store.NewMessage{Text: "hello"}))
	due := must[[]store.Due](t)(s.Outbox().Take(t.Context(), leaseDest, at, 10))
	assert.Equal(t, "events taken", len(due), 1)
	id, _ := due[0].Token().(string)
	return srv, s, id
}
