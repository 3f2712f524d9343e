package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Waiting for replicas (Options.WaitReplicas, the URL's wait-replicas):
// Redis replicates asynchronously, so a primary that dies, or is stopped
// or cut off past cluster-node-timeout, may have acknowledged writes its
// replica never got, and the replica that takes over lacks them. With
// WaitReplicas set, every write the store acknowledges is followed by
// WAIT numreplicas timeout on the connection that ran it (WAIT counts the
// replication offset of its own connection's last write), in the same
// pipeline: one round trip still, Redis answers the WAIT once that many
// replicas hold everything up to the write. If fewer answer within the
// timeout, the write fails (notReplicatedError, 503 store_unavailable): it
// is stored on the primary but not acknowledged, as a call whose answer
// is lost; a client's retry with its client_id gets it as a replay.
//
// The choke point is a hook on the client (on every node's client of a
// cluster, where go-redis has grouped a pipeline's commands by node): a
// pipeline that holds a write gets a WAIT appended, and a write sent
// alone is sent as a pipeline of itself and the WAIT. Reads, the
// scripts that only read or keep bookkeeping (noWaitScripts) and calls
// under noWait (the readiness probe) are sent as they are. A MULTI/EXEC
// cannot carry a WAIT (Redis answers it at once inside a transaction, and
// go-redis reads a transaction's replies as one): the few that matter
// run on one connection with waitOn after them (withPush).

// notReplicatedError is a write that fewer replicas than asked hold
// within the timeout. It is not a Redis error reply, so the store answers
// it 503 store_unavailable.
type notReplicatedError struct {
	want, got int64
	err       error // WAIT's own failure, if it had no answer
}

func (e *notReplicatedError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("redis: WAIT for %d replicas failed: %v", e.want, e.err)
	}
	return fmt.Sprintf("redis: the write reached %d of the %d replicas waited for (WAIT timed out)", e.got, e.want)
}

func (e *notReplicatedError) Unwrap() error { return e.err }

// noWaitKey marks a context whose writes need no WAIT.
type noWaitKey struct{}

// noWait is ctx with its writes sent without WAIT: writes that no one is
// told were stored (the readiness probe's).
func noWait(ctx context.Context) context.Context { return context.WithValue(ctx, noWaitKey{}, true) }

// waitHook sends a WAIT after each write on c (see above).
type waitHook struct {
	c       *redis.Client
	n       int64 // replicas
	timeout int64 // ms
}

func (h waitHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h waitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !needsWait(cmd) || ctx.Value(noWaitKey{}) != nil {
			return next(ctx, cmd)
		}
		// Sent as a pipeline of one, which ProcessPipelineHook gives its
		// WAIT: the same connection. This hook is the client's outer one
		// (newStore), so the hooks after it see the write once, there.
		p := h.c.Pipeline()
		p.Process(ctx, cmd)
		_, err := p.Exec(ctx)
		return err
	}
}

func (h waitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(noWaitKey{}) != nil || isTx(cmds) || !anyNeedsWait(cmds) {
			return next(ctx, cmds)
		}
		wait := redis.NewIntCmd(ctx, "wait", h.n, h.timeout)
		err := next(ctx, append(cmds[:len(cmds):len(cmds)], wait))
		if short := h.short(wait); short != nil {
			// A write answered nil (a script with no return) is
			// refused as well; an error reply wrote nothing.
			for _, c := range cmds {
				if answered(c.Err()) && needsWait(c) {
					c.SetErr(short)
				}
			}
			if answered(err) {
				err = short
			}
		}
		return err
	}
}

// answered reports whether err is no error or Redis's nil answer.
func answered(err error) bool { return err == nil || errors.Is(err, redis.Nil) }

// short is the error of a WAIT that did not answer enough replicas, or nil.
func (h waitHook) short(wait *redis.IntCmd) error {
	got, err := wait.Result()
	if err != nil {
		return &notReplicatedError{want: h.n, err: err}
	}
	if got < h.n {
		return &notReplicatedError{want: h.n, got: got}
	}
	return nil
}

// waitOn sends WAIT on tx's connection, after its writes: nil once enough
// replicas hold them, else a notReplicatedError. It does nothing when the
// store does not wait for replicas.
func (s *Store) waitOn(ctx context.Context, tx *redis.Tx) error {
	if s.opt.WaitReplicas <= 0 {
		return nil
	}
	h := newWaitHook(nil, s.opt)
	wait := redis.NewIntCmd(ctx, "wait", h.n, h.timeout)
	tx.Process(ctx, wait)
	return h.short(wait)
}

// newWaitHook is the hook that waits on c for opt.WaitReplicas replicas,
// opt.WaitTimeout at most (defaultWaitTimeout if unset).
func newWaitHook(c *redis.Client, opt Options) waitHook {
	timeout := opt.WaitTimeout
	if timeout <= 0 {
		timeout = defaultWaitTimeout
	}
	return waitHook{c: c, n: int64(opt.WaitReplicas), timeout: timeout.Milliseconds()}
}

