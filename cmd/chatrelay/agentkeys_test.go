package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestAgentList: `chatrelay agent list` shows every key, the revoked one
// included, with its scope and state, and never a key or its digest.
func TestAgentList(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	thread := chatrelay.ThreadOf(opsToken("agent list"))
	allKey, allID := addAgent(t, sa, "builder")
	oneKey, oneID := addAgent(t, sa, "reviewer", thread)
	assert.Success(t, runCLI(t, nil, "", append([]string{"agent", "revoke", oneID, "--fsync", "never"}, sa...)...).err)

	r := runCLI(t, nil, "", append([]string{"agent", "list", "--json"}, sa...)...)
	assert.Success(t, r.err)
	var list []chatrelay.AgentInfo
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &list))
	got := map[string]chatrelay.AgentInfo{}
	for _, a := range list {
		got[a.ID] = a
	}
	all, one := got[allID], got[oneID]
	assert.True(t, len(list) == 2 && all.Name == "builder" && all.State == chatrelay.Active && strings.Join(all.Threads, ",") == chatrelay.ScopeAll &&
		one.Name == "reviewer" && one.State == chatrelay.Revoked && strings.Join(one.Threads, ",") == thread, "agent list --json: %s", r.stdout)

	text := runCLI(t, nil, "", append([]string{"agent", "list"}, sa...)...)
	assert.Success(t, text.err)
	assert.True(t, strings.Contains(text.stdout, allID+"  builder") && strings.Contains(text.stdout, "reviewer  "+thread+"  revoked"), "agent list: %s", text.stdout)
	for _, out := range []string{r.stdout, text.stdout} {
		for _, k := range []string{allKey, oneKey, chatrelay.DigestOf(allKey), chatrelay.DigestOf(oneKey)} {
			assert.True(t, !strings.Contains(out, k), "agent list shows a key or its digest: %s", out)
		}
	}
}
