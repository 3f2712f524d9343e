package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestCLIReplyReachesLiveSubscriber runs "chatrelay reply" 100 times, as
// the host agent does, in other processes, while an SSE client (r3labs's)
// follows the thread. Each reply must arrive, once, within 5s. The delays
// are logged, not asserted: from the reply's store write (its epoch) to
// arrival, and from starting the process to arrival.
func TestCLIReplyReachesLiveSubscriber(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		bin := mustBinary(t)
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		thread := threadN(1)
		first := e.mustPost(tok, "anyone there?") // reply needs the thread to exist

		type arrival struct {
			epoch int64
			at    time.Time
			data  string
		}
		got := make(chan arrival, 256)
		ready := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		c := sse.NewClient(e.url("/api/chat/stream"), sse.ClientMaxBufferSize(1<<20))
		c.Connection = &http.Client{Transport: e.client.Transport}
		c.Headers["X-Chat-Token"] = tok
		c.ReconnectStrategy = &backoff.StopBackOff{}
		c.LastEventID.Store([]byte(strconv.FormatInt(first.Epoch, 10)))
		subDone := make(chan error, 1)
		go func() {
			subDone <- c.SubscribeWithContext(ctx, "", func(ev *sse.Event) {
				switch string(ev.Event) {
				case "ready":
					close(ready)
				case "message":
					n, _ := strconv.ParseInt(string(ev.ID), 10, 64)
					got <- arrival{n, time.Now(), string(ev.Data)}
				}
			})
		}()
		t.Cleanup(func() {
			cancel()
			<-subDone
		})
		select {
		case <-ready:
		case err := <-subDone:
			t.Fatalf("subscription ended before ready: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("no ready event within 5s")
		}

		const replies = 100
		var fromWrite, fromStart []time.Duration
		for i := range replies {
			start := time.Now()
			epoch, err := e.cliReply(context.Background(), bin, "always", thread, "reply "+strconv.Itoa(i))
			assert.Success(t, err)
			var a arrival
			select {
			case a = <-got:
			case err := <-subDone:
				t.Fatalf("the subscription ended: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatalf("reply %d (epoch %d) did not reach the subscriber within 5s", i, epoch)
			}
			assert.Equal(t, "arrived epoch", a.epoch, epoch)
			var m message
			assert.Success(t, json.Unmarshal([]byte(a.data), &m))
			assert.True(t, m.Author == "hermes" && m.Text == "reply "+strconv.Itoa(i), "arrived %s", a.data)
			fromWrite = append(fromWrite, a.at.Sub(time.UnixMilli(epoch)))
			fromStart = append(fromStart, a.at.Sub(start))
		}
		select {
		case a := <-got:
			t.Fatalf("an extra message arrived: %s", a.data)
		default:
		}
		stats := func(d []time.Duration) (median, worst time.Duration) {
			slices.Sort(d)
			return d[len(d)/2], d[len(d)-1]
		}
		mw, ww := stats(fromWrite)
		ms, ws := stats(fromStart)
		t.Logf("CLI reply -> live SSE subscriber over %d replies: from the store write: median %v, worst %v; from starting the process: median %v, worst %v",
			replies, mw, ww, ms, ws)
	})
}
