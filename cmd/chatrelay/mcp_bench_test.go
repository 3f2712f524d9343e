package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
)

// BenchmarkMCPHTTPAgents: 100 agents over MCP HTTP (the official Go SDK's
// client, one session each; "a key each": one agent key each, scoped to
// its own thread; "one key": one key for every thread, shared)
// each ask for approval and wait for it (wait_interaction, with progress),
// again and again, while a person answers one approval every second over
// the API. It reports answer → tool result p50 and p99 (the respond POST
// sent → the agent's call returned), and the server's memory per open MCP
// session: a real chatrelay process's VmRSS with the 100 sessions open and
// waiting, minus before they were opened, per session. Each iteration is
// one answer (a second): run it with -benchtime Nx.
//
//	go test -run '^$' -bench MCPHTTPAgents -benchtime 60x ./cmd/chatrelay
func BenchmarkMCPHTTPAgents(b *testing.B) {
	b.Run("a key each", func(b *testing.B) { benchMCPAgents(b, false) })
	b.Run("one key", func(b *testing.B) { benchMCPAgents(b, true) })
}

// benchMCPAgents is BenchmarkMCPHTTPAgents with a key per agent (scoped
// to its thread), or one key for every thread shared by all.
func benchMCPAgents(b *testing.B, oneKey bool) {
	const agents = 100
	data := b.TempDir()
	cmd := exec.Command(chatrelayBinary(b), "serve", "--addr", "127.0.0.1:0", "--data", data, "--fsync", "never", "--mcp",
		"--rate-thread", "1000000", "--rate-ip", "1000000", "--log-level", "warn", "--mcp-sessions-per-key", strconv.Itoa(agents))
	var logs bytes.Buffer
	cmd.Stderr = &logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var base string
	for base == "" && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
			base = strings.TrimSuffix(v, "/")
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if base == "" {
		b.Fatalf("serve printed no address:\n%s", logs.String())
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	sa := []string{"--data", data}

	type agent struct {
		owner, thread string
		cs            *mcp.ClientSession
	}
	as := make([]*agent, agents)
	for i := range as {
		owner := opsToken(fmt.Sprint("bench agent ", i))
		a := &agent{owner: owner, thread: chatrelay.ThreadOf(owner)}
		if st := benchPost(base, owner, chatrelay.PathPost, `{"text":"ready when you are"}`); st != 201 {
			b.Fatalf("post: %d", st)
		}
		as[i] = a
	}
	keys := make([]string, agents)
	for i, a := range as {
		var stdout, stderr bytes.Buffer
		args := append([]string{"agent", "add", fmt.Sprint("agent-", i), "--threads", a.thread, "--fsync", "never"}, sa...)
		if oneKey && i > 0 {
			keys[i] = keys[0]
			continue
		}
		if oneKey {
			args = append([]string{"agent", "add", "agents", "--fsync", "never"}, sa...)
		}
		if err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr); err != nil {
			b.Fatal(err, stderr.String())
		}
		keys[i] = strings.TrimSpace(stdout.String())
	}
	runtimeSettle()
	before := vmRSS(b, pid)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type pending struct {
		owner, id string
		answered  chan time.Time
	}
	asked := make(chan pending, agents)
	latencies := make(chan time.Duration, 1<<16)
	var wg sync.WaitGroup
	var sessions []*mcp.ClientSession
	defer func() { // the calls end first: a session's Close waits for them
		cancel()
		wg.Wait()
		for _, cs := range sessions {
			cs.Close()
		}
	}()
	for i, a := range as {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + chatrelay.PathMCP,
			HTTPClient: &http.Client{Transport: bearerTransport{keys[i]}}, MaxRetries: -1}, nil)
		if err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, cs)
		a.cs = cs
		wg.Go(func() {
			for ctx.Err() == nil {
				r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: chatrelay.ToolName("request_approval"),
					Arguments: map[string]any{"thread": a.thread, "summary": "Deploy?"}})
				if err != nil || r.IsError {
					return
				}
				var ask host_InteractionResult
				if structuredInto(r, &ask) != nil {
					return
				}
				p := pending{owner: a.owner, id: ask.Interaction.ID, answered: make(chan time.Time, 1)}
				asked <- p
				wp := &mcp.CallToolParams{Name: chatrelay.ToolName("wait_interaction"),
					Arguments: map[string]any{"thread": a.thread, "interaction_id": p.id}}
				wp.SetProgressToken(p.id)
				r, err = cs.CallTool(ctx, wp)
				got := time.Now()
				if err != nil || r.IsError {
					return
				}
				select {
				case at := <-p.answered:
					latencies <- got.Sub(at)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	// Every agent waits: the sessions are open and busy.
	var queue []pending
	for len(queue) < agents {
		select {
		case p := <-asked:
			queue = append(queue, p)
		case <-time.After(30 * time.Second):
			b.Fatalf("%d of %d agents asked", len(queue), agents)
		}
	}
	time.Sleep(time.Second)
	after := vmRSS(b, pid)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	b.ResetTimer()
	for b.Loop() {
		<-tick.C
		for len(queue) == 0 {
			queue = append(queue, <-asked)
		}
		p := queue[0]
		queue = queue[1:]
		p.answered <- time.Now()
		if st := benchPost(base, p.owner, chatrelay.PathRespond, fmt.Sprintf(`{"interaction_id":%q,"decision":"approve"}`, p.id)); st != 200 {
			b.Fatalf("respond: %d", st)
		}
	drain:
		for {
			select {
			case q := <-asked:
				queue = append(queue, q)
			default:
				break drain
			}
		}
	}
	b.StopTimer()
	var ls []time.Duration
	deadline := time.After(10 * time.Second)
	for len(ls) < b.N {
		select {
		case l := <-latencies:
			ls = append(ls, l)
		case <-deadline:
			b.Fatalf("%d of %d answers reached their agent", len(ls), b.N)
		}
	}
	slices.Sort(ls)
	q := func(p float64) float64 {
		return float64(ls[min(len(ls)-1, int(p*float64(len(ls))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(after-before)/agents, "KiB/session")
	b.ReportMetric(0, "ns/op")
}

func benchPost(base, token, path, body string) int {
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func structuredInto(r *mcp.CallToolResult, v any) error {
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// vmRSS is a process's resident memory in KiB.
func vmRSS(tb testing.TB, pid string) int64 {
	tb.Helper()
	st, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(string(st), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// runtimeSettle lets the server settle before a memory baseline.
func runtimeSettle() { time.Sleep(time.Second) }
