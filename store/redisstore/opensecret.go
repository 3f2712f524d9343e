package redisstore

import (
	"context"

	"github.com/chatrelay/chatrelay/store"
)

// The secret open_thread derives a client_id's token from
// (store.OpenSecrets) is <prefix>open-key, offered with SET NX as the VAPID
// key is (push.go), so that nodes that need it at once agree on one.

var _ store.OpenSecrets = (*Store)(nil)

// OpenSecret implements store.OpenSecrets: the secret kept, or the one
// that won (keptKey).
func (s *Store) OpenSecret(ctx context.Context) ([]byte, error) {
	key := s.prefix + "open-key"
	secret, err := s.keptKey(ctx, key, "open_thread secret", store.NewOpenSecret)
	if err != nil {
		return nil, err
	}
	return store.CheckOpenSecret("redisstore: "+key, secret, nil)
}

// OpenSecret implements store.OpenSecrets: shard 0's.
func (sh *Sharded) OpenSecret(ctx context.Context) ([]byte, error) {
	return sh.shards[0].OpenSecret(ctx)
}

var _ store.OpenSecrets = (*Sharded)(nil)
