package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// answerHook watches every command the store's client runs, so that a feed
// waiting to subscribe again (after Redis went away) tries at once when
// Redis answers anything, instead of at the end of its backoff. It marks
// a command's lost connection or stall that ends after another command
// answered (answeredMeanwhile), so that its failure does not mark Redis
// down. On a shard that did not answer when its store opened, it first
// holds the command until the shard is set up (shardGate).
type answerHook struct{ s *Store }

func (h answerHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h answerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake(cmd) {
			return next(ctx, cmd)
		}
		if f := h.s.opt.onGate; f != nil {
			f([]redis.Cmder{cmd})
		}
		if g := h.s.gate; g != nil {
			if err := g.pass(ctx); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		// After the gate: a late shard's setup answers there, before
		// the command is sent, and is no news that it answered since.
		since := h.s.answers.Load()
		err := next(ctx, cmd)
		h.s.answered(err)
		if h.s.stale(err, since) {
			err = answeredMeanwhile{err}
			cmd.SetErr(err)
		}
		return err
	}
}

func (h answerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && handshake(cmds[0]) {
			return next(ctx, cmds)
		}
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
		since := h.s.answers.Load() // after the gate, as above
		err := next(ctx, cmds)
		h.s.answered(err)
		if h.s.stale(err, since) {
			err = answeredMeanwhile{err}
		}
		for _, cmd := range cmds {
			if cerr := cmd.Err(); h.s.stale(cerr, since) {
				cmd.SetErr(answeredMeanwhile{cerr})
			}
		}
		return err
	}
}

// handshake reports whether cmd is (the first command of) a new
// connection's handshake, which go-redis sends through the hooks inside
// the call that dialled it, past its gate (HELLO or AUTH alone, then
// SELECT, READONLY, CLIENT SETNAME as a pipeline), and the store never
// sends itself. It is no answer (Store.answers): it answered before the
// call's own command was sent, so a command that stalls after it is no
// older than the handshake's answer, and a Redis that takes connections
// and answers nothing else is down.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "readonly", "client":
		return true
	}
	return false
}

// answered notes the outcome of a command: the first success after a
// failure wakes every waiting feed.
func (s *Store) answered(err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	s.answers.Add(1)
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

// answeredMeanwhile is the failure of a command that began when Redis
// had answered fewer calls than when it failed (Store.answers): a lost
// connection or a stall (not an error reply, which is Redis's newest
// word), older news than the answer, which does not mark Redis down
// (Store.failed). It is the command's error as its caller reads it.
type answeredMeanwhile struct{ error }

func (e answeredMeanwhile) Unwrap() error { return e.error }

// stale reports whether err is a failure of a command begun when
// s.answers was since, that another call's answer overtook: neither an
// answer, nor an error reply, nor its caller's giving up, nor marked.
func (s *Store) stale(err error, since uint64) bool {
	if answered(err) || s.answers.Load() == since {
		return false
	}
	var am answeredMeanwhile
	return !isReply(err) && !errors.Is(err, context.Canceled) && !errors.As(err, &am)
}

// markDown marks Redis down for a call that failed and began when
// s.answers was since, unless a call answered after it began: that
// answer is newer than the call's failure (a stalled call that timed
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
