package redisstore

import (
	"context"
	"net/url"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

func init() {
	store.Register("redis", openSpec)
	store.Register("rediss", openSpec)
	store.Register("redis+cluster", openSpec)
	store.Register("rediss+cluster", openSpec)
}

// openSpec opens the Redis store of a redis:// or rediss:// spec, with the
// rate and stream limiters that every node sharing it counts in Redis,
// and the ticket key kept there.
func openSpec(ctx context.Context, spec string, opt store.Options) (*store.Backend, error) {
	if IsSharded(spec) {
		return openShardedSpec(ctx, spec, opt)
	}
	rs, err := Open(ctx, spec, Options{
		Prefix: opt.KeyPrefix, Retention: opt.Retention, MaxThreads: opt.MaxThreads, Log: opt.Log, Now: opt.Now,
		Webhooks: opt.Webhooks,
	})
	if err != nil {
		return nil, err
	}
	if err := rs.notAShard(ctx, where(spec)); err != nil {
		rs.Close()
		return nil, err
	}
	sl := NewStreamLimiter(rs, opt.Streams, 0)
	b := &store.Backend{
		Store:     rs,
		Limiter:   NewRateLimiter(rs, opt.Windows),
		Streams:   sl,
		TicketKey: rs.TicketKey, TicketKeyShared: true,
		Where:    where(spec),
		Settings: store.Settings{Retention: rs.opt.Retention, MaxThreads: rs.opt.MaxThreads},
	}
	b.OnClose(sl.Close)
	if len(opt.Webhooks) > 0 {
		b.Outbox = rs.Outbox()
		b.Settings.Webhooks = opt.Webhooks
	}
	return b, nil
}

var _ chatrelay.RateLimiter = (*RateLimiter)(nil)

// where names a Redis spec for logs, without its password.
func where(spec string) string {
	u, err := url.Parse(spec)
	if err != nil {
		return "redis"
	}
	u.User = nil
	return u.String()
}

// openShardedSpec opens the sharded store of a spec (IsSharded).
func openShardedSpec(ctx context.Context, spec string, opt store.Options) (*store.Backend, error) {
	sh, err := OpenSharded(ctx, spec, Options{
		Prefix: opt.KeyPrefix, Retention: opt.Retention, MaxThreads: opt.MaxThreads, Log: opt.Log, Now: opt.Now,
		Webhooks: opt.Webhooks,
	})
	if err != nil {
		return nil, err
	}
	s0 := sh.shards[0]
	sl := sh.NewStreamLimiter(opt.Streams, 0)
	b := &store.Backend{
		Store:     sh,
		Limiter:   sh.NewRateLimiter(opt.Windows),
		Streams:   sl,
		TicketKey: sh.TicketKey, TicketKeyShared: true,
		Where:    sh.where,
		Settings: store.Settings{Retention: s0.opt.Retention, MaxThreads: s0.opt.MaxThreads},
	}
	b.OnClose(sl.Close)
	if len(opt.Webhooks) > 0 {
		b.Outbox = sh.Outbox()
		b.Settings.Webhooks = opt.Webhooks
	}
	return b, nil
}
