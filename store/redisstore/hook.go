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
	if s.checks.Load() > 0 {
		s.answers.Add(1)
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

// checking counts a check in flight and returns s.answers as it begins;
// the check calls its end when it has marked what it found (markDown).
func (s *Store) checking() (since uint64, end func()) {
	s.checks.Add(1)
	return s.answers.Load(), func() { s.checks.Add(-1) }
}

// markDown marks Redis down for a check that failed and began when
// s.answers was since, unless a call answered after it began: that
// answer is newer than the check's failure (a stalled call that timed
// out while the others went on). A call that answers while it marks is
// taken as answering after the mark.
func (s *Store) markDown(since uint64) {
	if s.answers.Load() != since {
		return
	}
	s.down.Store(true)
	if s.answers.Load() != since {
		s.answered(nil) // answered meanwhile, and may have found down not yet marked
	}
}
