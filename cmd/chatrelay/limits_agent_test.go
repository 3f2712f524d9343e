package main

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// The walks of the agent keys' limits (contract Part 5): each on a data
// folder of its own, by `chatrelay agent add` (the binding that takes
// them) and by the store itself; a refused add leaves no key.
func init() {
	walks["agent.name"] = walk{custom: func(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
		a := agentWalk(t)
		r := a.add(t, cp(l.Max+1))
		a.refused(t, r, chatrelay.InvalidName, 1, fmt.Sprint("at most ", l.Max))
		_, k, err := chatrelay.NewAgentKey("x", nil, time.Now())
		assert.Success(t, err)
		k.Name = cp(l.Max + 1)
		assert.Code(t, a.st.AddAgent(t.Context(), k), chatrelay.InvalidName)
		a.count(t, 0)
		r = a.add(t, cp(l.Max))
		assert.True(t, r.err == nil, "a name of %d: %v", l.Max, r.err)
		keys := a.count(t, 1)
		assert.Equal(t, "the name kept", keys[0].Name, cp(l.Max))
	}}
	walks["agent.threads"] = walk{custom: func(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
		a := agentWalk(t)
		ids := make([]string, l.Max+1)
		for i := range ids {
			ids[i] = fmt.Sprintf("%016x", i+1)
		}
		r := a.add(t, "scoped", "--threads", strings.Join(ids, ","))
		a.refused(t, r, chatrelay.InvalidThread, 2, fmt.Sprint("at most ", l.Max))
		_, k, err := chatrelay.NewAgentKey("x", ids[:1], time.Now())
		assert.Success(t, err)
		k.Threads = ids
		assert.Code(t, a.st.AddAgent(t.Context(), k), chatrelay.InvalidThread)
		a.count(t, 0)
		r = a.add(t, "scoped", "--threads", strings.Join(ids[:l.Max], ","))
		assert.True(t, r.err == nil, "a key of %d threads: %v", l.Max, r.err)
		keys := a.count(t, 1)
		assert.Equal(t, "the threads kept", len(keys[0].Threads), l.Max)
	}}
	walks["agent.active"] = walk{custom: func(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
		// l.Max-1 keys by the store, the l.Max-th by the CLI; one more is
		// refused by both, a revoked key is not counted.
		a := agentWalk(t)
		for i := range l.Max - 1 {
			_, k, err := chatrelay.NewAgentKey(fmt.Sprint("k", i), nil, time.Now())
			assert.Success(t, err)
			assert.Success(t, a.st.AddAgent(t.Context(), k))
		}
		r := a.add(t, "last")
		assert.True(t, r.err == nil, "key %d: %v", l.Max, r.err)
		r = a.add(t, "one more")
		a.refused(t, r, chatrelay.AgentLimit, 1, fmt.Sprint(l.Max, " active"))
		_, k, err := chatrelay.NewAgentKey("one more", nil, time.Now())
		assert.Success(t, err)
		assert.Code(t, a.st.AddAgent(t.Context(), k), chatrelay.AgentLimit)
		keys := a.count(t, l.Max)
		_, err = a.st.RevokeAgent(t.Context(), keys[0].ID)
		assert.Success(t, err)
		r = a.add(t, "in its place")
		assert.True(t, r.err == nil, "a key after a revoke: %v", r.err)
		a.count(t, l.Max+1)
	}}
}

// agentWalkEnv is a data folder of its own and its file store.
type agentWalkEnv struct {
	data string
	st   store.Agents
}

func agentWalk(t *testing.T) *agentWalkEnv {
	t.Helper()
	data := t.TempDir()
	st, err := filestore.OpenFile(data, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	return &agentWalkEnv{data: data, st: st}
}

// add runs chatrelay agent add on the folder.
func (a *agentWalkEnv) add(t *testing.T, name string, flags ...string) cliResult {
	t.Helper()
	return runCLI(t, nil, "", append([]string{"agent", "add", name, "--data", a.data, "--fsync", "never"}, flags...)...)
}

// refused checks a refused add: its code, exit status and message, and
// that no key was printed.
func (a *agentWalkEnv) refused(t *testing.T, r cliResult, code chatrelay.Code, exit int, says string) {
	t.Helper()
	assert.Equal(t, fmt.Sprintf("code (%v)", r.err), chatrelay.CodeOf(r.err), code)
	assert.Equal(t, "exit status", exitCode(r.err), exit)
	assert.True(t, strings.Contains(r.err.Error(), says), "the message %q does not say %q", r.err, says)
	assert.Equal(t, "standard output", r.stdout, "")
}

// count checks how many keys the store holds and returns them.
func (a *agentWalkEnv) count(t *testing.T, n int) []chatrelay.AgentKey {
	t.Helper()
	keys, err := a.st.AgentKeys(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "keys stored", len(keys), n)
	return keys
}
