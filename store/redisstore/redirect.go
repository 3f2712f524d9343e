package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redirections on a Redis Cluster. A slot on the move (redis-cli
// --cluster reshard, a failover) makes Redis refuse a command it did not
// run: MOVED (the slot is on another primary now), ASK (it is migrating
// and the command's keys are gone from here already: send it to the
// target, after ASKING) and TRYAGAIN (a multi-key command, such as each
// of the store's scripts, some of whose keys are here and some not: split
// between the two nodes of a migration, or not written yet, which Redis
// cannot tell apart, so most posts to a migrating slot wait for its end). Redis checks every key of a command, a script's too,
// before it runs anything, so sending such a command again stores nothing
// twice.
//
// go-redis's cluster client can follow them (MaxRedirects), but not
// soundly for a pipeline: its loop queues again a node's whole share when
// the share's first command was refused or its connection broke, beside
// the commands it redirected, so one command may go to two nodes at once
// (a data race on its reply), and its backoff, when the call's deadline
// ends, overwrites the answers of the commands that ran with the
// deadline's error (a stored post answered 503). So the client follows
// none (MaxRedirects -1: one attempt, sharded_open.go) and redirectHook,
// the cluster client's outer hook, follows them itself: after the call,
// it sends again exactly the commands whose own answer was MOVED, ASK or
// TRYAGAIN (or CLUSTERDOWN, briefly: below), each once a round, where
// that answer says (MOVED: to the node named, whose client go-redis
// made, nodeClients; ASK: the same, each with an ASKING before it, in one
// pipeline per node; TRYAGAIN: to the slot's primary, after a backoff),
// round after round until none is refused, within the call's context
// (the store timeout, or the caller's, if sooner) and redirectRounds
// rounds. Every other command keeps the answer it had: one that ran (an
// answer, an error reply) or may have (a lost connection, a read that
// timed out) is never sent again, and never reported failed because
// another was. A command still refused when the rounds or the context
// end keeps Redis's last refusal, or errUnanswered if the context ended
// while it was being sent again (it may have gone out); the store answers
// either 503 store_unavailable.
//
// A MULTI/EXEC (TxPipelined) is sent again whole, when Redis refused the
// whole of it (followTx).

// redirectRounds bounds the rounds of one call: MOVED and ASK are sent
// again at once, TRYAGAIN after a backoff from redirectMinBackoff,
// doubling up to redirectMaxBackoff.
// A CLUSTERDOWN (a slot with no primary: a node that has not yet taken
// in a failover, the moment it happens) is sent again the same way as a
// TRYAGAIN, within clusterDownFor of the call's first answer only: a
// primary that died leaves its slots with none for seconds (until
// cluster-node-timeout and its replica's election), and the calls then
// answer 503 at once rather than at the store timeout.
const (
	redirectRounds     = 32
	redirectMinBackoff = 10 * time.Millisecond
	redirectMaxBackoff = 100 * time.Millisecond
	clusterDownFor     = 250 * time.Millisecond
)

// nodeClients are the clients of a cluster's nodes by address, as
// go-redis makes them (ClusterClient.OnNewNode), so that a command goes
// again to the node a MOVED or an ASK names, with the node's own hooks
// (the WAIT of Options.WaitReplicas).
type nodeClients struct {
	mu sync.Mutex
	m  map[string]*redis.Client
}

func (n *nodeClients) add(c *redis.Client) {
	n.mu.Lock()
	n.m[c.Options().Addr] = c
	n.mu.Unlock()
}

func (n *nodeClients) get(addr string) *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m[addr]
}

// drop forgets c, a client go-redis closed (the node left the cluster:
// its GC closes the client; it makes a new one, add, if the node comes
// back), unless a new one took its place.
func (n *nodeClients) drop(c *redis.Client) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr := c.Options().Addr; n.m[addr] == c {
		delete(n.m, addr)
	}
}

// notSent reports whether err says a client was closed before it sent
// anything (go-redis's pool refuses a connection): the command may go
// again, elsewhere.
func notSent(err error) bool { return errors.Is(err, redis.ErrClosed) }

// redirectHook is a cluster client's outer hook (see above).
type redirectHook struct {
	nodes *nodeClients
	// onRound, if set (by tests), is called with the commands of each
	// round before they are sent again.
	onRound func(cmds []redis.Cmder)
}

