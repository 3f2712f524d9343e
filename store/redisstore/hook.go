package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// answerHook watches every command the store's client runs, so that a feed
// waiting to subscribe again (after Redis went away) tries at once when
// Redis answers anything, instead of at the end of its backoff. On a
// shard that did not answer when its store opened, it first holds the
// command until the shard is set up (shardGate).
type answerHook struct{ s *Store }

func (h answerHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h answerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f := h.s.opt.onGate; f != nil {
			f([]redis.Cmder{cmd})
		}
		if g := h.s.gate; g != nil {
			if err := g.pass(ctx); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		h.s.answered(err)
		return err
	}
}

func (h answerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f := h.s.opt.onGate; f != nil {
			f(cmds)
		}
		if g := h.s.gate; g != nil {
			if err := g.pass(ctx); err != nil {
				for _, cmd := range cmds {
					cmd.SetErr(err)
				}
				return err
			}
		}
		err := next(ctx, cmds)
		h.s.answered(err)
		return err
	}
}

// answered notes the outcome of a command: the first success after a
// failure wakes every waiting feed.
func (s *Store) answered(err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	if s.down.Load() && s.down.CompareAndSwap(true, false) {
		s.wakeMu.Lock()
		close(s.wake)
		s.wake = make(chan struct{})
		s.wakeMu.Unlock()
	}
}

// wakeup returns a channel that is closed when Redis next answers after a
// failure. The caller marks the failure (s.down) after taking it.
func (s *Store) wakeup() <-chan struct{} {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	return s.wake
}
