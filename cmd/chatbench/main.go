// Command chatbench is chatrelay's load tool. It drives a running server over
// loopback only, through the public API (tokens, POST /api/chat/post,
// /api/chat/stream, /api/chat/ws, /api/chat/poll), runs the scenarios S1–S6
// of the performance issues, and prints one line of figures per scenario
// (--json: one JSON object per line). Every scenario is bounded in count and
// time and stops by itself; the whole run is capped by --timeout.
//
// By default it measures the way issue #14 measured chatrelay's peers: S1's
// threads are created by their first post, on the clock, each with one SSE
// and one WebSocket subscriber connected before it; texts are 100 bytes and
// carry their send time; S2 follows S1 on the same subscribers.
//
// It reports its own CPU (from /proc/self/stat) beside the server's (from
// /proc/PID/stat with --server-pid) and the store's server's (--backend-pid),
// because on a small machine the tool competes with the server for the same
// cores. `chatbench report RESULTS.jsonl...` prints the results of runs
// (--json-out) as one markdown table.
//
// The server under load needs its guards of a public host raised:
//
//	ulimit -n 20000   # or higher: one descriptor per stream
//	chatrelay serve --addr 127.0.0.1:8080 --data /tmp/bench --fsync never \
//	    --rate-thread 1000000000 --rate-ip 1000000000 --max-threads 1000000 \
//	    --max-streams-per-thread 100000 --max-streams-per-ip 1000000
//	chatbench --server http://127.0.0.1:8080 --server-pid PID --scenario all
//
// cmd/chatbench/run.sh does both, on three filesystems and on Redis, with a
// fresh server per group of scenarios (see PERFORMANCE.md).
//
// --target centrifugo or ntfy runs S1–S4 against a peer instead, the same
// way (peer.go); run.sh with PEERS measures them in the same run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "report" {
		err = report(os.Args[2:], os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	server      string
	serverPID   int
	backendPIDs string
	scenarios   string
	json        bool
	jsonOut     string
	label       string
	build       string
	textSize    int
	sources     int
	dialConc    int
	timeout     time.Duration
	drain       time.Duration
	quiet       time.Duration
	quick       bool

	threads, subs, s1Posters, posters int
	rate                              float64
	duration, s2Duration              time.Duration

	idle, idleThreads int
	idleMix           string
	idleHold          time.Duration

	pollThreads, pollMessages, pollers int
	pollDuration                       time.Duration
	pollSince                          string

	storm, stormThreads     int
	stormRate               float64
	stormBefore, stormAfter time.Duration

	v2Threads  int
	v2Rate     float64
	v2Duration time.Duration

	replies      int
	chatrelayBin string
	data         string
	store        string
	replyFsync   string

	peer peerOptions
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("chatbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.server, "server", "http://127.0.0.1:8080", "`URL` of the server; only a loopback address is accepted")
	fs.IntVar(&c.serverPID, "server-pid", 0, "`PID` of the server, to report its CPU (and RSS in S3) from /proc")
	fs.StringVar(&c.backendPIDs, "backend-pid", "", "`PID[,PID…]` of the store's servers (redis-server; one per shard), to report their CPU beside the server's, and with several the busiest one's")
	fs.StringVar(&c.scenarios, "scenario", "all", "scenarios to run: all, or a comma list such as S1,S2")
	fs.BoolVar(&c.json, "json", false, "one JSON object per scenario instead of a line of text")
	fs.StringVar(&c.jsonOut, "json-out", "", "also append each result as a JSON line to `file`")
	fs.StringVar(&c.label, "label", "", "a `label` printed with every result: the server's setup, e.g. \"tmpfs, fsync=never\"")
	fs.StringVar(&c.build, "build", "", "a `name` of the server build under test, printed with every result (run.sh: new or base)")
	fs.IntVar(&c.textSize, "text-size", 100, "bytes of every posted text (it carries its send time, padded to this size)")
	fs.IntVar(&c.sources, "sources", 8, "loopback source addresses to dial from (127.0.0.1…): each has ~28 000 ephemeral ports")
	fs.IntVar(&c.dialConc, "dial-concurrency", 128, "streams being opened at once")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "hard limit on the whole run")
	fs.DurationVar(&c.drain, "drain", 10*time.Second, "how long to wait for outstanding deliveries after posting stops")
	fs.DurationVar(&c.quiet, "quiet-wait", 0, "before each scenario, wait up to this long for the machine to be idle (under 10% busy for a second)")
	fs.BoolVar(&c.quick, "quick", false, "a smoke run: every size and duration not given is scaled down")

	c.scenarioFlags(fs)
	c.peerFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickValues {
			if !set[name] {
				fs.Set(name, v)
			}
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// scenarioFlags adds each scenario's sizes, rates and durations to fs.
func (c *config) scenarioFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.threads, "threads", 1000, "S1/S2: threads, each created by its first post, on the clock")
	fs.IntVar(&c.subs, "subs", 2, "S1/S2: subscribers per thread, alternately SSE and WebSocket")
	fs.Float64Var(&c.rate, "rate", 500, "S1: posts per second, to random threads")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "S1: how long to post")
	fs.IntVar(&c.s1Posters, "s1-posters", 64, "S1: workers (each with its keep-alive connection) the paced posts are spread over")
	fs.IntVar(&c.posters, "posters", 32, "S2: closed-loop posters (also S3/S4's posters of their setup)")
	fs.DurationVar(&c.s2Duration, "s2-duration", 15*time.Second, "S2: how long to post (after S1, on its subscribers, when both run)")

	fs.IntVar(&c.idle, "idle", 10000, "S3: idle streams")
	fs.IntVar(&c.idleThreads, "idle-threads", 5000, "S3: threads the idle streams are spread over")
	fs.StringVar(&c.idleMix, "idle-mix", "mixed", "S3: mixed (half SSE, half WebSocket), sse or ws")
	fs.DurationVar(&c.idleHold, "idle-hold", 25*time.Second, "S3: how long the streams stay idle (longer than the server's heartbeat)")

	fs.IntVar(&c.pollThreads, "poll-threads", 100, "S4: threads")
	fs.IntVar(&c.pollMessages, "poll-messages", 50, "S4: messages per thread")
	fs.IntVar(&c.pollers, "pollers", 32, "S4: pollers polling as fast as they can")
	fs.DurationVar(&c.pollDuration, "poll-duration", 10*time.Second, "S4: how long to poll")
	fs.StringVar(&c.pollSince, "poll-since", "full", "S4: full (no since: the newest 50 messages) or cursor (since=newest: nothing new)")

	fs.IntVar(&c.storm, "storm", 5000, "S5: subscribers that drop at once and resume")
	fs.IntVar(&c.stormThreads, "storm-threads", 1000, "S5: threads")
	fs.Float64Var(&c.stormRate, "storm-rate", 500, "S5: posts per second while they drop and resume")
	fs.DurationVar(&c.stormBefore, "storm-before", 2*time.Second, "S5: posting before the drop")
	fs.DurationVar(&c.stormAfter, "storm-after", 3*time.Second, "S5: posting after all are live again")

	fs.IntVar(&c.v2Threads, "v2-threads", 200, "S7: threads, each with one v2 SSE and one v2 WebSocket subscriber")
	fs.Float64Var(&c.v2Rate, "v2-rate", 200, "S7: changes per second (posts and reactions, about half each) to random threads")
	fs.DurationVar(&c.v2Duration, "v2-duration", 15*time.Second, "S7: how long to post and react")

	fs.IntVar(&c.replies, "replies", 200, "S6: host replies")
	fs.StringVar(&c.chatrelayBin, "chatrelay-bin", "", "S6: the chatrelay binary that runs `chatrelay reply`")
	fs.StringVar(&c.data, "data", "", "S6: the server's --data folder")
	fs.StringVar(&c.store, "store", "", "S6: the server's --store (redis://…), instead of --data")
	fs.StringVar(&c.replyFsync, "reply-fsync", "always", "S6: --fsync of the reply process")
}

