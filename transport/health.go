package transport

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/chatrelay/chatrelay/store"
)

// handleHealthz serves GET /healthz: 200 whenever the process answers
// HTTP at all. It checks nothing else, so a liveness probe restarts only a
// wedged process, never one whose disk is full.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeBytes(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

// readiness is the body of GET /readyz.
type readiness struct {
	Ready        bool   `json:"ready"`
	Store        string `json:"store"`                 // "ok", "full" (writes refused, reads go on: still ready), "partial" (a shard's threads refused, the others' go on: still ready), "not writable" or "unchecked" (a store that cannot say)
	StoreError   string `json:"store_error,omitempty"` // why not writable, in a few words ("disk full"), never a path
	Feed         string `json:"feed"`                  // "ok" or "not live"
	ShuttingDown bool   `json:"shutting_down"`         // Drain or Shutdown was called
}

// handleReadyz serves GET /readyz: 200 when the server should get traffic,
// 503 otherwise. Ready means: not shutting down, the change feed (Run) is
// registered, still running and, for a store whose feed can lose its
// source (store.FeedStater: Redis's subscription), live now; and the store
// takes writes now (for the file store, a probe file is created and
// removed in the chat folder). The store check is bounded by
// readyzTimeout, not by the probe's own patience. The body names each part; causes go to the log (on a
// change), never to the client, as they may hold host paths.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	// The check runs to its own end whatever the probe does: a probe that
	// hangs up first (a timeout under readyzTimeout) would cancel it, and
	// a canceled check finds no shard down (its caller gave up).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), readyzTimeout)
	defer cancel()
	rd, cause := s.readiness(ctx)
	why := ""
	switch {
	case rd.ShuttingDown:
		why = "shutting down"
	case !rd.Ready:
		why = rd.Store + "/" + rd.Feed
	case rd.Store == "full" || rd.Store == "partial":
		why = rd.Store // ready, but logged as a change all the same
	}
	if prev, _ := s.ops.lastNot.Swap(why).(string); prev != why {
		switch why {
		case "":
			switch prev {
			case "full", "partial": // ready all along
				s.log.Info("the store takes writes again")
			default:
				s.log.Info("ready")
			}
		case "full":
			s.log.Warn("the store is full: writes answer 503, reads go on; still ready", "err", cause)
		case "partial":
			s.log.Warn("a shard of the store does not answer: its threads answer 503, the others' go on; still ready", "err", cause)
		case "shutting down":
			s.log.Info("not ready: shutting down") // asked for (Drain, Shutdown): no trouble to warn of
		default:
			s.log.Warn("not ready", "store", rd.Store, "feed", rd.Feed, "err", cause)
		}
	}
	status := http.StatusOK
	if !rd.Ready {
		status = http.StatusServiceUnavailable
	}
	b, _ := json.Marshal(rd)
	writeBytes(w, status, b)
}

// readyzTimeout bounds the store check of /readyz.
const readyzTimeout = 2 * time.Second

// readiness evaluates /readyz; cause is the store's error, if any.
func (s *Server) readiness(ctx context.Context) (rd readiness, cause error) {
	rd.ShuttingDown = s.ops.draining.Load()
	// The store first: a sharded store's FeedLive excuses the feed of a
	// shard its Check found down (store.Partial).
	rd.Store = "unchecked"
	if c, ok := s.cfg.Store.(store.Checker); ok {
		rd.Store = "ok"
		if cause = c.Check(ctx); cause != nil {
			switch {
			case store.Full(cause):
				rd.Store = "full" // every node alike, and reads go on: ready (store.Full)
			case store.Partial(cause):
				rd.Store = "partial" // every node alike, and the other shards' threads go on: ready
			default:
				rd.Store = "not writable"
			}
			rd.StoreError = store.Reason(cause)
		}
	}
	rd.Feed = "not live"
	select {
	case <-s.ready:
		if s.ops.feeds.Load() > 0 {
			rd.Feed = "ok"
			if fs, ok := s.cfg.Store.(store.FeedStater); ok && !fs.FeedLive() {
				rd.Feed = "not live"
			}
		}
	default:
	}
	rd.Ready = !rd.ShuttingDown && rd.Feed == "ok" && rd.Store != "not writable"
	return rd, cause
}

// Drain marks the server as shutting down: GET /readyz answers 503 from
// now on while everything else keeps working, so a load balancer stops
// sending new clients before Shutdown closes the listener. Shutdown drains
// too.
func (s *Server) Drain() { s.ops.draining.Store(true) }
