package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// report is `chatbench report [--main NAME] FILE...`: it reads the JSON
// lines of runs (--json-out) and prints one markdown table, a column per
// label (the server's setup, in the order the runs came) and a row per
// figure. When the files hold two builds (run.sh with BASE_BIN), each cell
// gives the main build's figure with the other's beside it and their ratio,
// measured in the same run. Runs of peers (--target) get a table of their
// own, each beside chatrelay's setup it names (writePeers).
func report(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chatbench report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mainBuild := fs.String("main", "", "the build whose figures lead each cell (default: the first one in the files)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: chatbench report [--main NAME] RESULTS.jsonl...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("report: no results file")
	}
	var runs []map[string]any
	for _, name := range fs.Args() {
		rs, err := readResults(name)
		if err != nil {
			return err
		}
		runs = append(runs, rs...)
	}
	if len(runs) == 0 {
		return errors.New("report: the files hold no result")
	}
	own, peers := splitPeers(runs)
	if len(own) == 0 {
		writePeers(stdout, nil, peers, "")
		return nil
	}
	t := newTable(own, *mainBuild)
	if t.main == "" {
		return fmt.Errorf("report: no result of build %q", *mainBuild)
	}
	t.write(stdout)
	if len(peers) > 0 {
		fmt.Fprintln(stdout)
		writePeers(stdout, own, peers, t.main)
	}
	return nil
}

func readResults(name string) ([]map[string]any, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return nil, fmt.Errorf("report: %s:%d: %w", name, n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("report: %s: %w", name, err)
	}
	return out, nil
}

