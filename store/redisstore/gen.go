package redisstore

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A Redis that restarts without its data (no persistence, a lost volume, a
// failover to an empty replica) answers as if the deployment were new:
// every thread is empty. Clients hold messages that are gone, and their
// cursors point into them. The generation key tells the two apart:
//
//	<prefix>generation  hash: "id", random, one per data set; "start", the
//	                    epoch (ms) at which this data set began; "lost", the
//	                    newest epoch known to have been lost with an
//	                    earlier data set (0 if none)
//
// Every append that makes a thread (in its script), every read (Since,
// Changes) and every feed (re)subscription creates it if it is missing,
// with lost = the newest epoch the store has seen: 0 for a new deployment (or a
// node that never saw the old data), and what was lost for a Redis that
// lost its data under a running node. A store that then reads an id other
// than the one it saw before knows that the data was lost: it raises lost
// to the newest epoch it had seen (other nodes may have seen newer ones
// than the node that recreated the key), offers its ticket key again if it
// holds it (see TicketKey; shard 0 of several), records its shard again (claimShard) if it is one of several
// instances, and makes its feeds resubscribe, and they reset every thread
// they knew.
//
// A full Redis (maxmemory with noeviction) refuses every write and every
// MULTI, even one of reads only, but runs a script until it calls a write
// command. So the reads that must work then (Changes, the feed's index,
// Since once its MULTI is refused) are scripts that only read: each reads
// the generation with what it reads, and only if it is missing creates it,
// a write, and reads again (withGen). A full Redis refuses only the very
// first read of a data set.
//
// Since answers Reset for a cursor into lost data: 0 < since <= lost. That
// is only ever a cursor of the old data set (every epoch of the new one is
// later, clocks permitting), never a cursor past the newest message of a
// thread that lost nothing, which means "nothing newer". If every node
// restarts together with an empty Redis, nothing remembers the old data
// and clients are not told: run Redis with persistence.

// generation is what the generation key holds.
type generation struct {
	id    string
	start int64 // when this data set began (epoch ms)
	lost  int64 // the newest epoch lost with an earlier data set; 0 if none
}

// genCmds queues, in a MULTI, the commands that create the generation key
// if it is missing and read it.
func (s *Store) genCmds(ctx context.Context, p redis.Pipeliner) *redis.SliceCmd {
	p.HSetNX(ctx, s.genKey, "id", randomHex(8))
	p.HSetNX(ctx, s.genKey, "start", s.now().UnixMilli())
	p.HSetNX(ctx, s.genKey, "lost", s.seen.Load())
	return p.HMGet(ctx, s.genKey, "id", "start", "lost")
}

// createGen creates the generation key if it is missing (a MULTI, a
// write: a full Redis refuses it).
func (s *Store) createGen(ctx context.Context) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		s.genCmds(ctx, p)
		return nil
	})
	return err
}

// withGen answers what read answers: the values of a read-only script
// whose first three are the generation's id, start and lost ("" if it is
// missing: readScript, changesScript, indexScript). If the generation is
// missing (the first read of a data set), it creates it (createGen) and
// reads again, so that what a call answers and its generation are still
// read together: a full Redis fails only that first read.
func (s *Store) withGen(ctx context.Context, read func() ([]string, error)) ([]string, error) {
	for again := false; ; again = true {
		res, err := read()
		if err != nil || len(res) < 3 || res[0] != "" {
			return res, err
		}
		if again {
			return nil, errors.New("the generation was removed again as it was created")
		}
		if err := s.createGen(ctx); err != nil {
			return nil, err
		}
	}
}

// genFrom is the generation of res, the answer of a script withGen runs.
func genFrom(res []string) generation {
	if len(res) < 3 {
		return generation{}
	}
	return generation{id: res[0], start: parseInt(res[1]), lost: parseInt(res[2])}
}

func parseInt(str string) int64 {
	n, _ := strconv.ParseInt(str, 10, 64)
	return n
}

func toInt(v any) int64 {
	str, _ := v.(string)
	n, _ := strconv.ParseInt(str, 10, 64)
	return n
}

// see records that epoch e exists in the current data set.
func (s *Store) see(e int64) {
	for {
		cur := s.seen.Load()
		if e <= cur || s.seen.CompareAndSwap(cur, e) {
			return
		}
	}
}

// checkGen notes the generation a call read and returns it with lost
// raised to what this store knows. The first time the store sees an id
// other than the one it saw before, Redis lost its data: it records the
// newest epoch it had seen as lost, offers its ticket key again (shard 0
// only, which holds it) and makes its feeds (but self, a feed that is
// checking) resubscribe. The caller
// records what it read (see) only after checkGen returns, so what is
// recorded as lost is never of the new data.
func (s *Store) checkGen(ctx context.Context, g generation, self *follower) generation {
	if g.id == "" {
		return g
	}
	if cur := s.gen.Load(); cur != nil && cur.id == g.id {
		g.lost = max(g.lost, cur.lost)
		return g
	}
	lost := false
	defer func() {
		if lost { // outside lossMu: a feed's sync may be waiting for it
			s.kickFeeds(self)
		}
	}()
	s.lossMu.Lock()
	defer s.lossMu.Unlock()
	cur := s.gen.Load()
	if cur != nil && cur.id == g.id {
		g.lost = max(g.lost, cur.lost)
		return g
	}
	if cur == nil { // the first generation this store sees
		s.gen.Store(&g)
		return g
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	seen := s.seen.Load()
	recorded, err := markLostScript.Run(ctx, s.rdb, []string{s.genKey}, g.id, seen).Int64()
	if err != nil {
		// Not recorded in Redis: this call still answers with what this
		// store knows; the next store to notice records it.
		s.log.Warn("redis store: record the lost data", "err", err)
	}
	g.lost = max(g.lost, recorded, seen)
	lost = true
	s.gen.Store(&g)
	s.log.Warn("redis store: Redis lost its data (a new data set began); streams are reset and clients told",
		"lost_through_epoch", g.lost)
	if !s.other { // shard 0 holds the node-wide keys
		if _, err := s.offerTicketKey(ctx); err != nil {
			s.log.Warn("redis store: offer the ticket key again", "err", err)
		}
	}
	// The shard record went with the data: without it, the threads written
	// since would make the next node refuse this shard as a store that is
	// not sharded (claimShard).
	if shard := s.shard.Load(); shard != nil {
		if err := s.rdb.SetNX(ctx, s.prefix+"shard", *shard, 0).Err(); err != nil {
			s.log.Warn("redis store: record the shard again", "err", err)
		}
	}
	return g
}

// markLostScript raises the generation's "lost" to ARGV[2] if the
// generation is still the one of id ARGV[1]. KEYS: generation. It answers
// the resulting "lost" (-1 if the generation changed again).
var markLostScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return -1 end
local lost = tonumber(redis.call('HGET', KEYS[1], 'lost') or '0')
local n = tonumber(ARGV[2])
if n > lost then
  redis.call('HSET', KEYS[1], 'lost', ARGV[2])
  lost = n
end
return lost
`)
