package main

// The documentation's tests: the CLI page documents every flag that
// --help lists and nothing --help lacks, every chatrelay command line in
// the docs uses only flags its command has, and every relative link in
// README.md and docs/*.md resolves, #anchors included.

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/chatrelay/chatrelay"
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
	var out bytes.Buffer
	err := run(t.Context(), []string{cmd, "--help"}, func(string) string { return "" }, strings.NewReader(""), &out, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("chatrelay %s --help: got %v, want flag.ErrHelp (is %q dispatched?)\n%s", cmd, err, cmd, out.String())
	}
	if out.Len() == 0 {
		t.Fatalf("chatrelay %s --help printed nothing", cmd)
	}
	flags := map[string]bool{}
	// flag.PrintDefaults: "  -name type" (or "  -x\tusage"), usage lines indented deeper.
	for _, m := range regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9._-]*)`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	return flags
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

// TestDocsRouteIndex: the index at the top of docs/api.md names every
// route of the API (the route table's documented rows, chatrelay.Routes),
// so a reader finds each one there, not only in its section.
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
	for _, row := range chatrelay.Routes() {
		if !row.Documented() {
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
