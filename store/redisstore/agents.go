package redisstore

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The agent keys (contract Part 5) on Redis: one hash, <prefix>agents,
// from each key's id to its JSON (chatrelay.AgentKey: the digest, never
// the key). Every write is a script that checks what it read (compare and
// set) and tells the feed ("A"), so that every node looks at the keys of
// its MCP sessions again. The hash is not a thread's, so it has no
// {thread} tag; a script names it alone.

var _ store.Agents = (*Store)(nil)

// agentsKey is the hash of the agent keys.
func (s *Store) agentsKey() string { return s.prefix + "agents" }

// agentCAS sets field ARGV[1] to ARGV[3] if it still holds ARGV[2] ("" for
// none), and announces the change on the feed (ARGV[4]): 1, else 0.
var agentCAS = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (cur or '') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if string.byte(ARGV[4], 1) == 0 then redis.call('SPUBLISH', string.sub(ARGV[4], 2), 'A') else redis.call('PUBLISH', ARGV[4], 'A') end
return 1`)

// agentAdd adds field ARGV[1] with ARGV[2] if the hash has none by that
// name and still has ARGV[3] fields (the count of active keys was made of
// them: an add by another process meanwhile makes it read them again),
// and announces it on the feed (ARGV[4]): 1 added, 0 the field exists, -1
// the hash changed.
var agentAdd = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('HLEN', KEYS[1]) ~= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if string.byte(ARGV[4], 1) == 0 then redis.call('SPUBLISH', string.sub(ARGV[4], 2), 'A') else redis.call('PUBLISH', ARGV[4], 'A') end
return 1`)

func (s *Store) setAgent(ctx context.Context, id, old string, k chatrelay.AgentKey) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	js, _ := json.Marshal(k)
	n, err := agentCAS.Run(ctx, s.rdb, []string{s.agentsKey()}, id, old, string(js), s.pubFeed).Int()
	if err != nil {
		return false, s.unavailable("agents", err)
	}
	return n == 1, nil
}

// agentFields reads the hash: each key's id to its JSON.
func (s *Store) agentFields(ctx context.Context) (map[string]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	m, err := s.rdb.HGetAll(ctx, s.agentsKey()).Result()
	if err != nil && err != redis.Nil {
		return nil, s.unavailable("agents", err)
	}
	return m, nil
}

// AddAgent implements store.Agents.
// A key revoked meanwhile leaves the count of fields as it was: the add
// is then refused on a count one too high, as if it had come first.
func (s *Store) AddAgent(ctx context.Context, k chatrelay.AgentKey) error {
	if err := k.Check(); err != nil {
		return err
	}
	js, _ := json.Marshal(k)
	for {
		m, err := s.agentFields(ctx)
		if err != nil {
			return err
		}
		keys := s.parseAgents(m)
		if slices.ContainsFunc(keys, func(o chatrelay.AgentKey) bool { return o.ID == k.ID || o.Digest == k.Digest }) {
			return chatrelay.Errorf(chatrelay.ClientIDConflict, "an agent key with this id or digest is already stored")
		}
		active := 0
		for _, o := range keys {
			if o.Active() {
				active++
			}
		}
		if active >= chatrelay.LimitActiveAgents.Max {
			return chatrelay.ActiveAgentsRefusal()
		}
		n, err := s.runAgentAdd(ctx, k.ID, string(js), len(m))
		switch {
		case err != nil:
			return err
		case n == 0:
			return chatrelay.Errorf(chatrelay.ClientIDConflict, "an agent key with this id is already stored")
		case n == 1:
			return nil
		}
		// Another process added a key meanwhile: count again.
	}
}

func (s *Store) runAgentAdd(ctx context.Context, id, js string, fields int) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := agentAdd.Run(ctx, s.rdb, []string{s.agentsKey()}, id, js, fields, s.pubFeed).Int()
	if err != nil {
		return 0, s.unavailable("agents", err)
	}
	return n, nil
}

// AgentKeys implements store.Agents. A value that does not parse is left
// out (and logged): its key is refused.
func (s *Store) AgentKeys(ctx context.Context) ([]chatrelay.AgentKey, error) {
	m, err := s.agentFields(ctx)
	if err != nil {
		return nil, err
	}
	return s.parseAgents(m), nil
}

// parseAgents is the keys of the hash's fields, newest first. A key with
// a field this binary does not know (a newer chatrelay's, which may
// narrow what the key may do) is refused, as the file store refuses its
// agent keys file, rather than taken without it.
func (s *Store) parseAgents(m map[string]string) []chatrelay.AgentKey {
	keys := make([]chatrelay.AgentKey, 0, len(m))
	for id, js := range m {
		var k chatrelay.AgentKey
		dec := json.NewDecoder(strings.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&k); err != nil || k.ID != id || k.Digest == "" {
			s.log.Error("redis store: an agent key does not parse; it is refused", "id", id, "err", err)
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b chatrelay.AgentKey) int {
		if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 { // not b - a: a stored time may be any int64
			return c
		}
		return -cmpString(a.ID, b.ID)
	})
	return keys
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RevokeAgent implements store.Agents.
func (s *Store) RevokeAgent(ctx context.Context, id string) (chatrelay.AgentKey, error) {
	for {
		m, err := s.agentFields(ctx)
		if err != nil {
			return chatrelay.AgentKey{}, err
		}
		js, ok := m[id]
		var k chatrelay.AgentKey
		if !ok || json.Unmarshal([]byte(js), &k) != nil {
			return chatrelay.AgentKey{}, chatrelay.Errorf(chatrelay.NotFound, "no agent key %q", id)
		}
		if k.RevokedAt != 0 {
			return k, nil
		}
		k.RevokedAt = s.now().UnixMilli()
		if ok, err := s.setAgent(ctx, id, js, k); err != nil || ok {
			return k, err
		}
		// Another process wrote it meanwhile: read it again.
	}
}

// ResolveAgent implements store.Agents.
func (s *Store) ResolveAgent(ctx context.Context, digest string) (chatrelay.AgentKey, error) {
	keys, err := s.AgentKeys(ctx)
	if err != nil {
		return chatrelay.AgentKey{}, err
	}
	return store.FindAgent(keys, digest)
}
