package transport

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// expiries writes "expired" for each pending interaction within a second
// of its deadline, with one timer (for the earliest deadline) over a heap
// of every deadline this server knows: those pending when it starts
// (Store.Pending) and those the change feed brings (asked by the host CLI
// or the MCP server, in this process or another). Several servers on one
// store all do it; the store stores the expiry once (Change(Expire) on an
// interaction no longer pending changes nothing).
type expiries struct {
	s     *Server
	mu    sync.Mutex // guards h and known
	h     deadlines
	known map[string]bool // thread + " " + interaction id, for those in h
	wake  chan struct{}   // a new deadline may be the earliest
	// listing says run is to list the store's pending interactions: at
	// the start, and after the feed may have missed some (reload)
	listing atomic.Bool
}

type deadline struct {
	store.PendingInteraction
}

// deadlines is a min-heap by deadline.
type deadlines []deadline

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].Deadline < d[j].Deadline }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

func newExpiries(s *Server) *expiries {
	x := &expiries{s: s, known: make(map[string]bool), wake: make(chan struct{}, 1)}
	x.listing.Store(true)
	return x
}

// add schedules p's expiry. It never blocks (the feed calls it).
func (x *expiries) add(p store.PendingInteraction) {
	key := p.Thread + " " + p.InteractionID
	x.mu.Lock()
	if !x.known[key] {
		x.known[key] = true
		heap.Push(&x.h, deadline{p})
	}
	x.mu.Unlock()
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// reload has run schedule every interaction the store holds pending,
// after the feed may have missed some (it said Reset). It never blocks
// (the feed calls it).
func (x *expiries) reload() {
	x.listing.Store(true)
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// list schedules every interaction the store holds pending, and reports
// whether the store could say (else it is asked again: listing).
func (x *expiries) list(ctx context.Context) bool {
	x.listing.Store(false)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pending, err := x.s.store.Pending(lctx)
	if err != nil {
		if ctx.Err() == nil {
			x.s.log.Warn("interactions: list the pending ones", "err", err)
		}
		x.listing.Store(true)
		return false
	}
	for _, p := range pending {
		x.add(p)
	}
	return true
}

// noteBatch schedules the pending interactions a feed batch brings.
func (x *expiries) noteBatch(b store.Batch) {
	for _, e := range b.Messages {
		if ix := e.Interaction; ix != nil && ix.State == chatrelay.Pending {
			x.add(store.PendingInteraction{Thread: b.Thread, InteractionID: ix.ID, Deadline: ix.Deadline})
		}
	}
}

// run expires interactions until ctx is done. It first lists what is
// pending, once the feed is registered (so that nothing asked meanwhile is
// missed: the feed brings it), and again after each reload; a list the
// store cannot give is asked again a second later.
func (x *expiries) run(ctx context.Context) {
	select {
	case <-x.s.ready:
	case <-ctx.Done():
		return
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var next time.Duration = time.Hour
		if x.listing.Load() && !x.list(ctx) {
			next = time.Second
		}
		x.mu.Lock()
		if len(x.h) > 0 {
			next = min(next, time.Until(time.UnixMilli(x.h[0].Deadline).Add(x.skew())))
		}
		x.mu.Unlock()
		if next <= 0 {
			x.expireDue(ctx)
			continue
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-x.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// skew is how far the store's clock (Config.Now) is behind the real one:
// deadlines are on the store's clock.
func (x *expiries) skew() time.Duration { return time.Since(x.s.cfg.Now()) }

// expireDue writes the expiry of every interaction whose deadline passed.
// One the store cannot reach now is tried again a second later.
func (x *expiries) expireDue(ctx context.Context) {
	now := x.s.cfg.Now().UnixMilli()
	x.mu.Lock()
	var due []deadline
	for len(x.h) > 0 && x.h[0].Deadline <= now {
		d := heap.Pop(&x.h).(deadline)
		delete(x.known, d.Thread+" "+d.InteractionID)
		due = append(due, d)
	}
	x.mu.Unlock()
	for _, d := range due {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		e, err := x.s.store.Change(cctx, d.Thread, store.Change{Op: store.Expire, InteractionID: d.InteractionID})
		cancel()
		switch chatrelay.CodeOf(err) {
		case "":
			if ix := e.Interaction; ix != nil && ix.State == chatrelay.Pending {
				// The store's clock is behind ours: look again shortly.
				d.Deadline = max(d.Deadline, now) + 250
				x.add(d.PendingInteraction)
			}
		case chatrelay.NotFound: // gone with its message
		default:
			if ctx.Err() != nil {
				return
			}
			x.s.log.Warn("interactions: expire", "thread", d.Thread, "err", err)
			d.Deadline = now + time.Second.Milliseconds()
			x.add(d.PendingInteraction)
		}
	}
}