// table holds the runs by build, label and row key.
type table struct {
	main, other string
	labels      []string
	cells       map[string]map[string]map[string][]map[string]any // build → label → key → results (repeats)
	s3sizes     []int64                                           // S3's stream counts, in order seen
	notes       []string
	marked      map[string]bool // runs whose notes have been marked in a cell
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func num(m map[string]any, k string) (float64, bool) {
	v, ok := m[k].(float64)
	return v, ok
}

// rowKey is the scenario, and for S3 its stream count too: S3 at 10 000
// and at 19 000 streams are two rows.
func rowKey(m map[string]any) string {
	sc := str(m, "scenario")
	if sc == "S3" {
		if n, ok := num(m, "streams"); ok {
			return "S3/" + strconv.FormatInt(int64(n), 10)
		}
	}
	return sc
}

func newTable(runs []map[string]any, mainBuild string) *table {
	t := &table{cells: map[string]map[string]map[string][]map[string]any{}, marked: map[string]bool{}}
	var builds []string
	for _, m := range runs {
		b, l := str(m, "build"), str(m, "label")
		if t.cells[b] == nil {
			t.cells[b] = map[string]map[string][]map[string]any{}
			builds = append(builds, b)
		}
		if !slices.Contains(t.labels, l) {
			t.labels = append(t.labels, l)
		}
		if t.cells[b][l] == nil {
			t.cells[b][l] = map[string][]map[string]any{}
		}
		k := rowKey(m)
		t.cells[b][l][k] = append(t.cells[b][l][k], m)
		if str(m, "scenario") == "S3" {
			if n, ok := num(m, "streams"); ok && !slices.Contains(t.s3sizes, int64(n)) {
				t.s3sizes = append(t.s3sizes, int64(n))
			}
		}
	}
	switch {
	case mainBuild == "":
		t.main = builds[0]
	case t.cells[mainBuild] != nil:
		t.main = mainBuild
	}
	for _, b := range builds {
		if b != t.main && t.other == "" {
			t.other = b
		}
	}
	return t
}

// figure is one row of the table: a cell's text and the value that the
// ratio between two builds compares.
type figure struct {
	title string
	key   string // rowKey of the results it reads
	cell  func(m map[string]any) (text string, val float64, ok bool)
}

func fmtNum(v float64) string {
	switch {
	case v >= 1000:
		return groupThousands(strconv.FormatFloat(v, 'f', 0, 64))
	default:
		return strconv.FormatFloat(v, 'f', prec(v), 64)
	}
}

// fmtCount writes a count, thousands grouped.
func fmtCount(v float64) string { return groupThousands(strconv.FormatInt(int64(v), 10)) }

// groupThousands writes 12345 as "12 345".
func groupThousands(s string) string {
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// plain is a cell showing one number (with a unit) and comparing it.
func plain(key, unit string) func(m map[string]any) (string, float64, bool) {
	return func(m map[string]any) (string, float64, bool) {
		v, ok := num(m, key)
		if !ok {
			return "", 0, false
		}
		return fmtNum(v) + unit, v, true
	}
}

func ratioText(m map[string]any, key string) (got, want float64, text string, ok bool) {
	r, _ := m[key].(map[string]any)
	g, ok1 := num(r, "got")
	w, ok2 := num(r, "want")
	if !ok1 || !ok2 {
		return 0, 0, "", false
	}
	return g, w, groupThousands(strconv.FormatInt(int64(g), 10)) + "/" + groupThousands(strconv.FormatInt(int64(w), 10)), true
}

func (t *table) figures() []figure {
	fs := []figure{
		{"S1 publish→receive p99 (p50)", "S1", func(m map[string]any) (string, float64, bool) {
			p99, ok := num(m, "p99_ms")
			p50, _ := num(m, "p50_ms")
			return fmtNum(p99) + " ms (" + fmtNum(p50) + ")", p99, ok
		}},
		{"S1 delivered", "S1", func(m map[string]any) (string, float64, bool) {
			g, w, text, ok := ratioText(m, "delivered")
			if ok && g < w {
				text += " ✗"
			}
			return text, 0, ok
		}},
		{"S1 threads created on the clock; their post's round trip p99", "S1", s1Created},
		{"S1 server CPU per post (+ Redis's)", "S1", cpuPer("post")},
		{"S2 accepted posts/s, closed loop", "S2", s2Throughput},
		{"S2 publish→receive p99", "S2", plain("p99_ms", " ms")},
		{"S2 server CPU per post (+ Redis's)", "S2", cpuPer("post")},
	}
	for _, n := range t.s3sizes {
		fs = append(fs, figure{"S3 server memory per idle stream, " + groupThousands(strconv.FormatInt(n, 10)) + " streams (SSE+WS)",
			"S3/" + strconv.FormatInt(n, 10), s3Memory})
	}
	fs = append(fs,
		figure{"S4 polls/s", "S4", plain("polls_per_s", "")},
		figure{"S4 server CPU per poll (+ Redis's)", "S4", cpuPer("poll")},
		figure{"S5 resume storm: lost / repeated; all live again after", "S5", s5Storm},
		figure{"S6 host reply → subscriber p99", "S6", plain("p99_ms", " ms")},
		figure{"S7 v2 with reactions: message p99; reaction p99 (request → update frame)", "S7", s7Changes},
		figure{"S7 server CPU per change (+ Redis's)", "S7", cpuPer("change")},
	)
	// Other work on the machine skews every figure: one row says how much
	// there was (the scenarios' worst) instead of a note per run.
	fs = append(fs, figure{"other work on the machine during the scenarios (worst, % of a core)", "", nil})
	return fs
}

// s1Created is the threads S1 created and their post's round trip p99.
func s1Created(m map[string]any) (string, float64, bool) {
	n, ok := num(m, "threads_created")
	rt, ok2 := num(m, "create_rt_p99_ms")
	if !ok {
		return "", 0, false
	}
	if !ok2 {
		return fmtCount(n), 0, true
	}
	return fmtCount(n) + "; " + fmtNum(rt) + " ms", rt, true
}

// s2Throughput is S2's accepted posts per second, and what was lost.
func s2Throughput(m map[string]any) (string, float64, bool) {
	v, ok := num(m, "posts_per_s")
	if !ok {
		return "", 0, false
	}
	text := fmtNum(v)
	if lost, _ := num(m, "lost"); lost > 0 {
		text += ", " + fmtCount(lost) + " lost ✗"
	} else if _, ok := m["lost"]; ok {
		text += ", 0 lost"
	}
	return text, v, true
}

// s5Storm is S5's lost and repeated messages and how soon all were live again.
func s5Storm(m map[string]any) (string, float64, bool) {
	lost, ok := num(m, "lost")
	rep, _ := num(m, "repeated")
	if !ok {
		return "", 0, false
	}
	text := fmt.Sprintf("%.0f / %.0f", lost, rep)
	if lost+rep > 0 {
		text += " ✗"
	}
	after, ok := num(m, "all_live_after_ms")
	if ok {
		text += "; " + fmtNum(after/1000) + " s"
	}
	return text, after, true
}

// s7Changes is S7's message and reaction p99, and what was not delivered.
func s7Changes(m map[string]any) (string, float64, bool) {
	mp, ok := num(m, "message_p99_ms")
	rp, ok2 := num(m, "reaction_p99_ms")
	if !ok || !ok2 {
		return "", 0, false
	}
	text := fmtNum(mp) + " ms; " + fmtNum(rp) + " ms"
	for _, key := range []string{"messages_delivered", "reactions_delivered"} {
		if g, w, _, ok := ratioText(m, key); ok && g < w {
			text += fmt.Sprintf(", %.0f/%.0f %s ✗", g, w, strings.TrimSuffix(key, "_delivered"))
		}
	}
	return text, rp, true
}

// s3Memory is S3's server memory per idle stream, and whether all stayed alive.
func s3Memory(m map[string]any) (string, float64, bool) {
	v, ok := num(m, "kib_per_stream")
	if !ok {
		return "", 0, false
	}
	text := fmtNum(v) + " KiB"
	if g, w, _, ok := ratioText(m, "alive"); ok {
		if g == w {
			text += ", all alive"
		} else {
			text += fmt.Sprintf(", %.0f/%.0f alive ✗", g, w)
		}
	}
	return text, v, true
}

// cpuPer is the server's CPU per post or poll, with the backend's
// (redis-server) beside it when it was measured, and with shards the
// busiest shard's in brackets; the ratio compares the sum.
func cpuPer(unit string) func(m map[string]any) (string, float64, bool) {
	return func(m map[string]any) (string, float64, bool) {
		v, ok := num(m, "server_cpu_ms_per_"+unit)
		if !ok {
			return "", 0, false
		}
		text := fmtNum(v) + " ms"
		if be, ok := num(m, "backend_cpu_ms_per_"+unit); ok {
			text += " + " + fmtNum(be) + " ms"
			v += be
			if busiest, ok := num(m, "backend_busiest_cpu_ms_per_"+unit); ok {
				text += " (busiest shard " + fmtNum(busiest) + " ms)"
			}
		}
		return text, v, true
	}
}

// otherCPU is the largest share of a core that other work took during any
// scenario of label, by build.
func (t *table) otherCPU(build, label string) (string, bool) {
	worst, seen := -1.0, false
	for _, runs := range t.cells[build][label] {
		for _, m := range runs {
			if v, ok := num(m, "other_cpu_pct"); ok {
				seen = true
				worst = max(worst, v)
			}
		}
	}
	if !seen {
		return "", false
	}
	return fmt.Sprintf("%.0f %%", worst), true
}

// skewNote is a note about other work on the machine, which the table's
// last row shows instead.
func skewNote(n string) bool {
	return strings.HasPrefix(n, "CPU charged to neither process") || strings.HasPrefix(n, "the machine was ")
}

func (t *table) write(w io.Writer) {
	if n := t.repeats(); n > 1 {
		fmt.Fprintf(w, "Each figure is the median of up to %d runs (the run with the median value is shown whole).\n\n", n)
	}
	if t.other != "" {
		fmt.Fprintf(w, "Each cell: build %q (build %q in the same run, ratio %s/%s).\n\n", t.main, t.other, t.main, t.other)
	}
	t.writeRows(w, t.labels, func(f figure, i int) string { return t.cell(f, t.labels[i]) })
	t.writeNotes(w)
}

// writeRows writes the table's head, a column a title, and a row a
// figure, cell(f, i) in column i ("—" for an empty one); a figure whose
// cells are all empty is left out.
func (t *table) writeRows(w io.Writer, titles []string, cell func(f figure, i int) string) {
	fmt.Fprintf(w, "| figure | %s |\n|---|%s\n", strings.Join(titles, " | "), strings.Repeat("---|", len(titles)))
	for _, f := range t.figures() {
		var cells []string
		filled := false
		for i := range titles {
			c := cell(f, i)
			if c != "" {
				filled = true
			} else {
				c = "—"
			}
			cells = append(cells, c)
		}
		if filled {
			fmt.Fprintf(w, "| %s | %s |\n", f.title, strings.Join(cells, " | "))
		}
	}
}

// writeNotes writes the table's notes, numbered, under it.
func (t *table) writeNotes(w io.Writer) {
	if len(t.notes) > 0 {
		fmt.Fprintln(w)
		for i, n := range t.notes {
			fmt.Fprintf(w, "%s %s\n", mark(i), n)
		}
	}
}

// cell is one figure of one label: the main build's text, and the other
// build's with the ratio when there is one. A run's error or notes become
// numbered notes under the table (once per run).
func (t *table) cell(f figure, label string) string {
	if f.cell == nil { // the row of other work
		text, _ := t.otherCPU(t.main, label)
		if t.other != "" {
			if o, ok := t.otherCPU(t.other, label); ok {
				text += " (" + t.other + ": " + o + ")"
			}
		}
		return text
	}
	text, val, ok, m := t.one(t.main, f, label)
	if m != nil {
		text += t.noteMarks(t.main, m)
	}
	if t.other != "" {
		otext, oval, ook, om := t.one(t.other, f, label)
		if om != nil {
			otext += t.noteMarks(t.other, om)
		}
		switch {
		case ok && ook && val != 0 && oval != 0:
			text = fmt.Sprintf("%s (%s: %s, ×%.2f)", text, t.other, otext, val/oval)
		case otext != "":
			text = fmt.Sprintf("%s (%s: %s)", text, t.other, otext)
		}
	}
	return text
}

func (t *table) one(build string, f figure, label string) (text string, val float64, ok bool, m map[string]any) {
	runs := t.cells[build][label][f.key]
	m = t.median(runs, f)
	if m == nil {
		return "", 0, false, nil
	}
	defer func() { // a repeat that failed is not hidden by the others
		for _, r := range runs {
			if str(r, "error") != "" && fmt.Sprintf("%p", r) != fmt.Sprintf("%p", m) && text != "" {
				text += t.noteMarks(build, r)
			}
		}
	}()
	if e := str(m, "error"); e != "" {
		return "error", 0, false, m
	}
	text, val, ok = f.cell(m)
	if text == "" {
		return "", 0, false, nil
	}
	return text, val, ok, m
}

// median picks, of the repeated runs of one row, the run whose figure
// (the value f compares) is the median: the lower middle one of an even
// count. Runs that failed or have no such value count only when no run
// has one.
func (t *table) median(runs []map[string]any, f figure) map[string]any {
	type run struct {
		m   map[string]any
		val float64
	}
	var ok []run
	for _, m := range runs {
		if str(m, "error") != "" {
			continue
		}
		if _, v, good := f.cell(m); good {
			ok = append(ok, run{m, v})
		}
	}
	if len(ok) == 0 {
		if len(runs) == 0 {
			return nil
		}
		return runs[len(runs)-1]
	}
	slices.SortStableFunc(ok, func(a, b run) int { return cmp.Compare(a.val, b.val) })
	return ok[(len(ok)-1)/2].m
}

// repeats is the most runs of one row, of any build and label.
func (t *table) repeats() int {
	n := 0
	for _, labels := range t.cells {
		for _, rows := range labels {
			for _, runs := range rows {
				n = max(n, len(runs))
			}
		}
	}
	return n
}

// noteMarks numbers a run's error and notes and returns their marks, in
// the first cell written of that run only.
func (t *table) noteMarks(build string, m map[string]any) string {
	run := fmt.Sprintf("%p", m)
	if t.marked[run] {
		return ""
	}
	t.marked[run] = true
	var list []string
	if e := str(m, "error"); e != "" {
		list = append(list, "error: "+e)
	}
	if ns, ok := m["notes"].([]any); ok {
		for _, n := range ns {
			if s, ok := n.(string); ok && !skewNote(s) {
				list = append(list, s)
			}
		}
	}
	var marks string
	for _, n := range list {
		full := fmt.Sprintf("%s, %s (%s): %s", str(m, "scenario"), str(m, "label"), strings.TrimPrefix(build, "peer:"), n)
		if build == "" {
			full = fmt.Sprintf("%s, %s: %s", str(m, "scenario"), str(m, "label"), n)
		}
		i := indexOf(t.notes, full)
		if i < 0 {
			t.notes = append(t.notes, full)
			i = len(t.notes) - 1
		}
		marks += mark(i)
	}
	return marks
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func mark(i int) string { return "[" + strconv.Itoa(i+1) + "]" }
