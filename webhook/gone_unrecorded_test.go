package webhook_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

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
	ob := &unrecordingOutbox{retryOutbox: retryOutbox{doneOutbox: doneOutbox{memOutbox: memOutbox{queued: threeEvents(url, "evt_unrec"), took: make(chan struct{})}}}}
	d, asked, logs := runGone(t, url, ob, func() bool { return false })
	if n := testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultGone)); n != 3 {
		t.Fatalf("counted %v gone, not the 3 events", n)
	}
	if asked != 1 {
		t.Fatalf("the receiver was sent %d events after it answered 410, not none:\n%s", asked-1, logs)
	}
	if ob.disables.Load() == 0 {
		t.Fatal("the 410 was not recorded")
	}
}
