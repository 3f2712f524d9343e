package transport_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushWrittenWhileNoServerRan: a change written while no server ran
// (the host CLI's reply in a restart's gap) is pushed by the next server
// to start on the store, once, and what the server before it pushed is
// not pushed again. Before, no feed handed it on and no read looked for
// it: it was never pushed.
func TestPushWrittenWhileNoServerRan(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		be, before, _, thread := retryingServer(t, backend, svc, time.Second, "owner")
		_, err := before.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "before the restart"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/owner", 1)
		before.stop()

		cli := be.Another(t, storetest.Options{}) // the host CLI, while no server runs
		_, err = cli.Store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "while no server ran"})
		assert.Success(t, err)

		var logged transport.SyncBuffer
		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
			withPush(svc, nil)(c)
			c.Log = slog.New(slog.NewTextHandler(&logged, nil))
		}})
		_, pls := awaitPushes(t, svc, "/push/owner", 2)
		assert.Equal(t, "the push sent after the restart", pls[1].Message.Text, "while no server ran")
		var line string
		assert.Eventually(t, 10*time.Second, "the start's catch-up to say what it queued", func() bool {
			for l := range strings.Lines(logged.String()) {
				if strings.Contains(l, "caught up with what the feed missed") {
					line = l
				}
			}
			return line != ""
		})
		assert.True(t, strings.Contains(line, "changes=1"), "the catch-up queued the change written while no server ran, and nothing pushed before: %s", line)
		after.stop()
		assert.Equal(t, "pushes, the one before the restart not sent again", len(svc.Pushes()), 2)
	})
}
