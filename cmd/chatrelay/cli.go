package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/store"
)

// utc formats an epoch for people, in UTC.
func utc(epoch int64) string {
	return time.UnixMilli(epoch).UTC().Format("2006-01-02 15:04:05Z")
}

func list(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("list", "list [--data DIR] [--json]", stderr)
	var sf storeFlags
	sf.register(fs, false)
	sf.existing = true
	asJSON := fs.Bool("json", false, "one JSON array instead of a table")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("list takes no arguments")
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	threads, bad, err := store.ThreadsOf(ctx, st)
	if err != nil {
		return err
	}
	if err := listThreads(ctx, st, threads, *asJSON, stdout); err != nil {
		return err
	}
	return reportBad(stderr, bad)
}

// reportBad names on stderr each thread a list left out because it cannot
// be read, with its machine code, and then fails (exit 1, as ls and find
// do for an entry they cannot read): the list printed is not whole, and a
// script must not take it for whole.
func reportBad(stderr io.Writer, bad []store.ThreadError) error {
	if len(bad) == 0 {
		return nil
	}
	for _, b := range bad {
		if chatrelay.CodeOf(b.Err) == chatrelay.Internal {
			b.Err = fmt.Errorf("%s: %w", chatrelay.Internal, b.Err)
		}
		fmt.Fprintf(stderr, "chatrelay: list: thread %s left out: %v\n", b.Thread, b.Err) // the code first, then why
	}
	return exitStatus(1)
}

// listThreads prints threads, a table or JSON.
func listThreads(ctx context.Context, st *store.Backend, threads []store.ThreadInfo, asJSON bool, stdout io.Writer) error {
	if asJSON {
		type row struct {
			store.ThreadInfo
			LastTime string `json:"last_time"`
		}
		rows := make([]row, len(threads))
		for i, t := range threads {
			rows[i] = row{t, time.UnixMilli(t.LastEpoch).UTC().Format(time.RFC3339)}
		}
		return json.NewEncoder(stdout).Encode(rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "THREAD\tMESSAGES\tLAST AUTHOR\tLAST (UTC)\tAWAITING\tTITLE\tLAST MESSAGE")
	for _, t := range threads {
		title := t.Title
		if title == "" {
			title = "-"
		}
		last := "-"
		if p, err := st.Since(ctx, t.Thread, 0, 1); err == nil && len(p.Messages) > 0 {
			last = firstWords(chatrelay.V1Text(p.Messages[0].Message), listWords) // a file is its line
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%v\t%s\t%s\n", t.Thread, t.Messages, oneLine(string(t.LastAuthor)), utc(t.LastEpoch), t.Awaiting, oneLine(title), last)
	}
	return tw.Flush()
}

// printable is text with every control character but a line break and a
// tab, and every bidirectional formatting character, as a space: a text
// is anyone's who holds a token, and an escape sequence in it must not
// reach the host's terminal as one, nor a right-to-left override show
// its words in another order than they are stored ("Trojan Source").
func printable(text string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		return terminalRune(r)
	}, text)
}

// oneLine is a name or title as printable makes a text, on one line:
// a line break or a tab is a space too.
func oneLine(s string) string { return strings.Map(terminalRune, s) }

// terminalRune is r, or a space for a control or bidirectional
// formatting character.
func terminalRune(r rune) rune {
	if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
		return ' '
	}
	return r
}

// listWords is how many code points of the newest message list shows.
const listWords = 40

