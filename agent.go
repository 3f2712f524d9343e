package chatrelay

import (
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Agent keys (contract Part 5, "MCP from anywhere"): the operator gives an
// agent that runs elsewhere a key for the MCP endpoint (serve --mcp,
// <prefix>/mcp). A key is shown once; the store keeps its SHA-256 digest.
// It reaches every thread or the threads it names; what an agent writes
// through it is hermes's, with the key's name as author_name.

const agentKeyPrefix = "cha_"

// AgentKey is an agent key as the store keeps it: never the key itself.
type AgentKey struct {
	ID        string   `json:"id"` // "a_" + 8 lowercase hex
	Name      string   `json:"name"`
	Threads   []string `json:"threads,omitempty"` // the threads it reaches; none: every thread
	CreatedAt int64    `json:"created_at"`        // epoch ms
	RevokedAt int64    `json:"revoked_at,omitempty"`
	Digest    string   `json:"digest"` // hex SHA-256 of the key (DigestOf)
}

// AgentInfo is the public object of a key (chatrelay agent list --json):
// without its digest.
type AgentInfo struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Threads   []string   `json:"threads"` // ["all"] or the thread ids
	CreatedAt int64      `json:"created_at"`
	State     GrantState `json:"state"` // active or revoked
}

// ScopeAll is how a key that reaches every thread lists its threads.
const ScopeAll = "all"

// Public is the key's public object.
func (k *AgentKey) Public() AgentInfo {
	a := AgentInfo{ID: k.ID, Name: k.Name, Threads: k.Threads, CreatedAt: k.CreatedAt, State: Active}
	if len(a.Threads) == 0 {
		a.Threads = []string{ScopeAll}
	}
	if k.RevokedAt != 0 {
		a.State = Revoked
	}
	return a
}

// Active reports whether the key may be used.
func (k *AgentKey) Active() bool { return k.RevokedAt == 0 }

// Reaches reports whether the key's scope holds thread.
func (k *AgentKey) Reaches(thread string) bool {
	return len(k.Threads) == 0 || slices.Contains(k.Threads, thread)
}

// NewAgentKey makes a key for name and scope (nil or ["all"]: every
// thread): the key to show once ("cha_" + 43 base64url characters of 32
// random bytes) and what the store keeps. It returns InvalidName for a
// name that is not valid UTF-8 or empty once cleaned (CleanName, as a
// participant's) and InvalidThread for a scope entry that is not a
// thread id.
func NewAgentKey(name string, threads []string, now time.Time) (key string, k AgentKey, err error) {
	if !utf8.ValidString(name) { // as CleanName: no name the user never wrote
		return "", AgentKey{}, Errorf(InvalidName, "the name is not valid UTF-8")
	}
	if name = cleanName(name, math.MaxInt); name == "" { // not cut: checked below
		return "", AgentKey{}, Errorf(InvalidName, "the name is empty once cleaned "+cleanedAway)
	}
	var scope []string
	if !(len(threads) == 1 && threads[0] == ScopeAll) {
		for _, t := range threads {
			t = strings.TrimSpace(t)
			if !ValidThread(t) {
				return "", AgentKey{}, Errorf(InvalidThread, "a key's threads are %q or thread ids (16 lowercase hex characters), not %q", ScopeAll, t)
			}
			if !slices.Contains(scope, t) {
				scope = append(scope, t)
			}
		}
	}
	if err := checkAgent(name, scope); err != nil {
		return "", AgentKey{}, err
	}
	key = newSecret(agentKeyPrefix)
	return key, AgentKey{ID: newID("a_", 4), Name: name, Threads: scope, CreatedAt: now.UnixMilli(), Digest: DigestOf(key)}, nil
}

// Check returns the error of a key a store must refuse: InvalidName for
// a name past LimitAgentName (or empty), InvalidThread for a scope past
// LimitAgentThreads or an entry that is not a thread id.
func (k *AgentKey) Check() error { return checkAgent(k.Name, k.Threads) }

func checkAgent(name string, scope []string) error {
	if n := utf8.RuneCountInString(name); n > LimitAgentName.Max || n < LimitAgentName.Min {
		return Errorf(InvalidName, "an agent key's name is %d code points once cleaned: at least %d, at most %d", n, LimitAgentName.Min, LimitAgentName.Max)
	}
	if len(scope) > LimitAgentThreads.Max {
		return Errorf(InvalidThread, "a key reaches %d threads: at most %d (or %q)", len(scope), LimitAgentThreads.Max, ScopeAll)
	}
	for _, t := range scope {
		if !ValidThread(t) {
			return Errorf(InvalidThread, "a key's threads are thread ids (16 lowercase hex characters), not %q", t)
		}
	}
	return nil
}

// ActiveAgentsRefusal is the AgentLimit error of a key added to a store
// that holds LimitActiveAgents.Max active keys.
func ActiveAgentsRefusal() error {
	return Errorf(AgentLimit, "the store holds %d active agent keys, the most: revoke one (chatrelay agent revoke ID) first", LimitActiveAgents.Max)
}

// ValidAgentKey reports whether s has the form of an agent key.
func ValidAgentKey(s string) bool { return validSecret(s, agentKeyPrefix) }

// ValidAgentID reports whether s has the form of an agent key's id.
func ValidAgentID(s string) bool { return validID(s, "a_", 4) }
