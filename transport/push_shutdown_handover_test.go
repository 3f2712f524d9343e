package transport_test

import (
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushShutdownHandsOver: pushes in flight at shutdown are handed over
// to the next start (TestPushHandedOverAtShutdown sends them), and the
// server says so: one info line counting the changes and the pushes it
// hands over, with no token, no text and no endpoint, so that an operator
// who restarts a node knows what its restart left to the next.
func TestPushShutdownHandsOver(t *testing.T) {
	t.Parallel()
	hung := pushtest.NewService(t)
	release, _ := heldUntilFreed(t)
	var arrived atomic.Int64
	hung.Respond = func(string, int) pushtest.Answer {
		arrived.Add(1)
		<-release
		return pushtest.Answer{Status: 201}
	}
	var logged transport.SyncBuffer
	withHung := withPushTo(hung.Certificate(), nil)
	e := startPush(t, pushOptions{config: func(c *transport.Config) {
		withHung(c)
		c.Log = slog.New(slog.NewTextHandler(&logged, nil))
	}})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	const subs = 3
	for i := range subs {
		status, a := e.subscribe(owner, nil, hung.Subscribe(t, "h"+strconv.Itoa(i)))
		assert.Equal(t, "a subscription "+a.Code, status, 201)
	}
	const secret = "the reply nobody may read in a log"
	_, err := e.store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: secret})
	assert.Success(t, err)
	assert.Eventually(t, 10*time.Second, "the pushes in flight", func() bool { return arrived.Load() == subs })

	e.stop()
	var line string
	for l := range strings.Lines(logged.String()) {
		if strings.Contains(l, "handed over at shutdown") {
			line = l
		}
	}
	assert.True(t, line != "", "no log line says which pushes the shutdown handed over; the log:\n%s", logged.String())
	assert.True(t, strings.Contains(line, "level=INFO"), "the line is at info: %s", line)
	assert.True(t, strings.Contains(line, "changes=1") && strings.Contains(line, "pushes="+strconv.Itoa(subs)), "the line counts the change and its %d pushes in flight: %s", subs, line)
	for _, s := range []string{secret, owner, "/push/"} {
		assert.True(t, !strings.Contains(logged.String(), s), "the log holds %q:\n%s", s, logged.String())
	}
}