// check refuses sizes and choices no run can use.
func (c *config) check() error {
	if c.threads < 1 || c.subs < 1 || c.rate <= 0 || c.s1Posters < 1 || c.posters < 1 ||
		c.idle < 1 || c.idleThreads < 1 || c.pollThreads < 1 || c.pollMessages < 1 || c.pollers < 1 ||
		c.storm < 1 || c.stormThreads < 1 || c.stormRate <= 0 || c.replies < 1 || c.v2Threads < 1 || c.v2Rate <= 0 || c.sources < 1 || c.dialConc < 1 || c.textSize < 1 {
		return errors.New("sizes and rates must be positive")
	}
	switch c.idleMix {
	case "mixed", "sse", "ws":
	default:
		return fmt.Errorf("--idle-mix %q: want mixed, sse or ws", c.idleMix)
	}
	switch c.pollSince {
	case "full", "cursor":
	default:
		return fmt.Errorf("--poll-since %q: want full or cursor", c.pollSince)
	}
	if c.peer.target != "" && c.peer.target != "chatrelay" && c.pollSince == "cursor" {
		return fmt.Errorf("--poll-since cursor: chatrelay's cursor has no equivalent on --target %s", c.peer.target)
	}
	return nil
}

// quickValues scale every scenario down to a few seconds.
var quickValues = map[string]string{
	"threads": "50", "duration": "3s", "rate": "200", "s2-duration": "3s", "posters": "8",
	"idle": "400", "idle-threads": "200", "idle-hold": "2s",
	"poll-threads": "20", "poll-duration": "2s", "pollers": "8",
	"storm": "400", "storm-threads": "100", "storm-rate": "200", "storm-before": "1s", "storm-after": "1s",
	"replies": "10", "drain": "5s",
	"v2-threads": "20", "v2-rate": "100", "v2-duration": "3s",
}

