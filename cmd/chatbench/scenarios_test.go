package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startChatrelay builds chatrelay from this tree and runs `chatrelay serve`
// on a free loopback port with a fresh data folder and the guards of a
// public host raised, as run.sh does. It returns the base URL, the data
// folder, the binary and the server's process.
func startChatrelay(t testing.TB) (base, data, bin string, proc *os.Process) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "chatrelay")
	build := exec.Command("go", "build", "-o", bin, "github.com/chatrelay/chatrelay/cmd/chatrelay")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building chatrelay: %v\n%s", err, out)
	}
	data = filepath.Join(dir, "data")
	var logs bytes.Buffer
	// Retention is raised too: the test reads every thread's first
	// message, which a fast S2 (over 200 posts to a thread) would trim.
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data", data, "--fsync", "never",
		"--rate-thread", "1000000000", "--rate-ip", "1000000000", "--max-threads", "1000000",
		"--max-streams-per-thread", "100000", "--max-streams-per-ip", "1000000", "--log-level", "warn",
		"--retention-messages", "1000000")
	cmd.Stderr = &logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() { // ends when the server's stdout closes
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- strings.TrimSuffix(v, "/")
			}
		}
	}()
	select {
	case base = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatalf("chatrelay serve printed no address in 30s; log:\n%s", logs.String())
	}
	return base, data, bin, cmd.Process
}