// firstWords is the first words of text on one line, at most n code
// points, with "…" if it was cut.
func firstWords(text string, n int) string {
	var b strings.Builder
	used := 0
	text = oneLine(text) // never a terminal's control sequence
	for i, w := range strings.Fields(text) {
		k := utf8.RuneCountInString(w)
		if i > 0 {
			k++
		}
		if used+k > n {
			if i == 0 { // one long word: its first n code points
				b.WriteString(string([]rune(w)[:n]))
			}
			return b.String() + "…"
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		used += k
	}
	if used == 0 {
		return "-"
	}
	return b.String()
}

func show(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("show", "show THREAD [--data DIR] [--json] [--v2] [--since N]", stderr)
	var sf storeFlags
	sf.register(fs, false)
	sf.existing = true
	asJSON := fs.Bool("json", false, "the page as JSON, shaped like the poll answer")
	v2 := fs.Bool("v2", false, "with --json: v2 message objects (interactions, cards, reactions), --since a v2 cursor (changes after it)")
	since := fs.Int64("since", 0, "only messages with epoch > `N` (0: every retained message)")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("show takes one THREAD")
	}
	if *since < 0 {
		return usageError("--since must not be negative")
	}
	if *v2 && !*asJSON {
		return usageError("--v2 goes with --json")
	}
	if err := chatrelay.CheckThread(fs.Arg(0)); err != nil {
		return err
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if *v2 {
		r, err := (&host.Verbs{Store: st}).ReadThread(ctx, host.ReadThreadInput{Thread: fs.Arg(0), Since: *since, Limit: 1 << 20})
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(r)
	}
	p, err := st.Since(ctx, fs.Arg(0), *since, 0)
	if err != nil {
		return err
	}
	if *asJSON {
		msgs := make([]json.RawMessage, len(p.Messages))
		for i, e := range p.Messages {
			msgs[i] = e.JSON
		}
		return json.NewEncoder(stdout).Encode(map[string]any{
			"thread": p.Thread, "messages": msgs, "awaiting": p.Awaiting, "cursor": p.Cursor,
		})
	}
	for _, e := range p.Messages {
		text := strings.ReplaceAll(printable(chatrelay.V1Text(e.Message)), "\n", "\n    ") // a file is a line, as in --json
		fmt.Fprintf(stdout, "%s  %-8s %d  %s\n    %s\n", utc(e.Epoch), who(e.Message), e.Epoch, e.ID, text)
		if ix := e.Interaction; ix != nil {
			fmt.Fprintf(stdout, "    [%s %s: %s]\n", ix.Type, ix.ID, interactionState(ix))
		}
		if len(e.Reactions) > 0 {
			fmt.Fprintf(stdout, "    %s\n", reactionLine(e.Reactions))
		}
	}
	fmt.Fprintf(stdout, "-- thread %s: %d messages shown, cursor %d, awaiting %v\n", p.Thread, len(p.Messages), p.Cursor, p.Awaiting)
	return nil
}

// interactionState says where an interaction stands in the store, for
// people. A pending one past its deadline is said so, not expired: an
// answer taken before the deadline may still land (check settles it).
func interactionState(ix *chatrelay.Interaction) string {
	st := ix.State
	switch {
	case st == chatrelay.Pending && time.Now().UnixMilli() >= ix.Deadline:
		return "pending, deadline " + utc(ix.Deadline) + " passed"
	case st == chatrelay.Pending:
		return "pending until " + utc(ix.Deadline)
	case ix.Answer != nil && ix.Answer.Value != "":
		return fmt.Sprintf("%s %q by %s", st, ix.Answer.Value, ix.AnsweredBy)
	case ix.AnsweredBy != "":
		return fmt.Sprintf("%s by %s", st, ix.AnsweredBy)
	}
	return string(st)
}

// reactionLine lists reactions with their counts: "👍 2  🎉 1".
func reactionLine(r chatrelay.Reactions) string {
	keys := slices.Sorted(maps.Keys(r))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, len(r[k]))
	}
	return strings.Join(parts, "  ")
}

// who names a message's author for people: a participant as "Alex
// (p_1a2b3c4d)", anyone else by the author itself.
func who(m chatrelay.Message) string {
	if id, ok := strings.CutPrefix(string(m.Author), "p:"); ok && m.AuthorName != "" {
		return oneLine(m.AuthorName) + " (" + id + ")"
	}
	return oneLine(string(m.Author))
}
