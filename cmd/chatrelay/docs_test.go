package main

// The documentation's tests: the CLI page documents every flag that
// --help lists and nothing --help lacks, with the default --help shows;
// every chatrelay command line in the docs uses only flags its command
// has; every relative link in README.md and docs/*.md resolves, #anchors
// included; the API page has a row for every error code, with its HTTP
// status; the operations page documents every chatrelay_ metric a server
// serves, with its type and labels; every CHATRELAY_ variable the docs
// name is read; every file a data folder holds is in its listing; every
// test the docs name exists; the API page's index names every route,
// and every route a page names with a method is one the server has; and
// the architecture page says truly which package imports which.

import (
	"bytes"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// repoRoot is the module root, seen from this package's folder.
const repoRoot = "../.."

// cliDoc is the page that documents every command and flag.
const cliDoc = "docs/cli.md"

// commandNames returns every subcommand of chatrelay: the dispatcher's
// table (commands, main.go), so a new command is checked as soon as it is
// added.
func commandNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}

// flagsOf runs `chatrelay cmd --help` and returns the flags it lists.
func flagsOf(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	flags := map[string]bool{}
	// flag.PrintDefaults: "  -name type" (or "  -x\tusage"), usage lines indented deeper.
	for _, m := range regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9._-]*)`).FindAllStringSubmatch(helpText(t, cmd), -1) {
		flags[m[1]] = true
	}
	return flags
}

// helpText is what `chatrelay cmd --help` prints; it fails the test
// unless the command is dispatched and prints something.
func helpText(t *testing.T, cmd string) string {
	t.Helper()
	var out bytes.Buffer
	err := run(t.Context(), []string{cmd, "--help"}, func(string) string { return "" }, strings.NewReader(""), &out, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("chatrelay %s --help: got %v, want flag.ErrHelp (is %q dispatched?)\n%s", cmd, err, cmd, out.String())
	}
	if out.Len() == 0 {
		t.Fatalf("chatrelay %s --help printed nothing", cmd)
	}
	return out.String()
}

// allFlags maps each command to its flags.
func allFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	all := map[string]map[string]bool{}
	for _, c := range commandNames(t) {
		all[c] = flagsOf(t, c)
	}
	return all
}

// flagRE matches a documented flag: --name, not part of a longer word or
// of a dash run such as a table rule.
var flagRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--([a-z0-9][a-z0-9]*(?:-[a-z0-9]+)*)`)

func flagsIn(s string) []string {
	var out []string
	for _, m := range flagRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// mdLine is one line of a Markdown file, and whether it is in a fenced
// code block.
type mdLine struct {
	text   string
	fenced bool
	n      int // 1-based line number
}

func readMarkdown(t *testing.T, rel string) []mdLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []mdLine
	fence := ""
	for i, l := range strings.Split(string(b), "\n") {
		trim := strings.TrimSpace(l)
		if fence == "" && (strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~")) {
			fence = trim[:3]
			out = append(out, mdLine{l, true, i + 1})
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trim, fence) && strings.Trim(trim, fence[:1]) == "" {
				fence = ""
			}
			out = append(out, mdLine{l, true, i + 1})
			continue
		}
		out = append(out, mdLine{l, false, i + 1})
	}
	return out
}

var headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// section is the part of a page under one heading, up to the next
// heading of the same or a higher level.
type section struct {
	title string
	level int
	lines []mdLine // the heading line included
}

func sections(lines []mdLine) []section {
	var out []section
	for i, l := range lines {
		m := headingRE.FindStringSubmatch(l.text)
		if l.fenced || m == nil {
			continue
		}
		s := section{title: m[2], level: len(m[1])}
		j := i + 1
		for ; j < len(lines); j++ {
			if n := headingRE.FindStringSubmatch(lines[j].text); !lines[j].fenced && n != nil && len(n[1]) <= s.level {
				break
			}
		}
		s.lines = lines[i:j]
		out = append(out, s)
	}
	return out
}

var commandHeadingRE = regexp.MustCompile("^`?chatrelay ([a-z][a-z0-9-]*)`?$")

