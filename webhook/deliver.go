package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Config configures a Deliverer.
type Config struct {
	URLs   []string // the destinations, the operator's (serve --webhook)
	Keys   [][]byte // the secrets' keys (ParseSecrets): each event is signed with each
	Outbox store.Outbox
	// Now is the clock of the retry schedule (a test's testclock);
	// defaults to time.Now. The webhook-timestamp is always the wall
	// clock's: the receiver checks it against its own.
	Now func() time.Time
	// Client sends the attempts; defaults to one that follows no
	// redirect (a 3xx is not a 2xx). Every attempt is bounded by
	// chatrelay.WebhookTimeout.
	Client *http.Client
	// Workers bounds the attempts in flight, every destination together;
	// defaults to chatrelay.WebhookWorkers. One of them is kept for each
	// destination, so that a receiver that hangs holds back no other (with
	// more destinations than Workers, each has one, and no more).
	Workers int
	// Poll is how often each destination's queue is looked at when it
	// had nothing more; defaults to 200ms.
	Poll time.Duration
	// Schedule is the wait before each retry; defaults to
	// chatrelay.WebhookSchedule.
	Schedule []time.Duration
	Log      *slog.Logger // defaults to slog.Default()
	// Registry, if set, gets chatrelay_webhook_total{result}.
	Registry prometheus.Registerer
}

// The result label values of chatrelay_webhook_total.
const (
	ResultDelivered = "delivered" // a 2xx
	ResultFailed    = "failed"    // an attempt failed; the event is retried
	ResultDropped   = "dropped"   // the last attempt failed; the event is given up
	ResultGone      = "gone"      // the receiver answered 410 Gone, then or before: the event is given up
)

// Deliverer sends the queued events. Run owns its goroutines: one loop
// per destination, and the attempts in flight (at most Workers), all
// ended and waited for before Run returns.
type Deliverer struct {
	cfg   Config
	dests []dest
	// shared holds the slots of attempts any destination may take: Workers
	// less the one each destination keeps (its own).
	shared chan struct{}
	total  *prometheus.CounterVec
}

// dest is a destination; own is the slot kept for it, so that the
// attempts of another destination whose receiver hangs (each held for
// chatrelay.WebhookTimeout) never take every slot.
type dest struct {
	url, id string
	own     chan struct{}
	// gone is set once the receiver answered 410 Gone: it wants no more
	// events (Standard Webhooks: disable the endpoint), so this server
	// sends it none; its events are given up. The store records it
	// (store.Disabler), read before each batch of events: a restart or
	// another node keeps it disabled, until the operator enables it.
	gone *atomic.Bool
	// unrecorded is set while this server's 410 is not recorded in the
	// store (Disable failed): the store's "not disabled" is then not the
	// operator's Enable, and the next batch records it again.
	unrecorded *atomic.Bool
}

// free is how many attempts dst may start now.
func (d *Deliverer) free(dst dest) int {
	return cap(dst.own) - len(dst.own) + cap(d.shared) - len(d.shared)
}

// acquire waits for a slot for an attempt of dst, its own first, and
// returns its release; nil if ctx ended first.
func (d *Deliverer) acquire(ctx context.Context, dst dest) func() {
	select {
	case dst.own <- struct{}{}:
		return func() { <-dst.own }
	default:
	}
	select {
	case dst.own <- struct{}{}:
		return func() { <-dst.own }
	case d.shared <- struct{}{}:
		return func() { <-d.shared }
	case <-ctx.Done():
		return nil
	}
}

// New checks cfg and returns its Deliverer.
func New(cfg Config) (*Deliverer, error) {
	if cfg.Outbox == nil || len(cfg.URLs) == 0 || len(cfg.Keys) == 0 {
		return nil, errors.New("webhook: a deliverer needs URLs, a key and the store's outbox")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Client == nil {
		cfg.Client = noRedirect()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = chatrelay.WebhookWorkers
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.Schedule == nil {
		cfg.Schedule = chatrelay.WebhookSchedule
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	d := &Deliverer{cfg: cfg}
	for _, u := range cfg.URLs {
		d.dests = append(d.dests, dest{url: u, id: store.DestinationID(u), own: make(chan struct{}, 1), gone: new(atomic.Bool), unrecorded: new(atomic.Bool)})
	}
	d.shared = make(chan struct{}, max(cfg.Workers-len(d.dests), 0))
	d.total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatrelay_webhook_total",
		Help: "Webhook attempts by result: delivered (a 2xx within 10s), failed (retried later), dropped (the last retry failed: the event is given up), gone (the receiver answered 410 Gone, to this event or an earlier one: the event is given up).",
	}, []string{"result"})
	for _, r := range []string{ResultDelivered, ResultFailed, ResultDropped, ResultGone} {
		d.total.WithLabelValues(r)
	}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(d.total); err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
	}
	return d, nil
}

