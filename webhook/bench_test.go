package webhook_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/webhooktest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webhook"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// startDeliverer runs a deliverer of b's outbox to rcv until the benchmark ends.
func startDeliverer(tb testing.TB, b *storetest.Backend, rcv *webhooktest.Receiver) *webhook.Deliverer {
	tb.Helper()
	key, err := webhook.ParseSecret(rcv.Secret)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := webhook.New(webhook.Config{URLs: []string{rcv.URL}, Keys: [][]byte{key}, Outbox: b.Outbox, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return d
}

// BenchmarkWebhookDelivery: events delivered per second to a receiver on
// loopback that verifies each signature: b.N operator posts are queued
// (over 16 threads), then the deliverer is started and timed until every
// one is accepted. The file store fsyncs as in production.
func BenchmarkWebhookDelivery(b *testing.B) {
	for _, backend := range storetest.Backends() {
		b.Run(backend, func(b *testing.B) {
			rcv := webhooktest.Start(b, webhooktest.NewSecret())
			st := storetest.Open(b, backend, storetest.Options{Fsync: true, Webhooks: []string{store.DestinationID(rcv.URL)},
				Retention: chatrelay.Retention{Messages: 1 << 20}})
			for i := range b.N {
				th := fmt.Sprintf("%016x", 0xbe00+i%16)
				if _, err := st.Store.Append(context.Background(), th, store.NewMessage{Author: chatrelay.Operator, Text: "ping"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			d := startDeliverer(b, st, rcv)
			ok := d.Counter().WithLabelValues(webhook.ResultDelivered)
			for testutil.ToFloat64(ok) < float64(b.N) {
				if time.Since(start) > 5*time.Minute {
					b.Fatalf("only %v of %d delivered", testutil.ToFloat64(ok), b.N)
				}
				time.Sleep(time.Millisecond) // a benchmark's poll, not a test's wait
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkPostLatencyWebhooks: the added p99 of a post with webhooks on,
// measured in one run: each iteration appends an operator message to a
// store without webhooks and to one with them (queueing its event, while
// a deliverer sends the events to a local receiver), alternately, and
// the p50 and p99 of each are reported. The file store fsyncs as in
// production.
func BenchmarkPostLatencyWebhooks(b *testing.B) {
	for _, backend := range storetest.Backends() {
		b.Run(backend, func(b *testing.B) {
			rcv := webhooktest.Start(b, webhooktest.NewSecret())
			ret := chatrelay.Retention{Messages: 1 << 20}
			off := storetest.Open(b, backend, storetest.Options{Fsync: true, Retention: ret})
			on := storetest.Open(b, backend, storetest.Options{Fsync: true, Retention: ret, Webhooks: []string{store.DestinationID(rcv.URL)}})
			startDeliverer(b, on, rcv)
			var lOff, lOn []time.Duration
			post := func(st store.Store, th string, into *[]time.Duration) {
				t := time.Now()
				if _, err := st.Append(context.Background(), th, store.NewMessage{Author: chatrelay.Operator, Text: "ping"}); err != nil {
					b.Fatal(err)
				}
				*into = append(*into, time.Since(t))
			}
			b.ResetTimer()
			for i := range b.N {
				th := fmt.Sprintf("%016x", 0xbf00+i%16)
				if i%2 == 0 {
					post(off.Store, th, &lOff)
					post(on.Store, th, &lOn)
				} else {
					post(on.Store, th, &lOn)
					post(off.Store, th, &lOff)
				}
			}
			b.StopTimer()
			q := func(ls []time.Duration, p float64) float64 {
				slices.Sort(ls)
				return float64(ls[int(p*float64(len(ls)-1))].Microseconds())
			}
			b.ReportMetric(q(lOff, .5), "p50-off-µs")
			b.ReportMetric(q(lOn, .5), "p50-on-µs")
			b.ReportMetric(q(lOff, .99), "p99-off-µs")
			b.ReportMetric(q(lOn, .99), "p99-on-µs")
			b.ReportMetric(q(lOn, .99)-q(lOff, .99), "p99-added-µs")
		})
	}
}
