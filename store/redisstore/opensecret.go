package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay/store"
)

// The secret open_thread derives a client_id's token from
// (store.OpenSecrets) is <prefix>open-key, offered with SET NX as the VAPID
// key is (push.go), so that nodes that need it at once agree on one.

var _ store.OpenSecrets = (*Store)(nil)

// OpenSecret implements store.OpenSecrets: the secret kept; if there is
// none, SET NX of a fresh one, then GET, in one transaction, so that every
// node gets the secret that won.
func (s *Store) OpenSecret(ctx context.Context) ([]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key := s.prefix + "open-key"
	if get := s.rdb.Get(ctx, key); !errors.Is(get.Err(), redis.Nil) {
		if get.Err() != nil {
			return nil, s.unavailable("open_thread secret", get.Err())
		}
		return checkOpenSecret(key, get)
	}
	var get *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, key, store.NewOpenSecret(), 0)
		get = p.Get(ctx, key)
		return nil
	})
	if err != nil {
		return nil, s.unavailable("open_thread secret", err)
	}
	return checkOpenSecret(key, get)
}

func checkOpenSecret(key string, get *redis.StringCmd) ([]byte, error) {
	raw, err := get.Bytes()
	return store.CheckOpenSecret("redisstore: "+key, raw, err)
}

// OpenSecret implements store.OpenSecrets: shard 0's.
func (sh *Sharded) OpenSecret(ctx context.Context) ([]byte, error) {
	return sh.shards[0].OpenSecret(ctx)
}

var _ store.OpenSecrets = (*Sharded)(nil)