// isTx reports whether cmds are a MULTI/EXEC (after an ASKING).
func isTx(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "asking":
			continue
		case "multi":
			return true
		}
		return false
	}
	return false
}

func anyNeedsWait(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if needsWait(c) {
			return true
		}
	}
	return false
}

// needsWait reports whether cmd may write something the store
// acknowledges: anything but a read (readCommands) or a script of
// noWaitScripts. A command unknown here waits: a needless WAIT costs
// time, a missing one loses writes.
func needsWait(cmd redis.Cmder) bool {
	name := cmd.Name()
	switch name {
	case "evalsha", "eval", "fcall":
		args := cmd.Args()
		if len(args) < 2 {
			return true
		}
		// A function's name is a *string (fcallArgs), a script's SHA-1 a string.
		id := argText(args[1])
		if name == "eval" { // the script's source: named by its SHA-1, as EVALSHA does (rare: once per script and Redis)
			sum := sha1.Sum([]byte(id))
			id = hex.EncodeToString(sum[:])
		}
		return !noWaitScripts[id]
	}
	return !readCommands[name]
}

// readCommands are the commands that write nothing, or nothing a client
// is told was stored: XREADGROUP's pending entries (a lost one is
// delivered again) and a blocking read's connection must not wait;
// PUBLISH's message is gone once sent; FUNCTION LOAD and SCRIPT LOAD are
// sent again when missing.
var readCommands = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`
		get getrange mget strlen exists type ttl pttl
		hget hgetall hmget hexists hlen hvals hkeys hscan hstrlen
		lrange llen lindex
		smembers sismember scard
		zrange zrevrange zrangebyscore zrevrangebyscore zscore zmscore zcard zcount zrank zrevrank
		xlen xrange xrevrange xinfo xpending xread xreadgroup
		scan keys randomkey dbsize
		ping echo info client cluster command hello auth select readonly readwrite asking time
		wait waitaof multi exec discard watch unwatch quit reset
		subscribe unsubscribe psubscribe punsubscribe ssubscribe sunsubscribe publish spublish pubsub
		function script config memory object debug
		evalsha_ro eval_ro fcall_ro`) {
		readCommands[c] = true
	}
}

// noWaitScripts are the scripts (by SHA-1, as EVALSHA names them and
// needsWait names EVAL's source; by function name, as FCALL does) that need no
// WAIT: they only read (readScript and changesScript may create the
// generation key), or keep what no client is told was stored: rate
// windows and stream leases, retention, the create lock, the outbox's
// and the pushes' claims, the generation's losses, unreadable marks and
// the collection of orphaned uploads.
var noWaitScripts = map[string]bool{}

func init() {
	for _, sc := range []*redis.Script{readScript, changesScript, messageScript, indexScript, pendingScript,
		sweepScript, collectScript, markLostScript, markScript, claimScript, pushClaimScript,
		undoScript, heldScript, acquireScript, renewScript, lockScript, unlockScript, takeScript.Script} {
		noWaitScripts[sc.Hash()] = true
	}
	_, prefix := library() // as FCALL names it (takeScript.name, set by another init)
	noWaitScripts[prefix+takeScript.fn] = true
}

// Query parameters of a store URL that the store reads itself.
const (
	paramWaitReplicas = "wait-replicas"
	paramWaitTimeout  = "wait-timeout"
)

// defaultWaitTimeout is WAIT's timeout when wait-replicas is given alone.
const defaultWaitTimeout = time.Second

// takeWaitParams removes wait-replicas and wait-timeout from the query
// of spec (which go-redis would refuse) and sets them in opt. The
// timeout must be under the store's timeout: a WAIT that outlasts the
// call would fail it with no answer.
func takeWaitParams(spec string, opt *Options) (string, error) {
	base, query, ok := strings.Cut(spec, "?")
	if !ok {
		return spec, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return spec, nil // go-redis says what is wrong
	}
	if !q.Has(paramWaitReplicas) && !q.Has(paramWaitTimeout) {
		return spec, nil
	}
	n, err := strconv.Atoi(q.Get(paramWaitReplicas))
	if err != nil || n < 0 {
		return "", store.ConfigErrorf("store: %q: %s wants a number of replicas (0: none)", where(spec), paramWaitReplicas)
	}
	d := defaultWaitTimeout
	if t := q.Get(paramWaitTimeout); t != "" {
		if d, err = time.ParseDuration(t); err != nil || d < time.Millisecond {
			return "", store.ConfigErrorf("store: %q: %s wants a duration of at least 1ms, such as 500ms", where(spec), paramWaitTimeout)
		}
	}
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = chatrelay.DefaultStoreTimeout
	}
	if n > 0 && d >= timeout {
		return "", store.ConfigErrorf("store: %q: %s (%v) must be under the store timeout (%v)", where(spec), paramWaitTimeout, d, timeout)
	}
	opt.WaitReplicas, opt.WaitTimeout = n, d
	q.Del(paramWaitReplicas)
	q.Del(paramWaitTimeout)
	if len(q) == 0 {
		return base, nil
	}
	return base + "?" + q.Encode(), nil
}