// TestCLIDocFlags checks that docs/cli.md has a section for every command
// that documents each of its flags as --flag, and that every --flag the
// page names exists: under a command's section, in that command's
// --help; elsewhere, in some command's.
func TestCLIDocFlags(t *testing.T) {
	t.Parallel()
	all := allFlags(t)
	lines := readMarkdown(t, cliDoc)

	inSection := map[int]string{} // line number → the command whose section holds it
	seen := map[string]bool{}
	for _, s := range sections(lines) {
		m := commandHeadingRE.FindStringSubmatch(s.title)
		if m == nil {
			continue
		}
		cmd := m[1]
		flags, ok := all[cmd]
		if !ok {
			t.Errorf("%s:%d: a section for `chatrelay %s`, which is not a command (`chatrelay help` and run's switch do not know it)", cliDoc, s.lines[0].n, cmd)
			continue
		}
		if seen[cmd] {
			t.Errorf("%s:%d: a second section for `chatrelay %s`", cliDoc, s.lines[0].n, cmd)
		}
		seen[cmd] = true
		documented := map[string]bool{}
		for _, l := range s.lines {
			inSection[l.n] = cmd
			for _, f := range flagsIn(l.text) {
				documented[f] = true
				if !flags[f] && f != "help" {
					t.Errorf("%s:%d: --%s is documented under `chatrelay %s`, but `chatrelay %s --help` has no such flag", cliDoc, l.n, f, cmd, cmd)
				}
			}
		}
		for f := range flags {
			if !documented[f] {
				t.Errorf("%s: `chatrelay %s --help` lists --%s, but the section `chatrelay %s` does not document it", cliDoc, cmd, f, cmd)
			}
		}
	}
	for cmd := range all {
		if !seen[cmd] {
			t.Errorf("%s: no section `## chatrelay %s`; document the command and each of its flags there", cliDoc, cmd)
		}
	}
	for _, l := range lines {
		if _, ok := inSection[l.n]; ok {
			continue
		}
		for _, f := range flagsIn(l.text) {
			if !anyHas(all, f) {
				t.Errorf("%s:%d: --%s is documented, but no command's --help has it", cliDoc, l.n, f)
			}
		}
	}
}

func anyHas(all map[string]map[string]bool, f string) bool {
	if f == "help" {
		return true
	}
	for _, flags := range all {
		if flags[f] {
			return true
		}
	}
	return false
}

// docPages returns README.md and every page in docs/, relative to the root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

var inlineCodeRE = regexp.MustCompile("`+[^`]+`+")

// TestDocsCommandLines checks every chatrelay command line in README.md and
// docs/*.md (in code blocks and inline code) against its command's --help,
// and that inline code that starts with -- names a flag some command has.
func TestDocsCommandLines(t *testing.T) {
	t.Parallel()
	all := allFlags(t)
	for _, page := range docPages(t) {
		for _, l := range readMarkdown(t, page) {
			var snippets []string
			if l.fenced {
				snippets = []string{l.text}
			} else {
				for _, span := range inlineCodeRE.FindAllString(l.text, -1) {
					snippets = append(snippets, strings.Trim(span, "`"))
				}
			}
			for _, s := range snippets {
				if strings.HasPrefix(strings.TrimSpace(s), "--") {
					for _, f := range flagsIn(s) {
						if !anyHas(all, f) {
							t.Errorf("%s:%d: `%s` names --%s, which no command's --help has", page, l.n, s, f)
						}
					}
				}
				for _, inv := range invocations(s, all) {
					for _, f := range inv.flags {
						if !all[inv.cmd][f] && f != "help" {
							t.Errorf("%s:%d: `chatrelay %s … --%s`, but `chatrelay %s --help` has no --%s", page, l.n, inv.cmd, f, inv.cmd, f)
						}
					}
				}
			}
		}
	}
}

type invocation struct {
	cmd   string
	flags []string
}

// invocations finds the chatrelay command lines in s ("chatrelay reply
// --data D T X", "go run ./cmd/chatrelay serve --addr A") and the flags
// each passes, up to a shell comment, ;, && or a pipe outside [brackets].
func invocations(s string, all map[string]map[string]bool) []invocation {
	words := strings.Fields(s)
	var out []invocation
	for i := 0; i+1 < len(words); i++ {
		w := words[i]
		if w != "chatrelay" && !strings.HasSuffix(w, "/chatrelay") {
			continue
		}
		if _, ok := all[words[i+1]]; !ok {
			continue
		}
		inv := invocation{cmd: words[i+1]}
		depth := 0
		for _, a := range words[i+2:] {
			if a == "#" || strings.HasPrefix(a, "#") || a == ";" || a == "&&" || a == "||" || (a == "|" && depth == 0) {
				break
			}
			depth += strings.Count(a, "[") - strings.Count(a, "]")
			inv.flags = append(inv.flags, flagsIn(a)...)
		}
		out = append(out, inv)
	}
	return out
}

