package redisstore

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay/store"
)

var (
	_ store.Checker    = (*Store)(nil)
	_ store.FeedStater = (*Store)(nil)
)

// Check implements store.Checker for the readiness probe: Redis answers
// within Options.Timeout (or ctx's deadline, if sooner).
func (s *Store) Check(ctx context.Context) error { return s.Ping(ctx) }

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
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.offerTicketKey(ctx)
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
	var get *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, key, offer, 0)
		get = p.Get(ctx, key)
		return nil
	})
	if err != nil {
		return nil, s.unavailable("ticket key", err)
	}
	got, err := get.Bytes()
	if err != nil {
		return nil, s.unavailable("ticket key", err)
	}
	if len(got) < 32 {
		return nil, fmt.Errorf("redisstore: %s holds %d bytes, want at least 32", key, len(got))
	}
	s.tkMu.Lock()
	s.ticketKey = got
	s.tkMu.Unlock()
	return got, nil
}
