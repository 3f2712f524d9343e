package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redirections on a cluster (resharding, failover). A primary that does
// not serve a command's slot answers MOVED (the slot is elsewhere), ASK
// (it is migrating and this key is gone already), TRYAGAIN (a script's
// keys are split between the two nodes of a migration) or CLUSTERDOWN (a
// slot has no primary, until a replica takes over): each is Redis's
// refusal before it runs anything, a script included (Redis checks a
// script's keys before it runs it; a redis.call that a script makes
// against the cluster's state fails with an ERR of its own, never one of
// these). Sending the command again where the answer says is therefore
// safe even for an append, and the cluster client does it
// (MaxRedirects: MOVED and ASK at once, the others after a short
// backoff), within the call's deadline (Options.Timeout).
//
// What is not safe to send again is a command that may have run: one
// whose connection broke or whose read timed out after it was written,
// and, in a pipeline, one that Redis answered (go-redis queues again a
// node's whole share of a pipeline when its first command was refused, or
// its connection broke, and may queue a redirected command twice). go-redis
// would resend those within the same MaxRedirects; so every node's
// client carries onceHook, which turns such a failure into sentOnce, an
// error go-redis does not retry, and sends a pipeline's command only if
// no node runs it now and none ran it (sentSet). answerHook, on the
// cluster client, gives the caller the original error back (settle); and
// redirectHook, the cluster client's outer hook, sends again what Redis
// refused in a pipeline that go-redis did not (TRYAGAIN to any but a
// node's first command). A MULTI/EXEC is go-redis's alone: it resends
// one only if it was refused or not written whole.

// Cluster client settings (openCluster): how many redirections a call
// follows, and the backoff before it sends again after TRYAGAIN or
// CLUSTERDOWN. The call's deadline ends it first when the cluster stays
// down.
const (
	clusterRedirects  = 32
	clusterMinBackoff = 10 * time.Millisecond
	clusterMaxBackoff = 100 * time.Millisecond
)

// sentOnce is the failure of a command that may have run: it has no
// Unwrap, so that go-redis finds in it nothing it retries (io.EOF, a
// net.Error). settle unwraps it.
type sentOnce struct{ err error }

func (e sentOnce) Error() string { return e.err.Error() }

