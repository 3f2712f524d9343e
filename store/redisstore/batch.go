package redisstore

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every post runs two scripts (the rate windows, then the append), and
// concurrent posts each wait for their own round trip. Sent one by one,
// each script costs Redis a read and a write system call of its own, more
// than the script itself. The batcher sends the scripts that are waiting
// together, in one pipeline on one connection (auto-pipelining, as
// Centrifugo's Redis client does): Redis reads them in one system call,
// runs them one after the other, each alone as always, and answers them in
// one write. It never waits to fill a batch: at most batchSenders calls
// are out at once; a script that finds a place free goes at once, alone,
// from its caller's goroutine; the ones that come while every place is
// taken wait, and a sender goroutine sends all that wait in the next batch.
//
// A batch is no transaction: each script decides, and fails, on its own.
// A batch whose connection fails fails each of its scripts, none of which
// is acknowledged (one may have run, as any call whose answer is lost).

// batchSenders is how many calls may be out at once (each on its own
// connection of the pool), and batchMax the most scripts in one batch.
// Each call out costs Redis a read and a write system call of its own:
// with two out rather than four, chatbench S2 made 0.8-1.1 system calls
// per post instead of 1.2-1.5, and Redis spent 0.072 ms of CPU per post
// instead of 0.081-0.100 (one out: 0.7-0.8 calls, but fewer posts per
// second, as each batch waits for the one before).
const (
	batchSenders = 2
	batchMax     = 64
)

// scriptCall is one script waiting to be sent, and where its answer goes.
type scriptCall struct {
	script *luaScript
	keys   []string
	args   []any
	done   chan *redis.Cmd // buffered: the sender never waits for the caller
}

// startBatcher starts the senders; Close stops them (s.closing) and waits.
func (s *Store) startBatcher() {
	s.calls = make(chan *scriptCall)
	s.slots = make(chan struct{}, batchSenders)
	for range batchSenders {
		if s.members.Enter() {
			go s.sendBatches()
		}
	}
}

// runScript runs script through the batcher and returns its answer, or the
// error of ctx if it ends first (the script may still run: like any call
// whose answer is lost, it is then not acknowledged).
func (s *Store) runScript(ctx context.Context, script *luaScript, keys []string, args ...any) *redis.Cmd {
	select {
	case s.slots <- struct{}{}: // a place is free: no batch to join
		defer func() { <-s.slots }()
		return s.sendOne(ctx, script, keys, args...)
	default:
	}
	c := &scriptCall{script: script, keys: keys, args: args, done: make(chan *redis.Cmd, 1)}
	select {
	case s.calls <- c:
	case <-ctx.Done():
		return failedCmd(ctx, ctx.Err())
	case <-s.closing.Done():
		return failedCmd(ctx, ErrClosed)
	}
	select {
	case cmd := <-c.done:
		return cmd
	case <-ctx.Done():
		return failedCmd(ctx, ctx.Err())
	}
}

func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// sendBatches is one sender: it takes the first script that waits, waits
// for a place, then takes every other script already waiting (up to
// batchMax), and sends them.
func (s *Store) sendBatches() {
	defer s.members.Leave()
	batch := make([]*scriptCall, 0, batchMax)
	for {
		select {
		case <-s.closing.Done():
			return
		case c := <-s.calls:
			batch = append(batch[:0], c)
		}
		select {
		case s.slots <- struct{}{}:
		case <-s.closing.Done():
			batch[0].done <- failedCmd(s.closing, ErrClosed)
			return
		}
	fill:
		for len(batch) < batchMax {
			select {
			case c := <-s.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		s.sendBatch(batch)
		<-s.slots
		clear(batch)
	}
}

// sendBatch sends one batch, bounded by Options.Timeout. A script or
// function that Redis does not have (it restarted) did not run: it is
// sent again alone, by sendOne, which loads it.
func (s *Store) sendBatch(batch []*scriptCall) {
	ctx, cancel := s.bound(s.closing)
	defer cancel()
	cmds := make([]*redis.Cmd, len(batch))
	if len(batch) == 1 {
		c := batch[0]
		cmds[0] = s.sendOne(ctx, c.script, c.keys, c.args...)
	} else {
		s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range batch {
				// On a pipeline, call's EVALSHA is not yet answered: it is
				// never turned into an EVAL here (sendOne does that).
				cmds[i] = s.call(ctx, p, c.script, c.keys, c.args...)
			}
			return nil
		})
	}
	for i, c := range batch {
		if len(batch) > 1 && (isNoScript(cmds[i].Err()) || isNoFunction(cmds[i].Err())) {
			cmds[i] = s.sendOne(ctx, c.script, c.keys, c.args...)
		}
		c.done <- cmds[i]
	}
}

func isNoScript(err error) bool {
	if err == nil { // before re: errors.As makes it escape, an allocation a call
		return false
	}
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}