var (
	linkRE   = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// headingLinkRE is a link in a heading, which its anchor spells as its text.
	headingLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	slugDrops     = func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsNumber(r) || r == '_' || r == '-' || r == ' ')
	}
)

// slugs returns the anchors GitHub gives the headings of a page: lower
// case, punctuation dropped, spaces as hyphens, -1, -2… on repeats.
func slugs(lines []mdLine) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, l := range lines {
		m := headingRE.FindStringSubmatch(l.text)
		if l.fenced || m == nil {
			continue
		}
		text := headingLinkRE.ReplaceAllString(m[2], "$1") // a link: its text
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			if slugDrops(r) {
				continue
			}
			if r == ' ' {
				r = '-'
			}
			b.WriteRune(r)
		}
		slug := b.String()
		if n := count[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		count[slug]++
	}
	return out
}

// TestDocsLinks checks that every relative link and image in README.md and
// docs/*.md points to a file of the repository and, with a #fragment, to a
// heading of that page; and that the README links every page in docs/.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // page (relative to root) → its slugs
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		anchors[rel] = slugs(readMarkdown(t, rel))
		return anchors[rel]
	}
	linked := map[string]bool{} // pages the README links
	pages := docPages(t)
	for _, page := range pages {
		for _, l := range readMarkdown(t, page) {
			if l.fenced {
				continue
			}
			text := inlineCodeRE.ReplaceAllString(l.text, "code") // `[not](a link)`
			var targets []string
			for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
				targets = append(targets, m[1])
			}
			if m := refDefRE.FindStringSubmatch(text); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
					continue // another site: not checked here
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := page
				if path != "" {
					abs := filepath.Join(root, filepath.Dir(page), filepath.FromSlash(path))
					rel, err := filepath.Rel(root, abs)
					if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
						t.Errorf("%s:%d: link %q leaves the repository", page, l.n, target)
						continue
					}
					if _, err := os.Stat(abs); err != nil {
						t.Errorf("%s:%d: link %q: no such file %s", page, l.n, target, filepath.ToSlash(rel))
						continue
					}
					dest = filepath.ToSlash(rel)
				}
				if page == "README.md" {
					linked[dest] = true
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %q has an anchor, but %s is not a Markdown page", page, l.n, target, dest)
					continue
				}
				if !anchorsOf(dest)[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", page, l.n, target, dest, frag)
				}
			}
		}
	}
	for _, p := range pages {
		if p != "README.md" && !linked[p] {
			t.Errorf("README.md does not link %s: a newcomer could not find it", p)
		}
	}
}

// helpDefaults runs `chatrelay cmd --help` and returns each flag's
// default as PrintDefaults shows it ("" when it shows none: a zero value).
func helpDefaults(t *testing.T, cmd string) map[string]string {
	t.Helper()
	defaults := map[string]string{}
	name := ""
	for _, l := range strings.Split(helpText(t, cmd), "\n") {
		if m := regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9._-]*)`).FindStringSubmatch(l); m != nil {
			name = m[1]
			defaults[name] = ""
			continue
		}
		if m := regexp.MustCompile(`\(default (.*)\)$`).FindStringSubmatch(l); m != nil && name != "" {
			defaults[name] = strings.Trim(m[1], `"`)
		}
	}
	return defaults
}

// sameDefault reports whether doc, a default as docs/cli.md writes it
// (`10m`, `7d`, `500`, off, none), is def, as --help shows it (10m0s,
// 7d, 500, "" for a zero value).
func sameDefault(doc, def string) bool {
	doc = strings.Trim(doc, "`")
	if def == "" {
		switch doc {
		case "none", "off", `""`, "0", "0s":
			return true
		}
		return false
	}
	if doc == def {
		return true
	}
	days := func(s string) (time.Duration, bool) {
		if n, ok := strings.CutSuffix(s, "d"); ok {
			if d, err := strconv.Atoi(n); err == nil {
				return time.Duration(d) * 24 * time.Hour, true
			}
		}
		d, err := time.ParseDuration(s)
		return d, err == nil
	}
	a, okA := days(doc)
	b, okB := days(def)
	return okA && okB && a == b
}

// docDefaultExceptions are the defaults docs/cli.md states in words where
// --help shows none (or shows the zero value the command replaces).
var docDefaultExceptions = map[string]string{
	"serve --ticket-key-file": "`DATA/ticket.key`",
	"ask --timeout":           "`10m` input, `1h` approval",
	"open --text":             "the title",
	"webhook --secret":        "`CHATRELAY_WEBHOOK_SECRET`",
}