var allScenarios = []string{"S1", "S2", "S3", "S4", "S5", "S6", "S7"}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	t, err := loopbackTarget(cfg.server, cfg.sources, max(cfg.posters, cfg.s1Posters, 16)+cfg.pollers)
	if err != nil {
		return err
	}
	which, err := cfg.which()
	if err != nil {
		return err
	}
	if t.peer, err = newPeer(cfg.peer); err != nil {
		return err
	}
	nofile, err := raiseNoFile()
	if err != nil {
		fmt.Fprintf(stderr, "chatbench: cannot raise the open-file limit: %v\n", err)
	}
	pid, err := procOf("--server-pid", cfg.serverPID)
	if err != nil {
		return err
	}
	bePIDs, err := backendPIDs(cfg.backendPIDs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if err := t.waitUp(ctx, 10*time.Second); err != nil {
		return err
	}
	var jsonOut io.Writer
	if cfg.jsonOut != "" {
		f, err := os.OpenFile(cfg.jsonOut, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}
	b := &bench{cfg: cfg, t: t, pid: pid, bePIDs: bePIDs, nofile: nofile, log: stderr}
	defer b.closeFan()
	failed := 0
	for _, sc := range which {
		if ctx.Err() != nil {
			break
		}
		if sc != "S1" && sc != "S2" {
			b.closeFan() // S1/S2's streams must not weigh on the other scenarios
		}
		res := b.scenario(ctx, sc)
		if res.err != nil {
			failed++
		}
		if cfg.json {
			stdout.Write(res.json())
		} else {
			fmt.Fprintln(stdout, res.text())
		}
		if jsonOut != nil {
			jsonOut.Write(res.json())
		}
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("stopped by --timeout %s", cfg.timeout)
	}
	if failed > 0 {
		return fmt.Errorf("%d scenario(s) could not run", failed)
	}
	return ctx.Err()
}

// scenario runs scenario sc (or reports it skipped on a peer that has
// none like it), once the machine is quiet if --quiet-wait asks, and
// labels its result.
func (b *bench) scenario(ctx context.Context, sc string) *result {
	cfg, t := b.cfg, b.t
	var res *result
	if t.peer != nil && t.peer.skip(sc) != "" {
		res = skipped(sc, t.peer.skip(sc))
	} else {
		busy := -1.0
		if cfg.quiet > 0 {
			busy = waitQuiet(cfg.quiet)
		}
		res = b.runScenario(ctx, sc)
		if busy >= 0.10 {
			res.note("the machine was %.0f%% busy before the scenario started", 100*busy)
		}
	}
	res.label, res.build = cfg.label, cfg.build
	if t.peer != nil {
		res.target, res.versus = t.peer.name(), cfg.peer.versus
	}
	return res
}

// which is the scenarios --scenario names, in the order given.
func (c *config) which() ([]string, error) {
	if c.scenarios == "all" {
		return allScenarios, nil
	}
	var which []string
	for s := range strings.SplitSeq(c.scenarios, ",") {
		s = strings.ToUpper(strings.TrimSpace(s))
		if !slices.Contains(allScenarios, s) {
			return nil, fmt.Errorf("--scenario %q: want all or some of %s", s, strings.Join(allScenarios, ","))
		}
		which = append(which, s)
	}
	return which, nil
}

// procOf is the /proc name of the process given by flag (pid 0: none),
// checked to be readable.
// backendPIDs is --backend-pid's list: a pid per store server (Redis
// shard), each with a /proc entry; none if list is empty.
func backendPIDs(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	var pids []string
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--backend-pid %q: want process ids, comma-separated", list)
		}
		p, err := procOf("--backend-pid", n)
		if err != nil {
			return nil, err
		}
		pids = append(pids, p)
	}
	return pids, nil
}

