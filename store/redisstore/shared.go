package redisstore

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/chatrelay/chatrelay/store"
)

var _ store.Checker = (*Store)(nil)

// Check implements store.Checker for the readiness probe: Redis answers.
func (s *Store) Check(ctx context.Context) error { return s.Ping(ctx) }

// TicketKey returns the ticket signing key that every node shares, kept in
// Redis at <prefix>ticket-key. The first node to ask creates it (SET NX), so
// nodes started at once agree on one key.
func (s *Store) TicketKey(ctx context.Context) ([]byte, error) {
	key := s.prefix + "ticket-key"
	fresh := make([]byte, 32)
	rand.Read(fresh)
	if err := s.rdb.SetNX(ctx, key, fresh, 0).Err(); err != nil {
		return nil, s.unavailable("ticket key", err)
	}
	got, err := s.rdb.Get(ctx, key).Bytes()
	if err != nil {
		return nil, s.unavailable("ticket key", err)
	}
	if len(got) < 32 {
		return nil, fmt.Errorf("redisstore: %s holds %d bytes, want at least 32", key, len(got))
	}
	return got, nil
}