var flagRowRE = regexp.MustCompile("^\\| `--([a-z0-9-]+)`(?:, `--([a-z0-9-]+)`)? \\| ([^|]*) \\|")

// TestCLIDocDefaults checks the default column of every flag table in
// docs/cli.md against the default `chatrelay COMMAND --help` shows.
func TestCLIDocDefaults(t *testing.T) {
	t.Parallel()
	rows := 0
	for _, s := range sections(readMarkdown(t, cliDoc)) {
		m := commandHeadingRE.FindStringSubmatch(s.title)
		if m == nil {
			continue
		}
		cmd := m[1]
		defaults := helpDefaults(t, cmd)
		for _, l := range s.lines {
			r := flagRowRE.FindStringSubmatch(l.text)
			if l.fenced || r == nil {
				continue
			}
			doc := strings.TrimSpace(r[3])
			for _, f := range r[1:3] {
				def, ok := defaults[f]
				if f == "" || !ok {
					continue // no such flag: TestCLIDocFlags says so
				}
				rows++
				switch {
				case sameDefault(doc, def):
				case docDefaultExceptions[cmd+" --"+f] == doc:
				case f == "store" && def == "" && doc == "`file:DATA`":
				case def == "" && strings.HasPrefix(doc, "required"):
				// A host command takes the folder's recorded settings unless given (storeFlags.options).
				case cmd != "serve" && doc == "the folder's" && (f == "max-threads" || f == "retention-messages" || f == "retention-age" || f == "public-url"):
				default:
					t.Errorf("%s:%d: `chatrelay %s --%s` defaults to %s, but `chatrelay %s --help` says %q", cliDoc, l.n, cmd, f, doc, cmd, def)
				}
			}
		}
	}
	if rows < 100 {
		t.Errorf("checked only %d flag rows in %s: is the table format still | `--flag` | default | meaning |?", rows, cliDoc)
	}
}

var statusRowRE = regexp.MustCompile("^\\| ([1-5][0-9][0-9])\\b[^|]* \\| `([a-z_]+)`(?: / `([a-z_]+)`)? \\|")

// TestDocsErrorCodes checks docs/api.md against the code table
// (chatrelay.CodeTable): every code has a row, `| STATUS | `code` |` with
// its HTTP status, or one of the host's codes' table; and every row names
// a code that exists, with the status the server answers.
func TestDocsErrorCodes(t *testing.T) {
	t.Parallel()
	const apiDoc = "docs/api.md"
	status := map[chatrelay.Code]int{}
	for _, c := range chatrelay.CodeTable() {
		status[c.Code] = c.Status
	}
	rowed := map[chatrelay.Code]bool{}
	for _, l := range readMarkdown(t, apiDoc) {
		if l.fenced {
			continue
		}
		if r := statusRowRE.FindStringSubmatch(l.text); r != nil {
			st, _ := strconv.Atoi(r[1])
			for _, c := range r[2:] {
				if c == "" {
					continue
				}
				want, ok := status[chatrelay.Code(c)]
				switch {
				case !ok:
					t.Errorf("%s:%d: `%s` is documented, but the code table (error.go) has no such code", apiDoc, l.n, c)
				case want != st:
					t.Errorf("%s:%d: `%s` is documented as %d, but the server answers it %d", apiDoc, l.n, c, st, want)
				}
				rowed[chatrelay.Code(c)] = true
			}
		}
		// The MCP route's table: | refusal | status | code |.
		if r := regexp.MustCompile("^\\|.*\\| ([1-5][0-9][0-9])\\b[^|]* \\| `([a-z_]+)` \\|$").FindStringSubmatch(l.text); r != nil {
			st, _ := strconv.Atoi(r[1])
			if want, ok := status[chatrelay.Code(r[2])]; !ok || want != st {
				t.Errorf("%s:%d: `%s` is documented as %d, but the code table says %d", apiDoc, l.n, r[2], st, want)
			}
		}
		// The host's codes: | `code` | … |.
		if r := regexp.MustCompile("^\\| `([a-z_]+)` \\|").FindStringSubmatch(l.text); r != nil {
			if _, ok := status[chatrelay.Code(r[1])]; ok {
				rowed[chatrelay.Code(r[1])] = true
			}
		}
	}
	for _, c := range chatrelay.CodeTable() {
		if !rowed[c.Code] {
			t.Errorf("%s: no row for the code `%s` (%d): add it to the error table", apiDoc, c.Code, c.Status)
		}
	}
}

// metricDoc is a row of the metrics table of docs/operations.md.
type metricDoc struct {
	typ    string
	labels map[string][]string // label → its documented values (nil: not listed)
	line   int
}

