package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webhook"
)

// retryOutbox records the events settled Done and counts the retries.
type retryOutbox struct {
	doneOutbox
	retries atomic.Int64
}

func (o *retryOutbox) Retry(context.Context, string, store.Due, time.Time) error {
	o.retries.Add(1)
	return nil
}

// A receiver that answers 410 Gone no longer wants the events (Standard
// Webhooks: "Sender should disable the webhook endpoint, and stop sending
// it messages"): that event is given up at once, not retried, and the
// destination is off (a store that records it keeps it off after a
// restart: TestConformanceWebhookGoneSurvivesRestart): its other events
// are given up without an attempt, each counted gone, and it is logged at
// warn once. Before, a 410 was retried for 3 h like a 503.
func TestGoneReceiverIsDisabled(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:1/hook"
	ob := &retryOutbox{doneOutbox: doneOutbox{memOutbox: memOutbox{queued: threeEvents(url, "evt_gone"), took: make(chan struct{})}}}
	d, asked, logs := runGone(t, url, ob, func() bool { return ob.retries.Load() > 0 })
	if n := ob.retries.Load(); n != 0 {
		t.Fatalf("an event for a receiver that answered 410 Gone was retried (%d times)", n)
	}
	if n := testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultGone)); n != 3 {
		t.Fatalf("counted %v gone, not the 3 events", n)
	}
	ob.mu.Lock()
	settled := len(ob.done)
	ob.mu.Unlock()
	if settled != 3 {
		t.Fatalf("settled %d events, not 3", settled)
	}
	if asked != 1 {
		t.Fatalf("the receiver was sent %d events after it answered 410, not none", asked-1)
	}
	if n := strings.Count(logs, "410"); n != 1 {
		t.Fatalf("the disabling is logged %d times, not once:\n%s", n, logs)
	}
}

// threeEvents is three events, ids prefix0 to prefix2, queued for url.
func threeEvents(url, prefix string) map[string][]store.Due {
	var queued []store.Due
	for i := range 3 {
		queued = append(queued, store.Due{Event: store.Event{ID: fmt.Sprintf("%s%d", prefix, i), Type: store.EventMessageCreated, Thread: "t", At: time.Now(), Message: []byte(`{}`)}})
	}
	return map[string][]store.Due{store.DestinationID(url): queued}
}

// runGone runs a deliverer of ob's events for url, whose receiver
// answers every request 410 Gone, until it counted three gone, or stop
// says so, or 10 s passed; it returns the deliverer (stopped), how many
// requests the receiver got, and the log.
func runGone(t *testing.T, url string, ob store.Outbox, stop func() bool) (*webhook.Deliverer, int64, string) {
	t.Helper()
	var asked atomic.Int64
	gone := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		asked.Add(1)
		return &http.Response{StatusCode: http.StatusGone, Status: "410 Gone", Body: http.NoBody, Request: r}, nil
	})
	var logs bytes.Buffer
	d, err := webhook.New(webhook.Config{URLs: []string{url}, Keys: [][]byte{make([]byte, 32)}, Outbox: ob, Poll: time.Millisecond, Workers: 1,
		Client: &http.Client{Transport: gone}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultGone)) < 3 && !stop() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polls the counter
	}
	cancel()
	<-done
	return d, asked.Load(), logs.String()
}