func (h redirectHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redirectHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if r, _ := redirection(err); r == notRedirected {
			return err
		}
		cmd.SetErr(err)
		one := []redis.Cmder{cmd}
		h.follow(ctx, one, func(ctx context.Context, cmds []redis.Cmder) {
			cmds[0].SetErr(next(ctx, cmds[0]))
		})
		return cmd.Err()
	}
}

func (h redirectHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if isTx(cmds) && len(cmds) >= 2 {
			if h.followTx(ctx, cmds, next) {
				return firstErr(cmds[1 : len(cmds)-1])
			}
			return err
		}
		if !anyRedirected(cmds) {
			return err
		}
		h.follow(ctx, cmds, func(ctx context.Context, cmds []redis.Cmder) {
			next(ctx, cmds) // each command holds its own answer
		})
		return firstErr(cmds)
	}
}

// followTx is follow for a MULTI/EXEC (wire: MULTI, the commands, EXEC),
// which is one command: go-redis gives each of its commands the
// transaction's refusal (MOVED, ASK or TRYAGAIN, for EXEC's EXECABORT: it
// ran nothing) only when the whole transaction was refused. It is sent
// again whole: after MOVED to the node named, otherwise through next (to
// the slot's primary) after a backoff; a transaction told ASK so waits
// for the migration's end (MOVED). It reports whether it sent anything.
func (h redirectHook) followTx(ctx context.Context, wire []redis.Cmder, next redis.ProcessPipelineHook) bool {
	cmds := wire[1 : len(wire)-1]
	backoff := redirectMinBackoff
	downUntil := time.Now().Add(clusterDownFor)
	sent := false
	for range redirectRounds {
		r, addr := txRedirection(cmds)
		if r == notRedirected || r == down && time.Now().After(downUntil) {
			return sent
		}
		var node *redis.Client
		if r == moved {
			node = h.nodes.get(addr)
		}
		if node == nil && !sleep(ctx, &backoff) {
			return sent
		}
		if h.onRound != nil {
			h.onRound(cmds)
		}
		if ctx.Err() != nil {
			return sent
		}
		// Not unanswered: go-redis gives a transaction's commands an
		// error (its refusal, a lost connection) only where they have
		// none, so a mark would hide the next refusal; every way out of
		// a transaction's send gives each command an answer or an error,
		// and one that did not is given the send's.
		refusals := make([]error, len(cmds))
		for i, c := range cmds {
			refusals[i] = c.Err()
			c.SetErr(nil)
		}
		sent = true
		var err error
		if node != nil {
			_, err = node.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for _, c := range cmds {
					p.Process(ctx, c)
				}
				return nil
			})
			if notSent(err) {
				// A client closed (its node left the cluster) sent
				// nothing: forget it; the transaction keeps its MOVED
				// and goes by slot next round.
				h.nodes.drop(node)
				for i, c := range cmds {
					c.SetErr(refusals[i])
				}
				continue
			}
		} else {
			err = next(ctx, wire)
		}
		if err != nil && firstErr(cmds) == nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
	}
	return sent
}

// txRedirection is the redirection of a transaction's commands (and the
// node it names), if each has the same one; none otherwise.
func txRedirection(cmds []redis.Cmder) (redirect, string) {
	if len(cmds) == 0 {
		return notRedirected, ""
	}
	err := cmds[0].Err()
	r, addr := redirection(err)
	if r == notRedirected {
		return notRedirected, ""
	}
	for _, c := range cmds[1:] {
		if c.Err() == nil || c.Err().Error() != err.Error() {
			return notRedirected, ""
		}
	}
	return r, addr
}

// errUnanswered is the error of a command sent again that no answer came
// back for: what sends it sets its error, and one that does not leaves
// this, so that no earlier refusal of it is read as its answer (and sent
// again: it may have run).
var errUnanswered = errors.New("redis: a command sent again after a redirection got no answer")

func unanswered(cmds []redis.Cmder) {
	for _, c := range cmds {
		c.SetErr(errUnanswered)
	}
}

// sleep waits *backoff, and doubles it up to redirectMaxBackoff; false if
// ctx ended first.
func sleep(ctx context.Context, backoff *time.Duration) bool {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*backoff = min(2**backoff, redirectMaxBackoff)
	return true
}

// redirect is what a command's answer asks of it.
type redirect int

const (
	notRedirected redirect = iota
	moved                  // MOVED: to the node named
	ask                    // ASK: to the node named, after ASKING
	tryAgain               // TRYAGAIN: to the slot's primary, after a while
	down                   // CLUSTERDOWN: as TRYAGAIN, within clusterDownFor
)