var (
	metricRowRE = regexp.MustCompile("^\\| `(chatrelay_[a-z_]+)` \\| ([a-z]*) \\|([^|]*)\\|")
	parenRE     = regexp.MustCompile(`\([^)]*\)`)
	codeSpanRE  = regexp.MustCompile("`([^`]+)`")
)

// documentedMetrics parses the table under "## Metrics" in docs/operations.md.
func documentedMetrics(t *testing.T) map[string]metricDoc {
	t.Helper()
	out := map[string]metricDoc{}
	for _, s := range sections(readMarkdown(t, "docs/operations.md")) {
		if s.title != "Metrics" {
			continue
		}
		for _, l := range s.lines {
			r := metricRowRE.FindStringSubmatch(l.text)
			if l.fenced || r == nil {
				continue
			}
			d := metricDoc{typ: r[2], labels: map[string][]string{}, line: l.n}
			for seg := range strings.SplitSeq(parenRE.ReplaceAllString(r[3], ""), ";") {
				name, values, ok := strings.Cut(seg, "=")
				names := codeSpanRE.FindAllStringSubmatch(name, -1)
				if !ok {
					for _, n := range names {
						d.labels[n[1]] = nil
					}
					continue
				}
				for _, v := range codeSpanRE.FindAllStringSubmatch(values, -1) {
					d.labels[names[len(names)-1][1]] = append(d.labels[names[len(names)-1][1]], v[1])
				}
			}
			out[r[1]] = d
		}
	}
	return out
}

// TestDocsMetrics serves (file store, with a webhook) and checks its
// /metrics against docs/operations.md: every chatrelay_ family served is
// documented with its type and labels, every documented value of a label
// is served from the start, and every documented family is served.
func TestDocsMetrics(t *testing.T) {
	t.Parallel()
	docs := documentedMetrics(t)
	if len(docs) < 10 {
		t.Fatalf("found %d metrics in docs/operations.md's Metrics table: is its format still | `name` | type | labels | meaning |?", len(docs))
	}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	srv := opsServe(t, "--metrics-addr", "127.0.0.1:0", "--webhook", hook.URL, "--webhook-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	assert.Equal(t, "post", opsPost(t, t.Context(), http.DefaultClient, srv.base, opsToken("docs metrics"), "hello", nil), http.StatusCreated)
	assert.Equal(t, "no token", opsPost(t, t.Context(), http.DefaultClient, srv.base, "", "hello", nil), http.StatusUnauthorized)
	status, body := opsGet(t, srv.metrics+"/metrics")
	assert.Equal(t, "/metrics", status, http.StatusOK)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	assert.Success(t, err)

	for name, fam := range fams {
		if !strings.HasPrefix(name, "chatrelay_") {
			continue
		}
		d, ok := docs[name]
		if !ok {
			t.Errorf("/metrics serves %s, which docs/operations.md's Metrics table does not document", name)
			continue
		}
		if typ := strings.ToLower(fam.GetType().String()); typ != d.typ {
			t.Errorf("docs/operations.md:%d: %s is documented as a %s, but is a %s", d.line, name, d.typ, typ)
		}
		served := map[string]map[string]bool{}
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				if served[lp.GetName()] == nil {
					served[lp.GetName()] = map[string]bool{}
				}
				served[lp.GetName()][lp.GetValue()] = true
			}
		}
		for l := range served {
			if _, ok := d.labels[l]; !ok {
				t.Errorf("docs/operations.md:%d: %s has the label %q, which is not documented", d.line, name, l)
			}
		}
		for l, values := range d.labels {
			if served[l] == nil {
				t.Errorf("docs/operations.md:%d: %s is documented with the label %q, which it does not have", d.line, name, l)
				continue
			}
			for _, v := range values {
				if !served[l][v] {
					t.Errorf("docs/operations.md:%d: %s{%s=%q} is documented, but not served from the start", d.line, name, l, v)
				}
			}
			for v := range served[l] {
				if values != nil && !slices.Contains(values, v) {
					t.Errorf("docs/operations.md:%d: %s{%s=%q} is served, but not among the documented values %v", d.line, name, l, v, values)
				}
			}
		}
	}
	for name, d := range docs {
		// The store's errors have no fixed label set: the family appears at the first.
		if fams[name] == nil && name != "chatrelay_store_errors_total" {
			t.Errorf("docs/operations.md:%d: %s is documented, but /metrics does not serve it", d.line, name)
		}
	}
}