// noRedirect is the default client of an attempt: it follows no
// redirect (a 3xx is not a 2xx).
func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Counter is chatrelay_webhook_total (for tests and a caller's registry).
func (d *Deliverer) Counter() *prometheus.CounterVec { return d.total }

// Run delivers until ctx is done, then cancels the attempts in flight
// (their events stay queued: they are sent again, by this server after
// a restart or by another node once their lease has passed) and returns
// once every goroutine it started has ended.
func (d *Deliverer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, dst := range d.dests {
		wg.Go(func() { d.loop(ctx, dst, &wg) })
	}
	wg.Wait()
}

// loop takes the due events of one destination and starts their
// attempts, each holding one of the Workers slots (its own first).
func (d *Deliverer) loop(ctx context.Context, dst dest, wg *sync.WaitGroup) {
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	failing := "" // the error the queue last failed with: logged once, not at every poll
	for {
		release := d.acquire(ctx, dst) // at least one free slot before taking
		if release == nil {
			return
		}
		release()
		n, err := d.take(ctx, dst, wg)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != failing:
			failing = err.Error()
			d.cfg.Log.Warn("webhook: take from the queue (logged again only once it reads, or fails otherwise)", "dest", dst.id, "err", err)
		case err == nil && failing != "":
			failing = ""
			d.cfg.Log.Info("webhook: the queue reads again", "dest", dst.id)
		}
		if n > 0 {
			continue // there may be more
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// take takes what is due, up to the free slots, and starts each attempt;
// err is the queue's (some events may be taken all the same).
func (d *Deliverer) take(ctx context.Context, dst dest, wg *sync.WaitGroup) (int, error) {
	free := d.free(dst)
	if free <= 0 {
		return 0, nil
	}
	due, err := d.cfg.Outbox.Take(ctx, dst.id, d.cfg.Now(), free)
	if len(due) > 0 {
		d.readGone(ctx, dst)
	}
	for _, ev := range due {
		release := d.acquire(ctx, dst)
		if release == nil {
			return 0, err // left leased: taken again after a restart, or by another node
		}
		wg.Go(func() {
			defer release()
			d.attempt(ctx, dst, ev)
		})
	}
	return len(due), err
}

// readGone reads whether the store records dst disabled (store.Disabler):
// another node's 410, or this server's before it started again, disables
// it here too, and the operator's Enable enables it again. A store that
// does not answer leaves dst as it was, and so does one that could not
// record this server's 410 (dst.unrecorded), which it records now.
func (d *Deliverer) readGone(ctx context.Context, dst dest) {
	dis, ok := d.cfg.Outbox.(store.Disabler)
	if !ok {
		return
	}
	gone, err := dis.Disabled(ctx, dst.id)
	switch {
	case err != nil:
		return
	case gone && dst.gone.CompareAndSwap(false, true):
		d.cfg.Log.Warn("webhook: the destination is disabled in the store (its receiver answered 410 Gone): it gets no more events until it is enabled again (their events are given up, counted gone)",
			"dest", dst.id)
	case !gone && dst.gone.Load() && dst.unrecorded.Load():
		if dis.Disable(ctx, dst.id) == nil {
			dst.unrecorded.Store(false)
		}
	case !gone && dst.gone.CompareAndSwap(true, false):
		d.cfg.Log.Info("webhook: the destination is enabled again", "dest", dst.id)
	}
}

// attempt sends one event once and settles it; an event for a
// destination gone (410) is settled given up, unsent.
func (d *Deliverer) attempt(ctx context.Context, dst dest, ev store.Due) {
	var status int
	var err error
	sent := !dst.gone.Load()
	if sent {
		status, err = Send(ctx, d.cfg.Client, dst.url, d.cfg.Keys, ev.ID, Body(ev.Event))
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // without the URL, which may carry a secret: the log names the destination's ID
	}
	if err != nil && ctx.Err() != nil {
		return // shutting down, no answer: unsettled, sent again later (a 2xx is settled all the same)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chatrelay.WebhookTimeout)
	defer cancel()
	var serr error
	result := ResultDelivered
	switch {
	case sent && err == nil:
		serr = d.cfg.Outbox.Done(sctx, dst.id, ev)
	case !sent || status == http.StatusGone:
		result = ResultGone
		if sent { // a 410; unsent: an event given up because dst is gone
			dst.unrecorded.Store(true) // before gone: a batch that reads the store meanwhile keeps it disabled
			if dst.gone.CompareAndSwap(false, true) {
				d.cfg.Log.Warn("webhook: the receiver answered 410 Gone: it gets no more events, from any node or after a restart, until it is enabled again (their events are given up, counted gone); remove it from --webhook, or fix the receiver and run chatrelay webhook enable URL",
					"dest", dst.id, "event", ev.ID, "type", ev.Type)
			}
			if dis, ok := d.cfg.Outbox.(store.Disabler); ok {
				if err := dis.Disable(sctx, dst.id); err != nil {
					d.cfg.Log.Warn("webhook: record the destination disabled (it is disabled in this server only, which records it again at its next batch)", "dest", dst.id, "err", err)
				} else {
					dst.unrecorded.Store(false)
				}
			}
		}
		serr = d.cfg.Outbox.Done(sctx, dst.id, ev)
	case ev.Attempts >= len(d.cfg.Schedule):
		result = ResultDropped
		d.cfg.Log.Warn("webhook: event dropped after its last retry", "dest", dst.id, "event", ev.ID, "type", ev.Type, "err", err)
		serr = d.cfg.Outbox.Done(sctx, dst.id, ev)
	default:
		result = ResultFailed
		wait := d.cfg.Schedule[ev.Attempts]
		d.cfg.Log.Info("webhook: attempt failed, retried later", "dest", dst.id, "event", ev.ID, "type", ev.Type, "attempt", ev.Attempts+1, "retry_in", wait, "err", err)
		serr = d.cfg.Outbox.Retry(sctx, dst.id, ev, d.cfg.Now().Add(wait))
	}
	if serr != nil {
		d.cfg.Log.Warn("webhook: settle", "dest", dst.id, "event", ev.ID, "err", serr)
	}
	d.total.WithLabelValues(result).Inc() // once settled: a reader of the count sees the settled queue
}

// Send POSTs body as event id to url, signed with each of keys: nil if the
// receiver answered a 2xx within chatrelay.WebhookTimeout. status is the
// receiver's answer (0 if none).
func Send(ctx context.Context, c *http.Client, url string, keys [][]byte, id string, body []byte) (status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, chatrelay.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	ts := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "chatrelay-webhook")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, Signatures(keys, id, ts, body))
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
