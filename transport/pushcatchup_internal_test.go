package transport

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// downStore is a store that cannot be reached: Changes and Threads fail
// store_unavailable, and are counted. Past 1000 reads it stops answering
// (blocks until its caller gives up), so that a reader that would read
// without end lets the test's clock move on.
type downStore struct {
	store.Store
	reads atomic.Int64
}

func (d *downStore) read(ctx context.Context) error {
	if d.reads.Add(1) > 1000 {
		<-ctx.Done()
		return ctx.Err()
	}
	return chatrelay.Errorf(chatrelay.StoreUnavailable, "storage is unavailable")
}

func (d *downStore) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	return store.Page{}, d.read(ctx)
}

func (d *downStore) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	return nil, d.read(ctx)
}

// TestPushCatchUpWaitsWhileTheStoreIsDown: a catch-up the store cannot
// answer is read again about once a second, not over and over.
func TestPushCatchUpWaitsWhileTheStoreIsDown(t *testing.T) {
	for _, thread := range []string{"t1", ""} {
		t.Run("thread "+thread, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &downStore{}
				ps := &pusher{
					s:        &Server{cfg: Config{Now: time.Now}, store: st, log: slog.New(slog.DiscardHandler)},
					queue:    make(chan pushTask, 1),
					catchUps: newCatchUps(time.Now().Add(-time.Minute)),
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() {
					defer close(done)
					ps.catchingUp(ctx)
				}()
				ps.catchUps.add(thread, time.Now().Add(-time.Second).UnixMilli())
				time.Sleep(10 * time.Second)
				cancel()
				<-done
				if n := st.reads.Load(); n > 12 {
					t.Errorf("the store was read %d times in 10 s while it could not be reached, want about 10", n)
				}
			})
		})
	}
}