// mayHaveRun reports whether err ends a call without a word of Redis:
// not an answer, nor an error reply (Redis refused the command, it did
// not run), nor the context's end (which go-redis never retries, and
// whose error the store reads). A lost connection or a read that timed
// out may have run the command. A connection that could not be had (a
// dead node, a full pool) did not, but sending again to the same node
// is no better: the call fails at once, as before, and the store has
// the slot map read again (reloadSlots), which finds a replica that
// took over.
func mayHaveRun(err error) bool {
	if err == nil || answered(err) {
		return false
	}
	var nr *notReplicatedError
	if errors.As(err, &nr) { // the write ran, WAIT said too few replicas have it
		return true
	}
	if _, ok := err.(sentOnce); ok {
		return true
	}
	return !isReply(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// onceHook is on every node's client of a cluster (see above).
type onceHook struct{}

func (onceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (onceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err, ok := cmd.Err().(sentOnce); ok {
			return err // failed so before: never sent again
		}
		err := next(ctx, cmd)
		if mayHaveRun(cmd.Err()) {
			cmd.SetErr(once(cmd.Err()))
		}
		if mayHaveRun(err) {
			err = once(err)
		}
		return err
	}
}

func (onceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isTx(cmds) {
			// go-redis resends a MULTI/EXEC only when it was not written
			// whole (Redis discards a transaction whose connection drops
			// before EXEC) or Redis refused it (MOVED, ASK, TRYAGAIN:
			// EXECABORT); a failure after it was written is final.
			return next(ctx, cmds)
		}
		// go-redis queues a pipeline's commands again by whole batches (all
		// of a node's after a lost connection, or after a refusal of its
		// first), and a command it redirected may be queued twice. Only
		// the commands that no node runs now and that none answered yet
		// but with a refusal (sentSet) are sent; the others keep their
		// outcome.
		set := sentIn(ctx)
		send := cmds[:0:0]
		for i, c := range cmds {
			if c.Name() == "asking" && i+1 < len(cmds) {
				continue // with its command, below
			}
			if _, ok := c.Err().(sentOnce); ok || (set != nil && !set.claim(c)) {
				continue
			}
			if i > 0 && cmds[i-1].Name() == "asking" {
				send = append(send, cmds[i-1])
			}
			send = append(send, c)
		}
		if len(send) == 0 {
			return nil // nothing sent: each command keeps its outcome
		}
		err := next(ctx, send)
		for _, c := range send {
			if mayHaveRun(c.Err()) {
				c.SetErr(once(c.Err()))
			}
			if set != nil && refused(c.Err()) {
				set.release(c) // it ran nowhere: it may go again
			}
		}
		if mayHaveRun(err) {
			err = once(err)
		}
		return err
	}
}

// refused reports whether err is Redis's refusal of a command that it
// did not run, and that may succeed if sent again (where it says, or
// after a while): the replies go-redis's cluster client sends again.
func refused(err error) bool {
	if !isReply(err) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY", "MASTERDOWN", "NOREPLICAS", "ERR max number of clients"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// sentSet holds the commands of one pipeline call on a cluster that a
// node runs or ran (and was not refused): redirectHook puts it in the
// call's context, onceHook claims each command there before it sends it.
type sentSet struct {
	mu sync.Mutex
	m  map[redis.Cmder]bool
}

type sentKey struct{}

func sentIn(ctx context.Context) *sentSet {
	s, _ := ctx.Value(sentKey{}).(*sentSet)
	return s
}

// claim reports whether c is free to send, and takes it.
func (s *sentSet) claim(c redis.Cmder) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[c] {
		return false
	}
	s.m[c] = true
	return true
}

func (s *sentSet) release(c redis.Cmder) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// redirectHook is on a cluster's client, the outer hook: a pipeline's
// commands that Redis refused (refused) and go-redis did not send again
// (TRYAGAIN or CLUSTERDOWN to any but the first command of a node's
// share; any after MaxRedirects) are sent again, after a backoff, until
// none is refused, clusterRedirects times at most, within the call's
// deadline. A single command and a MULTI/EXEC are go-redis's.
type redirectHook struct{}

func (redirectHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (redirectHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (redirectHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isTx(cmds) {
			return next(ctx, cmds)
		}
		ctx = context.WithValue(ctx, sentKey{}, &sentSet{m: make(map[redis.Cmder]bool, len(cmds))})
		err := next(ctx, cmds)
		backoff := clusterMinBackoff
		for range clusterRedirects {
			var again []redis.Cmder
			for _, c := range cmds {
				if refused(c.Err()) {
					again = append(again, c)
				}
			}
			if len(again) == 0 {
				break
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return firstErr(cmds, err) // each keeps Redis's last refusal
			case <-t.C:
			}
			backoff = min(2*backoff, clusterMaxBackoff)
			err = next(ctx, again)
		}
		return firstErr(cmds, err)
	}
}

// firstErr is the error of a pipeline as go-redis gives it: its first
// command's that failed, else err.
func firstErr(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		if e := c.Err(); e != nil {
			return e
		}
	}
	return err
}

// once is err as sentOnce.
func once(err error) error {
	if _, ok := err.(sentOnce); ok {
		return err
	}
	return sentOnce{err}
}

// settle is the error of cmd, and of the call (err), as the store reads
// them: a sentOnce's own error; and, when the call's deadline ended it
// while it waited to send cmd again, Redis's last refusal (TRYAGAIN,
// CLUSTERDOWN…), which says why, rather than the deadline.
func settle(cmd redis.Cmder, err error) error {
	cerr := cmd.Err()
	if s, ok := cerr.(sentOnce); ok {
		cerr = s.err
		cmd.SetErr(cerr)
	}
	if s, ok := err.(sentOnce); ok {
		err = s.err
	}
	if errors.Is(err, context.DeadlineExceeded) && isReply(cerr) {
		err = cerr // a read that timed out left cmd's error no reply
	}
	return err
}

// settleAll is settle for a pipeline's commands, and the pipeline's error.
func settleAll(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		settle(c, nil)
	}
	if s, ok := err.(sentOnce); ok {
		err = s.err
	}
	return err
}