// redirection is what err asks of its command, and for MOVED and ASK the
// address of the node it names.
func redirection(err error) (redirect, string) {
	if err == nil || !isReply(err) {
		return notRedirected, ""
	}
	if addr, ok := redis.IsMovedError(err); ok {
		return moved, addr
	}
	if addr, ok := redis.IsAskError(err); ok {
		return ask, addr
	}
	if redis.IsTryAgainError(err) {
		return tryAgain, ""
	}
	if redis.IsClusterDownError(err) {
		return down, ""
	}
	return notRedirected, ""
}

func anyRedirected(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if r, _ := redirection(c.Err()); r != notRedirected {
			return true
		}
	}
	return false
}

// follow sends again, round after round, the commands of cmds whose own
// answer is a redirection, where it says: to a node's client, or, for
// TRYAGAIN and a node this client does not know, through bySlot (the
// cluster client's chain below the hook, which sends each to its slot's
// primary). Each command of a round is sent once, in one place; the
// round's sends are one after the other, so that no two write to a
// command at once.
func (h redirectHook) follow(ctx context.Context, cmds []redis.Cmder, bySlot func(context.Context, []redis.Cmder)) {
	backoff := redirectMinBackoff
	downUntil := time.Now().Add(clusterDownFor)
	for range redirectRounds {
		var (
			toNode   = map[*redis.Client][]redis.Cmder{}
			order    []*redis.Client // toNode's keys, in the order met
			slotted  []redis.Cmder
			again    []redis.Cmder
			wait     bool
			stranger bool // a node named that the client does not know
		)
		for _, c := range cmds {
			r, addr := redirection(c.Err())
			if r == notRedirected || r == down && time.Now().After(downUntil) {
				continue
			}
			again = append(again, c)
			switch r {
			case tryAgain, down:
				wait = true
				slotted = append(slotted, c)
				continue
			}
			node := h.nodes.get(addr)
			if node == nil {
				stranger = true
				slotted = append(slotted, c)
				continue
			}
			if _, ok := toNode[node]; !ok {
				order = append(order, node)
			}
			if r == ask {
				toNode[node] = append(toNode[node], redis.NewCmd(ctx, "asking"))
			}
			toNode[node] = append(toNode[node], c)
		}
		if len(again) == 0 {
			return
		}
		if (wait || stranger) && !sleep(ctx, &backoff) {
			return // each keeps Redis's last refusal
		}
		if h.onRound != nil {
			h.onRound(again)
		}
		for _, node := range order {
			if ctx.Err() != nil {
				return
			}
			share := toNode[node]
			refusals := make([]error, len(share))
			for i, c := range share {
				refusals[i] = c.Err()
			}
			sendEach(ctx, node, share)
			// A client closed (its node left the cluster) sent nothing:
			// forget it; its commands keep their redirection and go by
			// slot next round, as to a node the client does not know.
			for i, c := range share {
				if notSent(c.Err()) {
					h.nodes.drop(node)
					c.SetErr(refusals[i])
				}
			}
		}
		if len(slotted) > 0 && ctx.Err() == nil {
			unanswered(slotted)
			bySlot(ctx, slotted)
		}
	}
}

// sendEach sends a node's share of a round, each command on its own round
// trip (ASKING and the command it precedes on one): a plain client's
// pipeline whose read breaks gives its error to every command without
// one, those it had read the answers of too, so a share sent as one
// pipeline could report a command that ran and was answered as failed
// because a later one's answer was lost (review11a).
func sendEach(ctx context.Context, node *redis.Client, share []redis.Cmder) {
	for i := 0; i < len(share); i++ {
		if ctx.Err() != nil {
			return // the rest keep Redis's last refusal
		}
		c := share[i]
		if c.Name() != "asking" {
			c.SetErr(node.Process(ctx, c))
			continue
		}
		i++
		pair := share[i-1 : i+1]
		unanswered(pair[1:])
		p := node.Pipeline()
		for _, c := range pair {
			p.Process(ctx, c)
		}
		// Each holds its own answer; ASKING's is not read. A closed
		// client sent nothing: the command's mark would stay, so it says so.
		if _, err := p.Exec(ctx); notSent(err) {
			pair[1].SetErr(err)
		}
	}
}

// firstErr is the error of a pipeline as go-redis gives it: its first
// command's that failed.
func firstErr(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}
