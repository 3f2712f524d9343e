package store

import (
	"context"
	"crypto/subtle"

	"github.com/chatrelay/chatrelay"
)

// Agents keeps the agent keys of MCP over HTTP (contract Part 5,
// chatrelay.AgentKey): only each key's SHA-256 digest is kept. A change of
// the keys (an add or a revoke, by any process or node) is announced on the
// store's feed as Batch{Thread: AgentsTopic, Agents: true}, so that a
// server ends a revoked key's sessions at once; after a feed loss the
// backend announces one too (the keys may have changed meanwhile).
type Agents interface {
	// AddAgent stores a new key. A key whose id or digest is already
	// stored is refused with ClientIDConflict (never the case for a fresh
	// chatrelay.NewAgentKey).
	AddAgent(ctx context.Context, k chatrelay.AgentKey) error

	// AgentKeys lists every key, revoked ones included, newest first.
	AgentKeys(ctx context.Context) ([]chatrelay.AgentKey, error)

	// RevokeAgent revokes a key and returns it; revoking one already
	// revoked changes nothing. NotFound for no such key.
	RevokeAgent(ctx context.Context, id string) (chatrelay.AgentKey, error)

	// ResolveAgent finds the key of a digest, comparing digests in
	// constant time, in its current state (the caller checks it).
	// Unauthorized if no key has it.
	ResolveAgent(ctx context.Context, digest string) (chatrelay.AgentKey, error)
}

// AgentsTopic is the Batch.Thread of a change of the agent keys: not a
// thread id, so that no thread's reader is handed it (Feed publishes it to
// its own readers only).
const AgentsTopic = "agents"

// UnknownAgent is the refusal of a key no store holds.
func UnknownAgent() error {
	return chatrelay.Errorf(chatrelay.Unauthorized, "unknown agent key")
}

// FindAgent is ResolveAgent for a backend: the key of digest among keys,
// every key compared, in constant time each; UnknownAgent if none has it.
func FindAgent(keys []chatrelay.AgentKey, digest string) (chatrelay.AgentKey, error) {
	found := -1
	for i, k := range keys {
		if subtle.ConstantTimeCompare([]byte(k.Digest), []byte(digest)) == 1 {
			found = i
		}
	}
	if found < 0 {
		return chatrelay.AgentKey{}, UnknownAgent()
	}
	return keys[found], nil
}