// docsShellVars are CHATRELAY_ names the docs use as the reader's own
// shell variables, which chatrelay does not read.
var docsShellVars = map[string]bool{
	"CHATRELAY_KEY": true, // agents.md: the agent key, in the MCP client's environment
}

var envRE = regexp.MustCompile(`\bCHATRELAY_[A-Z0-9_]*[A-Z0-9]\b`)

// TestDocsEnvVars checks that every CHATRELAY_ variable README.md and
// docs/*.md name is read: a flag's (CHATRELAY_<FLAG>, by any command), or
// one the code or the tests read by name.
func TestDocsEnvVars(t *testing.T) {
	t.Parallel()
	flagEnv := map[string]bool{}
	for _, flags := range allFlags(t) {
		for f := range flags {
			flagEnv[envName(f)] = true
		}
	}
	var source strings.Builder // every Go file of the module
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && p != repoRoot) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			b, err := os.ReadFile(p)
			source.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	code := source.String()
	for _, page := range docPages(t) {
		for _, l := range readMarkdown(t, page) {
			for _, v := range envRE.FindAllString(l.text, -1) {
				if !flagEnv[v] && !docsShellVars[v] && !strings.Contains(code, `"`+v+`"`) {
					t.Errorf("%s:%d: %s is no flag's variable and nothing reads it", page, l.n, v)
				}
			}
		}
	}
}

var (
	hex16RE = regexp.MustCompile(`\b[0-9a-f]{16}\b`)
	hex64RE = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
)