func procOf(flag string, pid int) (string, error) {
	if pid <= 0 {
		return "", nil
	}
	p := strconv.Itoa(pid)
	if _, err := procCPU(p); err != nil {
		return "", fmt.Errorf("%s %d: %w", flag, pid, err)
	}
	return p, nil
}

// fig is one figure of a result: a JSON value and its text form.
type fig struct {
	key  string
	val  any
	text string
}

// result is one scenario's line.
type result struct {
	id, name, label, build string
	target, versus         string // a peer's name and the chatrelay label it is compared with
	figs                   []fig
	notes                  []string
	err                    error
}

func (r *result) add(key string, val any, text string) { r.figs = append(r.figs, fig{key, val, text}) }

func (r *result) int(key string, n int64) { r.add(key, n, strconv.FormatInt(n, 10)) }

func (r *result) ratio(key string, got, want int64) {
	r.add(key, map[string]int64{"got": got, "want": want}, fmt.Sprintf("%d/%d", got, want))
}

func (r *result) ms(key string, d time.Duration) {
	v := float64(d) / 1e6
	r.add(key+"_ms", round(v, 3), fmtMs(d))
}

// latency adds the median, the 99th percentile and the most of h, as
// prefix+"p50", prefix+"p99" and prefix+"max".
func (r *result) latency(prefix string, h *hist) {
	r.ms(prefix+"p50", h.Quantile(0.50))
	r.ms(prefix+"p99", h.Quantile(0.99))
	r.ms(prefix+"max", h.Max())
}

func (r *result) num(key string, v float64, unit string) {
	r.add(key, round(v, 3), strconv.FormatFloat(v, 'f', prec(v), 64)+unit)
}

