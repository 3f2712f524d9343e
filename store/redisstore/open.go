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
	rs, err := Open(ctx, spec, optionsOf(opt))
	if err != nil {
		return nil, err
	}
	if err := rs.notAShard(ctx, where(spec)); err != nil {
		rs.Close()
		return nil, err
	}
	return backendOf(rs, rs.opt, where(spec), NewRateLimiter(rs, opt.Windows), NewStreamLimiter(rs, opt.Streams, 0), opt), nil
}

// optionsOf is the Options of a store opened by spec.
func optionsOf(opt store.Options) Options {
	return Options{
		Prefix: opt.KeyPrefix, Retention: opt.Retention, MaxThreads: opt.MaxThreads, Log: opt.Log, Now: opt.Now,
		Webhooks: opt.Webhooks,
	}
}

// opened is a Redis store opened by spec, one or sharded.
type opened interface {
	store.Store
	TicketKey(ctx context.Context) ([]byte, error)
	Outbox() store.Outbox
}

// backendOf is the Backend of st, opened with o (its shards' Options):
// its limiters count in Redis, its ticket key is kept there, and it has
// an outbox when opt names webhooks.
func backendOf(st opened, o Options, where string, rl *RateLimiter, sl *StreamLimiter, opt store.Options) *store.Backend {
	b := &store.Backend{
		Store:     st,
		Limiter:   rl,
		Streams:   sl,
		TicketKey: st.TicketKey, TicketKeyShared: true,
		Where:    where,
		Settings: store.Settings{Retention: o.Retention, MaxThreads: o.MaxThreads},
	}
	b.OnClose(sl.Close)
	if len(opt.Webhooks) > 0 {
		b.Outbox = st.Outbox()
		b.Settings.Webhooks = opt.Webhooks
	}
	return b
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
	sh, err := OpenSharded(ctx, spec, optionsOf(opt))
	if err != nil {
		return nil, err
	}
	return backendOf(sh, sh.shards[0].opt, sh.where, sh.NewRateLimiter(opt.Windows), sh.NewStreamLimiter(opt.Streams, 0), opt), nil
}