// TestDocsDataFolder runs a server and the host's commands on one data
// folder, then checks that every file and folder in it is in a listing
// of docs/operations.md (its fenced blocks, such as "The data folder"): a
// thread's id written <thread> (or a webhook's <ID>), a digest <sha256>,
// and a lock file X.lock as X.
func TestDocsDataFolder(t *testing.T) {
	t.Parallel()
	var listing strings.Builder
	for _, l := range readMarkdown(t, "docs/operations.md") {
		if l.fenced {
			listing.WriteString(l.text + "\n")
		}
	}
	listed := func(name string) bool {
		return regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(name) + `(\s|$)`).MatchString(listing.String())
	}

	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	srv := opsServe(t, "--webhook", hook.URL, "--webhook-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	tok := opsToken("docs data folder")
	assert.Equal(t, "post", opsPost(t, t.Context(), http.DefaultClient, srv.base, tok, "hello", nil), http.StatusCreated)
	thread := chatrelay.ThreadOf(tok)
	file := filepath.Join(t.TempDir(), "build.log")
	assert.Success(t, os.WriteFile(file, []byte("ok\n"), 0o600))
	for _, args := range [][]string{
		{"reply", thread, "done", "--attach", file},
		{"ask", thread, "--approval", "Deploy?"},
		{"share", thread, "--name", "Alex"},
		{"device", thread, "--name", "Phone"},
		{"agent", "add", "builder"},
		{"push", "rotate-key"},
	} {
		var out bytes.Buffer
		err := run(t.Context(), append(args, "--data", srv.data), func(string) string { return "" }, strings.NewReader(""), &out, &out)
		if err != nil {
			t.Fatalf("chatrelay %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	assert.Success(t, srv.stop())

	n := 0
	err := filepath.WalkDir(srv.data, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == srv.data {
			return err
		}
		n++
		name := hex64RE.ReplaceAllString(d.Name(), "<sha256>")
		names := []string{hex16RE.ReplaceAllString(name, "<thread>"), hex16RE.ReplaceAllString(name, "<ID>")}
		for _, nm := range names {
			if d.IsDir() && listed(nm+"/") || !d.IsDir() && (listed(nm) || strings.HasSuffix(nm, ".lock") && listed(strings.TrimSuffix(nm, ".lock"))) {
				return nil
			}
		}
		rel, _ := filepath.Rel(srv.data, p)
		t.Errorf("the data folder holds %s, which no listing of docs/operations.md names (as %s)", rel, names[0])
		return nil
	})
	assert.Success(t, err)
	if n < 15 {
		t.Errorf("the data folder held only %d files and folders: did the commands run?", n)
	}
}

var testNameRE = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*\*?`)

// TestDocsTestNames checks that every test, benchmark and fuzz target
// README.md and docs/*.md name (TestReadyz; TestNodes* for a family) is a
// function of some _test.go file of the module, so that a reader can run it.
func TestDocsTestNames(t *testing.T) {
	t.Parallel()
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	var defined []string
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && p != repoRoot) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			for _, m := range funcRE.FindAllStringSubmatch(string(b), -1) {
				defined = append(defined, m[1])
			}
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(name string) bool {
		prefix, family := strings.CutSuffix(name, "*")
		return slices.ContainsFunc(defined, func(d string) bool { return d == name || family && strings.HasPrefix(d, prefix) })
	}
	for _, page := range docPages(t) {
		for _, l := range readMarkdown(t, page) {
			for _, name := range testNameRE.FindAllString(l.text, -1) {
				if !exists(name) {
					t.Errorf("%s:%d: %s is named, but no _test.go file of the module defines it", page, l.n, name)
				}
			}
		}
	}
}

// TestDocsChatClientOptions checks that docs/web.md names every option of
// the client module (the keys of chat.js's defaults) as `name`.
func TestDocsChatClientOptions(t *testing.T) {
	t.Parallel()
	js, err := os.ReadFile(filepath.Join(repoRoot, "web", "static", "chat.js"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(js), "\nconst defaults = {\n")
	block, _, ok2 := strings.Cut(block, "\n};")
	if !ok || !ok2 {
		t.Fatal("web/static/chat.js has no `const defaults = {…};`: where are the client's options now?")
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "web.md"))
	if err != nil {
		t.Fatal(err)
	}
	keys := regexp.MustCompile(`(?m)^  ([A-Za-z]+):`).FindAllStringSubmatch(block, -1)
	if len(keys) < 5 {
		t.Fatalf("found %d options in chat.js's defaults", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(string(doc), "`"+k[1]+"`") {
			t.Errorf("docs/web.md does not document the ChatClient option `%s` (web/static/chat.js's defaults)", k[1])
		}
	}
}

// TestDocsRouteIndex: the index at the top of docs/api.md names every
// route of the API (the route table's documented rows, chatrelay.Routes)
// and each method of MCP's, so a reader finds each one there, not only in
// its section; and docs/operations.md names the probes and /metrics.
func TestDocsRouteIndex(t *testing.T) {
	t.Parallel()
	var index []string
	for _, l := range readMarkdown(t, "docs/api.md") {
		if strings.HasPrefix(l.text, "## ") {
			break
		}
		if strings.HasPrefix(l.text, "| ") {
			index = append(index, l.text)
		}
	}
	ops, err := os.ReadFile(filepath.Join(repoRoot, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range chatrelay.Routes() {
		switch {
		case row.Mount == chatrelay.MountOps:
			// The probes and the scrape are the operations page's.
			if want := "`" + row.Method + " " + row.Path + "`"; !strings.Contains(string(ops), want) {
				t.Errorf("docs/operations.md names no %s", want)
			}
			continue
		case row.Path == chatrelay.PathMCP:
			// One row, "`POST`, `GET`, `DELETE /mcp`": each method named on it.
			i := slices.IndexFunc(index, func(l string) bool { return strings.Contains(l, " /mcp`") })
			if i < 0 || !strings.Contains(index[i], "`"+row.Method) {
				t.Errorf("docs/api.md: the index's /mcp row names no `%s`", row.Method)
			}
			continue
		case !row.Documented():
			continue
		}
		want := "`" + row.Method + " " + row.Path
		if row.AnyMethod {
			want = "`" + row.Path
		}
		if !slices.ContainsFunc(index, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("docs/api.md: the index names no %s`", want)
		}
	}
}

// docRouteRE matches a route the docs name with its method: `GET
// /api/chat/poll`, `DELETE /api/chat/devices/{id}`. A {name} segment is
// a placeholder; a query string is not part of the route.
var docRouteRE = regexp.MustCompile(`\b(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (/(?:[A-Za-z0-9_.~-]+|\{[a-z_]+\})(?:/(?:[A-Za-z0-9_.~-]+|\{[a-z_]+\}))*/?)`)

// routeServes reports whether row answers method on path, a path as the
// docs write it (placeholders as {name}, the .php twin of a PHP route).
func routeServes(row chatrelay.Route, method, path string) bool {
	switch {
	case row.Method == "": // the 404 of every other path: no route a doc may name
		return false
	case row.AnyMethod, row.Method == method, method == "HEAD" && row.TakesHead():
	default:
		return false
	}
	if row.PHP && strings.HasSuffix(path, ".php") {
		path = strings.TrimSuffix(path, ".php")
	}
	want, got := strings.Split(row.Path, "/"), strings.Split(strings.TrimSuffix(path, "."), "/")
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		placeholder := strings.HasPrefix(want[i], "{") && strings.HasPrefix(got[i], "{")
		if want[i] != got[i] && !placeholder {
			return false
		}
	}
	return true
}