// TestScenariosAgainstServer runs every scenario, scaled down, against a
// real chatrelay server and checks what the figures claim: S1's threads are
// created by their first measured post (no warm-up message in any thread),
// every post reaches both subscribers of its thread, S2 runs on S1's
// subscribers, every text is 100 bytes, and S3–S6 report their checks.
// No figure of speed is asserted; --drain is long so that a loaded
// machine delays the checks, never fails them.
func TestScenariosAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs chatrelay")
	}
	base, data, bin, proc := startChatrelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{
		"--server", base, "--server-pid", strconv.Itoa(proc.Pid), "--json", "--quick", "--scenario", "all",
		"--label", "test", "--build", "new",
		"--threads", "10", "--rate", "100", "--duration", "2s", "--s2-duration", "1s", "--posters", "4", "--s1-posters", "8",
		"--idle", "40", "--idle-threads", "20", "--idle-hold", "300ms",
		"--poll-threads", "5", "--poll-duration", "1s", "--pollers", "2",
		"--storm", "40", "--storm-threads", "10", "--storm-rate", "100", "--storm-before", "500ms", "--storm-after", "500ms",
		"--replies", "3", "--v2-threads", "10", "--v2-rate", "100", "--v2-duration", "2s", "--drain", "30s", "--chatrelay-bin", bin, "--data", data, "--reply-fsync", "never",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s\nstdout: %s", err, stderr.String(), stdout.String())
	}
	res := map[string]map[string]any{}
	for line := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		if e, ok := m["error"]; ok {
			t.Errorf("%s: error %v", m["scenario"], e)
		}
		if m["label"] != "test" || m["build"] != "new" {
			t.Errorf("%s: label %v build %v", m["scenario"], m["label"], m["build"])
		}
		res[m["scenario"].(string)] = m
	}
	for _, sc := range allScenarios {
		if res[sc] == nil {
			t.Fatalf("no result for %s in %s", sc, stdout.String())
		}
	}
	delivered := func(sc string) (got, want float64) {
		d, _ := res[sc]["delivered"].(map[string]any)
		return d["got"].(float64), d["want"].(float64)
	}

	s1, s2 := res["S1"], res["S2"]
	if got, want := delivered("S1"); got != want || want != 2*s1["posts"].(float64) || s1["posts"].(float64) != 200 {
		t.Errorf("S1: delivered %v/%v of %v posts, want 200 posts each to 2 subscribers", got, want, s1["posts"])
	}
	if s1["threads_created"] != 10.0 || s1["lost"] != 0.0 {
		t.Errorf("S1: threads_created %v lost %v, want 10 and 0", s1["threads_created"], s1["lost"])
	}
	for _, k := range []string{"p99_ms", "create_rt_p99_ms", "server_cpu_ms_per_post"} {
		if _, ok := s1[k].(float64); !ok {
			t.Errorf("S1 has no %s: %v", k, s1)
		}
	}
	if s2["subscribers"] != "S1's" || s2["threads_created"] != 0.0 || s2["subs"] != 20.0 {
		t.Errorf("S2: subscribers %v threads_created %v subs %v, want S1's 20 subscribers and no new thread", s2["subscribers"], s2["threads_created"], s2["subs"])
	}
	if got, want := delivered("S2"); got != want || want == 0 {
		t.Errorf("S2: delivered %v/%v", got, want)
	}

	// Every thread's first message is a measured S1 post (no warm-up),
	// and every text is 100 bytes.
	docs, err := filepath.Glob(filepath.Join(data, "chat", "*.json"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no thread documents in %s: %v", data, err)
	}
	s1threads := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Messages []struct {
				Text string `json:"text"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(b, &d); err != nil || len(d.Messages) == 0 {
			t.Fatalf("%s: %v (%d messages)", doc, err, len(d.Messages))
		}
		first := d.Messages[0].Text
		if !strings.HasPrefix(first, "cb S1.") {
			continue // another scenario's thread
		}
		s1threads++
		if _, _, ok := parseBenchText(first, strings.Fields(first)[1]); !ok {
			t.Errorf("%s: first message %q is not a measured S1 post", doc, first)
		}
		for _, m := range d.Messages {
			if len(m.Text) != 100 {
				t.Errorf("%s: a text of %d bytes: %q", doc, len(m.Text), m.Text)
				break
			}
		}
	}
	if s1threads != 10 {
		t.Errorf("%d threads begin with an S1 post, want 10", s1threads)
	}

	if a, _ := res["S3"]["alive"].(map[string]any); a["got"] != 40.0 || a["want"] != 40.0 {
		t.Errorf("S3: alive %v, want 40/40", res["S3"]["alive"])
	}
	if _, ok := res["S3"]["kib_per_stream"].(float64); !ok {
		t.Errorf("S3 has no kib_per_stream: %v", res["S3"])
	}
	if res["S4"]["polls"].(float64) == 0 || res["S4"]["wrong_pages"] != nil || res["S4"]["poll_errors"] != nil {
		t.Errorf("S4: %v", res["S4"])
	}
	if res["S5"]["lost"] != 0.0 || res["S5"]["repeated"] != 0.0 {
		t.Errorf("S5: lost %v repeated %v", res["S5"]["lost"], res["S5"]["repeated"])
	}
	if got, want := delivered("S6"); got != 6 || want != 6 {
		t.Errorf("S6: delivered %v/%v, want 6/6", got, want)
	}
	s7 := res["S7"]
	for _, key := range []string{"messages_delivered", "reactions_delivered"} {
		d, _ := s7[key].(map[string]any)
		got, ok1 := d["got"].(float64)
		want, ok2 := d["want"].(float64)
		if !ok1 || !ok2 || got != want || want == 0 {
			t.Errorf("S7: %s %v", key, s7[key])
		}
	}
	reactions, ok1 := s7["reactions"].(float64)
	posts, ok2 := s7["posts"].(float64)
	if !ok1 || !ok2 || reactions == 0 || posts == 0 || s7["lost"] != 0.0 || s7["repeated"] != nil {
		t.Errorf("S7: posts %v reactions %v lost %v repeated %v", s7["posts"], s7["reactions"], s7["lost"], s7["repeated"])
	}
	if _, ok := s7["reaction_p99_ms"].(float64); !ok {
		t.Errorf("S7 has no reaction_p99_ms: %v", s7)
	}
}

// TestReportTable: two builds measured in one run give one table whose
// cells hold the main build's figure, the other's beside it, and their
// ratio; a lost message and a run's error are marked and explained.
func TestReportTable(t *testing.T) {
	t.Parallel()
	lines := strings.Join([]string{
		`{"scenario":"S1","name":"latency","label":"tmpfs","build":"new","p50_ms":0.5,"p99_ms":1.2,"delivered":{"got":20000,"want":20000},"threads_created":1000,"create_rt_p99_ms":2,"server_cpu_ms_per_post":0.3,"other_cpu_pct":4}`,
		`{"scenario":"S1","name":"latency","label":"tmpfs","build":"base","p50_ms":1,"p99_ms":2.4,"delivered":{"got":20000,"want":20000},"threads_created":1000,"server_cpu_ms_per_post":0.6,"other_cpu_pct":40}`,
		`{"scenario":"S2","name":"throughput","label":"tmpfs","build":"new","posts_per_s":10000,"lost":0,"server_cpu_ms_per_post":0.08}`,
		`{"scenario":"S2","name":"throughput","label":"tmpfs","build":"base","posts_per_s":5000,"lost":3,"server_cpu_ms_per_post":0.16}`,
		`{"scenario":"S2","name":"throughput","label":"Redis","build":"new","posts_per_s":8000,"lost":0,"server_cpu_ms_per_post":0.1,"backend_cpu_ms_per_post":0.05}`,
		`{"scenario":"S2","name":"throughput","label":"Redis, 2 shards","build":"new","posts_per_s":9000,"lost":0,"server_cpu_ms_per_post":0.1,"backend_cpu_ms_per_post":0.06,"backend_busiest_cpu_ms_per_post":0.035}`,
		`{"scenario":"S3","name":"idle","label":"tmpfs","build":"new","streams":19000,"kib_per_stream":15.5,"alive":{"got":19000,"want":19000}}`,
		`{"scenario":"S4","name":"poll","label":"Redis","build":"new","error":"3 of 5000 messages stored"}`,
	}, "\n")
	dir := t.TempDir()
	file := filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(file, []byte(lines+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := report([]string{"--main", "new", file}, &out, &errb); err != nil {
		t.Fatalf("report: %v %s", err, errb.String())
	}
	table := out.String()
	for _, want := range []string{
		"| figure | tmpfs | Redis | Redis, 2 shards |",
		"| S1 publish→receive p99 (p50) | 1.20 ms (0.500) (base: 2.40 ms (1.00), ×0.50) | — |",
		"| S2 accepted posts/s, closed loop | 10 000, 0 lost (base: 5 000, 3 lost ✗, ×2.00) | 8 000, 0 lost | 9 000, 0 lost |",
		"| S2 server CPU per post (+ Redis's) | 0.080 ms (base: 0.160 ms, ×0.50) | 0.100 ms + 0.050 ms | 0.100 ms + 0.060 ms (busiest shard 0.035 ms) |",
		"| S3 server memory per idle stream, 19 000 streams (SSE+WS) | 15.5 KiB, all alive | — | — |",
		"| S4 polls/s | — | error[1] | — |",
		"[1] S4, Redis (new): error: 3 of 5000 messages stored",
		"| other work on the machine during the scenarios (worst, % of a core) | 4 % (base: 40 %) | — | — |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestReportMedian: a setup run several times shows, for each figure, the
// run with the median value, says so, and still reports a repeat that failed.
func TestReportMedian(t *testing.T) {
	t.Parallel()
	lines := strings.Join([]string{
		`{"scenario":"S2","label":"tmpfs","build":"new","posts_per_s":1000,"lost":0,"server_cpu_ms_per_post":0.5}`,
		`{"scenario":"S2","label":"tmpfs","build":"new","posts_per_s":3000,"lost":0,"server_cpu_ms_per_post":0.1}`,
		`{"scenario":"S2","label":"tmpfs","build":"new","posts_per_s":2000,"lost":0,"server_cpu_ms_per_post":0.3}`,
		`{"scenario":"S2","label":"tmpfs","build":"new","error":"0 of 2000 streams opened"}`,
	}, "\n")
	file := filepath.Join(t.TempDir(), "results.jsonl")
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := report([]string{file}, &out, &errb); err != nil {
		t.Fatalf("report: %v %s", err, errb.String())
	}
	for _, want := range []string{
		"Each figure is the median of up to 4 runs",
		"| S2 accepted posts/s, closed loop | 2 000, 0 lost[1] |",
		"| S2 server CPU per post (+ Redis's) | 0.300 ms |",
		"[1] S2, tmpfs (new): error: 0 of 2000 streams opened",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