func (r *result) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// cpu adds the tool's and the server's CPU over a phase, and the server's
// CPU per unit of work (per post, per poll).
func (r *result) cpu(u *usage, per string, n int64) {
	share := func(d time.Duration) float64 { return 100 * d.Seconds() / u.Wall.Seconds() }
	if u.ServerOK {
		r.add("server_cpu_s", round(u.Server.Seconds(), 2), fmt.Sprintf("%.2fs(%.0f%%)", u.Server.Seconds(), share(u.Server)))
		if per != "" && n > 0 {
			perMs := u.Server.Seconds() * 1000 / float64(n)
			r.add("server_cpu_ms_per_"+per, round(perMs, 4), strconv.FormatFloat(perMs, 'f', 4, 64)+"ms")
		}
	}
	if u.BackendOK {
		r.add("backend_cpu_s", round(u.Backend.Seconds(), 2), fmt.Sprintf("%.2fs(%.0f%%)", u.Backend.Seconds(), share(u.Backend)))
		if per != "" && n > 0 {
			perMs := u.Backend.Seconds() * 1000 / float64(n)
			r.add("backend_cpu_ms_per_"+per, round(perMs, 4), strconv.FormatFloat(perMs, 'f', 4, 64)+"ms")
			if len(u.backendPIDs) > 1 {
				// Shards: what the busiest of them spent, which bounds
				// what they carry together (each on a core of its own).
				perMs := u.BackendBusiest.Seconds() * 1000 / float64(n)
				r.add("backend_busiest_cpu_ms_per_"+per, round(perMs, 4), strconv.FormatFloat(perMs, 'f', 4, 64)+"ms")
			}
		}
	}
	r.add("bench_cpu_s", round(u.Self.Seconds(), 2), fmt.Sprintf("%.2fs(%.0f%%)", u.Self.Seconds(), share(u.Self)))
	if u.Children > 0 {
		r.add("child_cpu_s", round(u.Children.Seconds(), 2), fmt.Sprintf("%.2fs(%.0f%%)", u.Children.Seconds(), share(u.Children)))
	}
	if u.ServerOK {
		r.add("other_cpu_s", round(u.Others.Seconds(), 2), fmt.Sprintf("%.2fs(%.0f%%)", u.Others.Seconds(), share(u.Others)))
		r.add("other_cpu_pct", round(share(u.Others), 0), "")
		if share(u.Others) > 30 {
			r.note("CPU charged to neither process (other jobs, kernel threads) was %.0f%% of a core: the figures are skewed", share(u.Others))
		}
	}
}

func fmtMs(d time.Duration) string {
	v := float64(d) / 1e6
	return strconv.FormatFloat(v, 'f', prec(v), 64) + "ms"
}

func prec(v float64) int {
	switch {
	case v >= 100:
		return 0
	case v >= 10:
		return 1
	case v >= 1:
		return 2
	default:
		return 3
	}
}

func round(v float64, digits int) float64 {
	p, err := strconv.ParseFloat(strconv.FormatFloat(v, 'f', digits, 64), 64)
	if err != nil {
		return v
	}
	return p
}

func (r *result) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-10s", r.id, r.name)
	if r.label != "" || r.build != "" || r.target != "" {
		fmt.Fprintf(&b, " [%s]", strings.Join(slices.DeleteFunc([]string{r.target, r.build, r.label}, func(s string) bool { return s == "" }), " "))
	}
	for _, f := range r.figs {
		if f.text != "" { // a figure for JSON only
			fmt.Fprintf(&b, " %s=%s", f.key, f.text)
		}
	}
	if r.err != nil {
		fmt.Fprintf(&b, " ERROR: %v", r.err)
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, " (%s)", n)
	}
	return b.String()
}

// json is one line: {"scenario","name","label","build", the figures in order,
// "notes", "error"}.
func (r *result) json() []byte {
	var b []byte
	add := func(k string, v any) {
		if len(b) > 0 {
			b = append(b, ',')
		} else {
			b = append(b, '{')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(v)
		if err != nil {
			vb, _ = json.Marshal(fmt.Sprint(v))
		}
		b = append(append(append(b, kb...), ':'), vb...)
	}
	add("scenario", r.id)
	add("name", r.name)
	if r.label != "" {
		add("label", r.label)
	}
	if r.build != "" {
		add("build", r.build)
	}
	if r.target != "" {
		add("target", r.target)
		if r.versus != "" {
			add("versus", r.versus)
		}
	}
	for _, f := range r.figs {
		add(f.key, f.val)
	}
	if len(r.notes) > 0 {
		add("notes", r.notes)
	}
	if r.err != nil {
		add("error", r.err.Error())
	}
	return append(b, "}\n"...)
}
