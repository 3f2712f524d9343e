package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/chatrelay/chatrelay/store"
)

var (
	_ store.Checker    = (*Store)(nil)
	_ store.FeedStater = (*Store)(nil)
)

// Check implements store.Checker for the readiness probe: Redis takes a
// write within Options.Timeout (or ctx's deadline, if sooner). A PING is
// not enough: a full Redis (maxmemory with noeviction) and a read-only
// replica answer it, and refuse every post. The write is a small key of
// its own, <prefix>readyz, that expires (on a cluster, each shard's, in
// its slot: every primary that holds a shard is asked).
func (s *Store) Check(ctx context.Context) error {
	_, err := s.check(ctx)
	return err
}

// check is Check, and the count of answers (Store.answers) its write
// began at: read once a late shard's gate (sharded_late.go) let it
// through, whose setup answers are older than the write; read before
// the gate if the gate refused it.
func (s *Store) check(ctx context.Context) (since uint64, err error) {
	since = s.answers.Load()
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.admit(ctx); err != nil {
		return since, err
	}
	since = s.answers.Load()
	// Without WAIT (replicas.go): the probe asks whether this Redis
	// takes writes, and a replica that lags is every node's alike.
	err = s.rdb.Set(noWait(ctx), s.prefix+"readyz", "1", readyzTTL).Err()
	if err == nil {
		return since, nil
	}
	for _, r := range writeRefusals {
		if strings.HasPrefix(err.Error(), r.prefix) {
			err = &writeRefusal{reason: r.reason, err: err}
			break
		}
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		err = &writeRefusal{reason: "Redis unreachable", err: err} // no Redis listening there, or it went away
	} else if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
		err = &writeRefusal{reason: "Redis not answering", err: err} // a stall: it took the connection, not the write, in time
	}
	return since, s.failed("check", err, &since)
}

// readyzTTL is the life of the readiness probe's key.
const readyzTTL = time.Minute

// writeRefusals are the replies of a Redis that answers but takes no
// write, with the few words /readyz says of each (store_error).
var writeRefusals = []struct{ prefix, reason string }{
	{"OOM", reasonOOM},
	{"READONLY", "Redis read-only"},
	{"MISCONF", "Redis cannot save"},
	{"NOREPLICAS", "Redis lacks replicas"},
	{"MASTERDOWN", "Redis master down"},
	{"CLUSTERDOWN", "Redis cluster down"},
}

// writeRefusal is a Redis's refusal of a write, with its reason
// (store.Reason reads it).
type writeRefusal struct {
	reason string
	err    error
}

func (e *writeRefusal) Error() string       { return e.err.Error() }
func (e *writeRefusal) Unwrap() error       { return e.err }
func (e *writeRefusal) StoreReason() string { return e.reason }

// StoreFull says a full Redis (OOM: maxmemory with noeviction), which
// every node finds alike and whose reads go on (store.Full).
func (e *writeRefusal) StoreFull() bool { return e.reason == reasonOOM }

// reasonOOM is the reason of a full Redis's refusal (StoreFull reads it).
const reasonOOM = "Redis out of memory"

// FeedLive implements store.FeedStater: no Follow call of this store has
// lost its subscription without having subscribed again and caught up
// (true when none is running).
func (s *Store) FeedLive() bool { return s.feedsDown.Load() == 0 }

// TicketKey returns the ticket signing key that every node shares, kept in
// Redis at <prefix>ticket-key. If the key is missing, it offers the key
// this store read last (a fresh random one the first time) with SET NX, and
// returns whichever key won: nodes started at once agree on one key, and
// after a Redis that lost its data the nodes that were running put back the
// key they held, so the tickets they signed stay valid and a node started
// later adopts it. The transport reads it again (transport.TicketKeys)
// before it signs a ticket and when one does not verify, so nodes agree
// again after the key changed.
func (s *Store) TicketKey(ctx context.Context) ([]byte, error) {
	return s.offerTicketKey(ctx) // bounded by keptKey
}

func (s *Store) offerTicketKey(ctx context.Context) ([]byte, error) {
	key := s.prefix + "ticket-key"
	s.tkMu.Lock()
	offer := s.ticketKey
	s.tkMu.Unlock()
	if offer == nil {
		offer = make([]byte, 32)
		rand.Read(offer)
	}
	// keptKey reads first: a key that is there is adopted without a
	// write, which a full Redis (maxmemory with noeviction) would refuse,
	// and with it a node starting then.
	got, err := s.keptKey(ctx, key, "ticket key", func() []byte { return offer })
	if err != nil {
		return nil, err
	}
	if len(got) < 32 {
		return nil, fmt.Errorf("redisstore: %s holds %d bytes, want at least 32", key, len(got))
	}
	s.tkMu.Lock()
	s.ticketKey = got
	s.tkMu.Unlock()
	return got, nil
}
