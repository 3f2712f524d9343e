package redisstore

// TEMPORARY (branch v2 only, never to land): the v2 methods of the Redis
// store are being built; until then they refuse.

import (
	"context"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

func (s *Store) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	return store.Page{}, chatrelay.Errorf(chatrelay.Internal, "v2 not built on Redis yet")
}

func (s *Store) Change(ctx context.Context, thread string, c store.Change) (store.Entry, error) {
	return store.Entry{}, chatrelay.Errorf(chatrelay.Internal, "v2 not built on Redis yet")
}

func (s *Store) Pending(ctx context.Context) ([]store.PendingInteraction, error) {
	return nil, nil
}