// TestDocsRoutesExist is TestDocsRouteIndex's other half: every route
// the pages about this server name with a method (`POST
// /api/chat/respond`, in prose, tables, headings and curl comments) is a
// row of the route table with that method, so no page sends a reader to
// a route or a method the server answers 404 or 405. The architecture
// page's recipe names a route to add, and the performance page other
// servers' routes: they are not read.
func TestDocsRoutesExist(t *testing.T) {
	t.Parallel()
	pages := []string{"README.md", "docs/api.md", "docs/agents.md", "docs/cli.md", "docs/operations.md", "docs/web.md"}
	routes := chatrelay.Routes()
	seen := 0
	for _, page := range pages {
		for _, l := range readMarkdown(t, page) {
			if l.fenced && strings.Contains(l.text, " HTTP/1.1") {
				continue // a request a webhook receiver gets, not one the server answers
			}
			for _, m := range docRouteRE.FindAllStringSubmatch(l.text, -1) {
				method, path := m[1], m[2]
				if !strings.HasPrefix(path, "/api/") && !strings.HasPrefix(path, "/mcp") && !strings.HasPrefix(path, "/healthz") && !strings.HasPrefix(path, "/readyz") && !strings.HasPrefix(path, "/metrics") {
					continue
				}
				seen++
				if !slices.ContainsFunc(routes, func(r chatrelay.Route) bool { return routeServes(r, method, path) }) {
					t.Errorf("%s:%d: `%s %s` is named, but the route table (routes.go) has no such route with that method", page, l.n, method, path)
				}
			}
		}
	}
	if seen < len(routes) {
		t.Fatalf("found only %d routes named with a method in the docs: the pattern no longer reads them", seen)
	}
}

// importsRE matches a clause of the architecture page's "Imports go one
// way." paragraph: "`host` imports `chatrelay` and `store`"; nothingRE
// one of "`a`, `b` and `c` import nothing of the module".
var (
	importsRE = regexp.MustCompile("`([a-z/]+)` imports ((?:`[a-z/]+`(?:, | and )?)+)")
	nothingRE = regexp.MustCompile("((?:`[a-z/]+`(?:, | and )?)+) imports? nothing of the module")
	pkgNameRE = regexp.MustCompile("`([a-z/]+)`")
)

// TestDocsImports checks docs/architecture.md's paragraph on which
// package imports which against `go list`: each package it names imports
// exactly the module's packages it says, and it names every package but
// the commands and the internal test helpers.
func TestDocsImports(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	var para string
	for _, l := range readMarkdown(t, "docs/architecture.md") {
		switch {
		case strings.HasPrefix(l.text, "Imports go one way."):
			para = l.text
		case para != "" && l.text == "":
			goto read
		case para != "":
			para += " " + l.text
		}
	}
read:
	if para == "" {
		t.Fatal("docs/architecture.md has no paragraph starting \"Imports go one way.\"")
	}
	const module = "github.com/chatrelay/chatrelay"
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{} // a package, by its path in the module ("chatrelay" for the root), and the module's packages it imports
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		name := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if name == "" {
			name = "chatrelay"
		}
		own := []string{}
		for _, imp := range f[1:] {
			switch {
			case imp == module:
				own = append(own, "chatrelay")
			case strings.HasPrefix(imp, module+"/"):
				own = append(own, strings.TrimPrefix(imp, module+"/"))
			}
		}
		slices.Sort(own)
		imports[name] = own
	}
	said := map[string][]string{}
	for _, m := range nothingRE.FindAllStringSubmatch(para, -1) {
		for _, p := range pkgNameRE.FindAllStringSubmatch(m[1], -1) {
			said[p[1]] = []string{}
		}
	}
	for _, m := range importsRE.FindAllStringSubmatch(para, -1) {
		var of []string
		for _, p := range pkgNameRE.FindAllStringSubmatch(m[2], -1) {
			of = append(of, p[1])
		}
		slices.Sort(of)
		said[m[1]] = of
	}
	for name, of := range said {
		got, ok := imports[name]
		switch {
		case !ok:
			t.Errorf("docs/architecture.md: `%s` is no package of the module", name)
		case !slices.Equal(got, of):
			t.Errorf("docs/architecture.md: `%s` imports %q, it says %q", name, got, of)
		}
	}
	for name := range imports {
		if _, ok := said[name]; !ok && !strings.HasPrefix(name, "cmd/") && !strings.HasPrefix(name, "internal/") {
			t.Errorf("docs/architecture.md: the imports paragraph does not say what `%s` imports", name)
		}
	}
}
