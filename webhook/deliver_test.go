package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatrelay/chatrelay/internal/webhooktest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webhook"
)

// memOutbox is a store.Outbox in memory: each destination's events, handed
// out once; a destination in gated hands out nothing until open is closed.
type memOutbox struct {
	mu     sync.Mutex
	queued map[string][]store.Due
	gated  string
	open   chan struct{}
	took   chan struct{} // closed after the first Take that handed out events
	once   sync.Once
}

func (o *memOutbox) Take(_ context.Context, dest string, _ time.Time, n int) ([]store.Due, error) {
	if dest == o.gated {
		select {
		case <-o.open:
		default:
			return nil, nil
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queued[dest]
	n = min(n, len(q))
	o.queued[dest] = q[n:]
	if n > 0 && dest != o.gated {
		o.once.Do(func() { close(o.took) })
	}
	return q[:n], nil
}

func (o *memOutbox) Done(context.Context, string, store.Due) error { return nil }

func (o *memOutbox) Retry(context.Context, string, store.Due, time.Time) error { return nil }

// A receiver that hangs holds its attempts for the whole timeout; it must
// not hold back another destination's: that one is delivered while every
// hung attempt is still in flight, none failed yet (before, the hung one
// took every slot, and the other waited the 10 s timeout).
func TestHungReceiverHoldsBackNoOther(t *testing.T) {
	t.Parallel()
	secret := webhooktest.NewSecret()
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hangs until the attempt's timeout or the test's end
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hung.Close()
	defer close(stop)
	good := webhooktest.Start(t, secret)

	const workers = 2
	ob := &memOutbox{queued: map[string][]store.Due{}, open: make(chan struct{}), took: make(chan struct{})}
	hungURL := hung.URL + "/hook"
	for i := range 2 * workers {
		ob.queued[store.DestinationID(hungURL)] = append(ob.queued[store.DestinationID(hungURL)],
			store.Due{Event: store.Event{ID: fmt.Sprintf("evt_hung%d", i), Type: store.EventMessageCreated, Thread: "t", At: time.Now(), Message: []byte(`{}`)}})
	}
	ob.gated = store.DestinationID(good.URL)
	ob.queued[ob.gated] = []store.Due{{Event: store.Event{ID: "evt_good", Type: store.EventMessageCreated, Thread: "t", At: time.Now(), Message: []byte(`{}`)}}}

	d, err := webhook.New(webhook.Config{URLs: []string{hungURL, good.URL}, Keys: [][]byte{key}, Outbox: ob,
		Workers: workers, Poll: time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	<-ob.took // the hung destination has taken every slot it may
	close(ob.open)
	for len(good.Accepted()) == 0 {
		select {
		case <-done:
			t.Fatal("the deliverer ended")
		case <-time.After(time.Millisecond): // polls the receiver's record
		}
	}
	// A hung attempt is counted failed when it ends, before its slot is let go.
	if n := testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultFailed)); n != 0 {
		t.Fatalf("the other destination's event waited for the hung receiver's attempts to time out (%v failed first)", n)
	}
}

// A failed attempt is logged at info level with the event's id and type
// (Operations, "Delivery"), never its text, so that an operator can tell
// which kind of event a receiver refuses.
func TestFailedAttemptLogNamesTheType(t *testing.T) {
	t.Parallel()
	secret := webhooktest.NewSecret()
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	recv := webhooktest.Start(t, secret)
	recv.SetDown(true) // 503 to every attempt
	dest := store.DestinationID(recv.URL)
	ob := &memOutbox{queued: map[string][]store.Due{dest: {{Event: store.Event{ID: "evt_typed", Type: store.EventInteractionOpened,
		Thread: "t", At: time.Now(), Message: []byte(`{"text":"a secret plan"}`)}}}}, took: make(chan struct{})}
	var logs bytes.Buffer
	d, err := webhook.New(webhook.Config{URLs: []string{recv.URL}, Keys: [][]byte{key}, Outbox: ob, Poll: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	for testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultFailed)) == 0 { // counted once logged and settled
		select {
		case <-done:
			t.Fatal("the deliverer ended")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	line := logs.String()
	if !strings.Contains(line, "event=evt_typed") || !strings.Contains(line, "type="+store.EventInteractionOpened) {
		t.Fatalf("the failed attempt's log names not the event's id and type:\n%s", line)
	}
	if strings.Contains(line, "secret plan") {
		t.Fatalf("the log holds the event's text:\n%s", line)
	}
}

// brokenOutbox's Take always fails, as a file store's does on a queue
// file that is not one; it counts its calls.
type brokenOutbox struct {
	memOutbox
	takes atomic.Int64
}

func (o *brokenOutbox) Take(context.Context, string, time.Time, int) ([]store.Due, error) {
	o.takes.Add(1)
	return nil, errors.New("webhook queue DATA/webhooks/x.queue: not a queue file")
}

// A queue that cannot be read is logged at warn once, not at every poll
// (five times a second, every destination: 18 000 lines an hour that
// buried the rest of the log), and once more when it reads again.
func TestUnreadableQueueIsLoggedOnce(t *testing.T) {
	t.Parallel()
	ob := &brokenOutbox{}
	var logs bytes.Buffer
	d, err := webhook.New(webhook.Config{URLs: []string{"http://127.0.0.1:1/hook"}, Keys: [][]byte{make([]byte, 32)}, Outbox: ob, Poll: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	for ob.takes.Load() < 50 {
		select {
		case <-done:
			t.Fatal("the deliverer ended")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	if n := strings.Count(logs.String(), "not a queue file"); n != 1 {
		t.Fatalf("%d polls that failed logged %d times, not once:\n%.600s", ob.takes.Load(), n, logs.String())
	}
}

// doneOutbox records the events settled Done.
type doneOutbox struct {
	memOutbox
	mu   sync.Mutex
	done []string
}

func (o *doneOutbox) Done(_ context.Context, _ string, d store.Due) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done = append(o.done, d.ID)
	return nil
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An attempt the receiver answered 2xx is settled delivered though the
// server shuts down as the answer comes: only the attempts still without
// an answer are left queued, to be sent again at the next start. Before,
// a delivered event was left queued too and sent again.
func TestDeliveredAtShutdownIsSettled(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:1/hook"
	ob := &doneOutbox{memOutbox: memOutbox{queued: map[string][]store.Due{store.DestinationID(url): {{Event: store.Event{ID: "evt_answered",
		Type: store.EventMessageCreated, Thread: "t", At: time.Now(), Message: []byte(`{}`)}}}}, took: make(chan struct{})}}
	ctx, cancel := context.WithCancel(context.Background())
	answer := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		cancel() // the server shuts down as the receiver's 2xx comes back
		return &http.Response{StatusCode: http.StatusNoContent, Status: "204 No Content", Body: http.NoBody, Request: r}, nil
	})
	d, err := webhook.New(webhook.Config{URLs: []string{url}, Keys: [][]byte{make([]byte, 32)}, Outbox: ob, Poll: time.Millisecond,
		Client: &http.Client{Transport: answer}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	d.Run(ctx) // returns once the attempt has ended
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if len(ob.done) != 1 || ob.done[0] != "evt_answered" {
		t.Fatalf("settled %q: the answered event stays queued, to be sent again", ob.done)
	}
}
