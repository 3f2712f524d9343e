package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webhook"
)

// unrecordingOutbox is a store that cannot record a destination
// disabled (a full Redis refuses the write, reads go on): Disable fails
// and Disabled answers false.
type unrecordingOutbox struct {
	retryOutbox
	disables atomic.Int64
}

func (o *unrecordingOutbox) Disable(context.Context, string) error {
	o.disables.Add(1)
	return errors.New("OOM command not allowed when used memory > 'maxmemory'")
}
func (o *unrecordingOutbox) Disabled(context.Context, string) (bool, error) { return false, nil }
func (o *unrecordingOutbox) Enable(context.Context, string) error           { return nil }

var _ store.Disabler = (*unrecordingOutbox)(nil)

// TestGoneUnrecordedStaysDisabled: a receiver answered 410 Gone and the
// store could not record it (Disable failed): the server still sends it
// nothing more, as before the record existed, rather than reading "not
// disabled" from the store at its next batch and sending it the next
// event, which another 410 answers, batch after batch.
func TestGoneUnrecordedStaysDisabled(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:1/hook"
	var queued []store.Due
	for i := range 3 {
		queued = append(queued, store.Due{Event: store.Event{ID: fmt.Sprintf("evt_unrec%d", i), Type: store.EventMessageCreated, Thread: "t", At: time.Now(), Message: []byte(`{}`)}})
	}
	ob := &unrecordingOutbox{retryOutbox: retryOutbox{doneOutbox: doneOutbox{memOutbox: memOutbox{queued: map[string][]store.Due{store.DestinationID(url): queued}, took: make(chan struct{})}}}}
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
	for testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultGone)) < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polls the counter
	}
	cancel()
	<-done
	if n := testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultGone)); n != 3 {
		t.Fatalf("counted %v gone, not the 3 events", n)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the receiver was sent %d events after it answered 410, not none:\n%s", n-1, logs.String())
	}
	if ob.disables.Load() == 0 {
		t.Fatal("the 410 was not recorded")
	}
}
