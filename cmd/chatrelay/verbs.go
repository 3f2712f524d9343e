package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/transport"
)

// The host's verbs on the command line (contract Part 4): each prints its
// result as one JSON object, the same as the MCP tool of the same verb.

// verbFlags are the flags of a verb that writes: the store's, and
// --client-id where the verb takes one.
type verbFlags struct {
	fs       *flag.FlagSet
	sf       storeFlags
	clientID string
	// publicURL is --public-url, for the verbs that answer a claim link
	// (open_thread); nil: the command has no such flag.
	publicURL *string
}

// withPublicURL adds --public-url: the base of open_thread's claim links.
func (v *verbFlags) withPublicURL() *verbFlags {
	v.publicURL = v.fs.String("public-url", "", "the server's public `URL` (with its prefix) that claim links start with (default: what the folder's server records with serve --public-url; none: the link is its path alone, /#t=…)")
	return v
}

// startsStore lets the command open a data folder that does not exist
// yet: open makes a thread in it, mcp serves an agent that may.
func (v *verbFlags) startsStore() *verbFlags {
	v.sf.existing = false
	return v
}

func newVerb(name, synopsis string, stderr io.Writer, clientID bool) *verbFlags {
	v := &verbFlags{fs: newFlags(name, name+" "+synopsis, stderr)}
	v.sf.register(v.fs, true)
	v.sf.existing = true // a verb answers threads that exist (startsStore: but open and mcp)
	if clientID {
		v.fs.StringVar(&v.clientID, "client-id", "", "an idempotency `key` ("+chatrelay.ClientIDPattern.String()+"): running the command again with it stores nothing new")
	}
	return v
}

// open parses the command line, checks it has n operands, and opens the
// store. The caller closes it.
func (v *verbFlags) open(ctx context.Context, e cmdEnv, n int, what string) (*host.Verbs, func(), error) {
	if err := parse(v.fs, e.args, e.getenv); err != nil {
		return nil, nil, err
	}
	if v.fs.NArg() != n {
		return nil, nil, usageError(fmt.Sprintf("%s takes %s", v.fs.Name(), what))
	}
	if n > 0 { // THREAD first: malformed, it is a bad command line wherever the store is
		if err := chatrelay.CheckThread(v.fs.Arg(0)); err != nil {
			return nil, nil, err
		}
	}
	emptyKey := false
	v.fs.Visit(func(f *flag.Flag) { emptyKey = emptyKey || f.Name == "client-id" && v.clientID == "" })
	if emptyKey { // given, but empty: "$ID" with ID unset would store at every retry
		return nil, nil, chatrelay.Errorf(chatrelay.InvalidClientID, "--client-id is empty: an idempotency key must match %s", chatrelay.ClientIDPattern)
	}
	if v.publicURL != nil && *v.publicURL != "" {
		if _, err := transport.CheckPublicURL(*v.publicURL); err != nil {
			return nil, nil, usageError("--public-url " + err.Error())
		}
	}
	return v.connect(ctx)
}

// connect opens the store of the parsed command line (open), with its
// public URL: --public-url's, or else the folder's.
func (v *verbFlags) connect(ctx context.Context) (*host.Verbs, func(), error) {
	st, err := v.sf.openHost(ctx)
	if err != nil {
		return nil, nil, err
	}
	base := st.Settings.PublicURL
	if v.publicURL != nil && *v.publicURL != "" {
		base, _ = transport.CheckPublicURL(*v.publicURL) // checked by open
	}
	return &host.Verbs{Store: st, PublicURL: base}, func() { st.Close() }, nil
}

// connectAgain connects (connect) to the store, which open found
// unreachable with err (a Redis restarting), for a wait: as the wait
// looks again at a store it cannot reach, it tries every 250 ms, for up
// to 5 minutes, then fails with the last error.
func (v *verbFlags) connectAgain(ctx context.Context, e cmdEnv, err error) (*host.Verbs, func(), error) {
	fmt.Fprintf(e.stderr, "chatrelay: %v; looking again every 250ms for up to 5 minutes\n", err)
	deadline := time.Now().Add(5 * time.Minute)
	for chatrelay.CodeOf(err) == chatrelay.StoreUnavailable && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("interrupted: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
		h, done, cerr := v.connect(ctx)
		if cerr == nil {
			return h, done, nil
		}
		err = cerr
	}
	return nil, nil, err
}

// printResult prints a verb's result r as one JSON object, or returns
// its error.
func (e cmdEnv) printResult(r any, err error) error {
	if err != nil {
		return err
	}
	return printJSON(e.stdout, r)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func reply(ctx context.Context, e cmdEnv) error {
	v := newVerb("reply", `THREAD TEXT [--attach FILE]… [--data DIR] [--client-id ID]   (TEXT "-" reads standard input)`, e.stderr, true)
	attach := v.attachFlag("the message carries", "; TEXT may then be empty")
	h, files, done, err := v.openAttached(ctx, e, 2, "THREAD and TEXT", attach)
	if err != nil {
		return err
	}
	defer done()
	text := v.fs.Arg(1)
	if text == "-" {
		b, err := readInput(ctx, e.stdin, 1<<20)
		if err != nil {
			return err
		}
		text = strings.TrimSuffix(string(b), "\n")
	}
	r, err := h.Send(ctx, host.SendInput{Thread: v.fs.Arg(0), Text: text, ClientID: v.clientID, Attachments: files})
	if err != nil {
		return interrupted(ctx, err)
	}
	var m chatrelay.Message
	if err := json.Unmarshal(r.Message, &m); err != nil {
		return err
	}
	// The v1 answer's fields, as before, and the replay flag.
	return printJSON(e.stdout, struct {
		ID       string `json:"id"`
		Epoch    int64  `json:"epoch"`
		TS       string `json:"ts"`
		Thread   string `json:"thread"`
		Replayed bool   `json:"replayed,omitempty"`
	}{m.ID, m.Epoch, m.TS, v.fs.Arg(0), r.Replayed})
}

// choiceFlag is a repeatable --choice VALUE[=LABEL].
type choiceFlag []chatrelay.Choice

func (c *choiceFlag) String() string { return "" }
func (c *choiceFlag) Set(s string) error {
	value, label, _ := strings.Cut(s, "=")
	*c = append(*c, chatrelay.Choice{Value: value, Label: label})
	return nil
}

// detailFlag is a repeatable --detail LABEL=VALUE.
type detailFlag []chatrelay.Detail

func (d *detailFlag) String() string { return "" }
func (d *detailFlag) Set(s string) error {
	label, value, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want LABEL=VALUE")
	}
	*d = append(*d, chatrelay.Detail{Label: label, Value: value})
	return nil
}

func ask(ctx context.Context, e cmdEnv) error {
	v := newVerb("ask", "THREAD (--input PROMPT [--choice VALUE[=LABEL]]... [--allow-text] | --approval SUMMARY [--detail LABEL=VALUE]...) [--title T] [--timeout D] [--attach FILE]... [--wait [--keep-on-interrupt]] [--data DIR]", e.stderr, true)
	input := v.fs.String("input", "", fmt.Sprintf("ask for input: the `prompt` (≤ %d characters)", chatrelay.LimitInputPrompt.Max))
	approval := v.fs.String("approval", "", fmt.Sprintf("ask for approval: the `summary` of what hermes would do (≤ %d characters)", chatrelay.LimitApprovalText.Max))
	title := v.fs.String("title", "", fmt.Sprintf("the `title` (input ≤ %d, approval: the tool or action, ≤ %d)", chatrelay.LimitInputTitle.Max, chatrelay.LimitApprovalTitle.Max))
	var choices choiceFlag
	v.fs.Var(&choices, "choice", fmt.Sprintf("an input's choice `VALUE[=LABEL]` (repeatable, ≤ %d, values unique)", chatrelay.LimitChoices.Max))
	allowText := v.fs.Bool("allow-text", false, "an input may be answered with any text, not only a choice")
	var details detailFlag
	v.fs.Var(&details, "detail", fmt.Sprintf("an approval's `LABEL=VALUE` detail (repeatable, ≤ %d)", chatrelay.LimitDetails.Max))
	inLo, inHi := chatrelay.LimitInputTimeout.Duration()
	apLo, apHi := chatrelay.LimitApprovalTime.Duration()
	timeout := v.fs.Duration("timeout", 0, fmt.Sprintf("the deadline, after now (input %v … %v, default %v; approval %v … %v, default %v)",
		inLo, inHi, chatrelay.DefaultInputTimeout, apLo, apHi, chatrelay.DefaultApprovalTimeout))
	wait := v.fs.Bool("wait", false, "wait for the answer and say it in the exit status: 0 approved or answered, 10 denied, 11 expired, 12 canceled")
	keep := v.fs.Bool("keep-on-interrupt", false, "with --wait: an interrupt (Ctrl-C) or SIGTERM leaves the interaction pending instead of canceling it")
	attach := v.attachFlag("the question shows, such as the diff or the screenshot an approval is about", "")
	h, files, done, err := v.openAttached(ctx, e, 1, "THREAD", attach)
	if err != nil {
		return err
	}
	defer done()
	if (*input == "") == (*approval == "") {
		return usageError("ask takes exactly one of --input PROMPT and --approval SUMMARY")
	}
	secs, err := wholeSeconds(*timeout)
	if err != nil {
		return err
	}
	if secs == 0 && given(v.fs, "timeout") { // 0 is the verb's default; a 0 given is under 1s
		return chatrelay.Errorf(chatrelay.InvalidInteraction, "--timeout 0s: the least is 1s (leave --timeout out for the default: input %v, approval %v)",
			chatrelay.DefaultInputTimeout, chatrelay.DefaultApprovalTimeout)
	}
	thread := v.fs.Arg(0)
	var r host.InteractionResult
	if *input != "" {
		if len(details) > 0 {
			return usageError("--detail is for --approval")
		}
		r, err = h.RequestInput(ctx, host.RequestInputInput{Thread: thread, Prompt: *input, Title: *title,
			Choices: choices, AllowText: *allowText, Timeout: secs, ClientID: v.clientID, Attachments: files})
	} else {
		if len(choices) > 0 || *allowText {
			return usageError("--choice and --allow-text are for --input")
		}
		r, err = h.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: *approval, Title: *title,
			Details: details, Timeout: secs, ClientID: v.clientID, Attachments: files})
	}
	if err != nil {
		return interrupted(ctx, err)
	}
	if !*wait {
		return printJSON(e.stdout, r)
	}
	id := r.Interaction.ID
	then := "cancels it"
	if *keep {
		then = "leaves it pending"
	}
	fmt.Fprintf(e.stderr, "chatrelay: waiting for interaction %s in thread %s (an interrupt %s)\n", id, thread, then)
	err = waitAndExit(ctx, h, e, thread, id)
	if !interruptedWait(ctx, err) {
		return err
	}
	if *keep {
		return leftPending(ctx, h, e, thread, id)
	}
	// Interrupted: withdraw the question nobody waits for. An answer that
	// came first is the outcome.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	in := host.InteractionInput{Thread: thread, InteractionID: id}
	r, err = h.CancelInteraction(cctx, in)
	if chatrelay.CodeOf(err) == chatrelay.InteractionClosed {
		r, err = h.CheckInteraction(cctx, in)
	}
	if err != nil { // the question may still be out there: say so
		return fmt.Errorf("interrupted: interaction %s in thread %s was not canceled and may still be pending (chatrelay cancel %s %s withdraws it): %w",
			id, thread, thread, id, err)
	}
	return printOutcome(e, r)
}

// interruptedWait reports whether a wait that ended with err was ended by
// the user's interrupt (ctx): canceled, or a store call in flight at the
// interrupt that then failed (a read Redis stopped answering ends at its
// own timeout, not at the interrupt). Either way the question is to be
// withdrawn, or said to be still pending; an outcome the wait reached is
// not.
func interruptedWait(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || chatrelay.CodeOf(err) == chatrelay.StoreUnavailable)
}

// wholeSeconds is a --timeout in whole seconds (0 stays 0).
func wholeSeconds(d time.Duration) (int, error) {
	if d < 0 || d%time.Second != 0 {
		return 0, usageError(fmt.Sprintf("--timeout %v: want whole seconds, such as 90s or 10m", d))
	}
	return int(d / time.Second), nil
}

// waitAndExit waits (in rounds of at most 5 minutes) until the interaction
// is closed, prints it, and returns its state as the exit status.
func waitAndExit(ctx context.Context, h *host.Verbs, e cmdEnv, thread, id string) error {
	for {
		r, err := h.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: id})
		if err != nil {
			return err
		}
		if !r.TimedOut {
			return printOutcome(e, r)
		}
	}
}

// leftPending ends a wait an interrupt stopped without canceling the
// interaction: an answer the store took before the wait saw it is the
// outcome (printed, with its exit status); else it is still pending.
func leftPending(ctx context.Context, h *host.Verbs, e cmdEnv, thread, id string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	r, err := h.CheckInteraction(cctx, host.InteractionInput{Thread: thread, InteractionID: id})
	switch {
	case err != nil:
		return fmt.Errorf("interrupted: interaction %s in thread %s: %w", id, thread, err)
	case r.Interaction.State.Closed():
		return printOutcome(e, r)
	}
	return fmt.Errorf("interrupted: interaction %s in thread %s is still pending", id, thread)
}

// printOutcome prints a closed interaction and returns its state as the
// exit status (when not 0, even if its line, given up at a stop, was not
// printed).
func printOutcome(e cmdEnv, r host.InteractionResult) error {
	perr := printJSON(e.stdout, r)
	if perr != nil && !errors.Is(perr, errOutAbandoned) {
		return perr
	}
	code, err := host.ExitCode(r.Interaction.State)
	if err != nil || code == 0 {
		// An answer given up at a stop (nobody read it) is lost: exit 1.
		return errors.Join(err, perr)
	}
	return exitStatus(code) // the outcome is the exit status, printed or not
}

func check(ctx context.Context, e cmdEnv) error {
	v := newVerb("check", "THREAD INTERACTION [--wait] [--data DIR]", e.stderr, false)
	wait := v.fs.Bool("wait", false, "wait until it is answered, expired or canceled, and say which in the exit status: 0 approved or answered, 10 denied, 11 expired, 12 canceled")
	h, done, err := v.open(ctx, e, 2, "THREAD and INTERACTION")
	if _, file := v.sf.folder(); *wait && !file && chatrelay.CodeOf(err) == chatrelay.StoreUnavailable {
		h, done, err = v.connectAgain(ctx, e, err) // a Redis restarting; a data folder that cannot be opened stays so
	}
	if err != nil {
		return err
	}
	defer done()
	if *wait {
		err := waitAndExit(ctx, h, e, v.fs.Arg(0), v.fs.Arg(1))
		if interruptedWait(ctx, err) { // check never cancels the question
			return leftPending(ctx, h, e, v.fs.Arg(0), v.fs.Arg(1))
		}
		return err
	}
	return e.printResult(h.CheckInteraction(ctx, host.InteractionInput{Thread: v.fs.Arg(0), InteractionID: v.fs.Arg(1)}))
}

func cancel(ctx context.Context, e cmdEnv) error {
	v := newVerb("cancel", "THREAD INTERACTION [--data DIR]", e.stderr, false)
	h, done, err := v.open(ctx, e, 2, "THREAD and INTERACTION")
	if err != nil {
		return err
	}
	defer done()
	return e.printResult(h.CancelInteraction(ctx, host.InteractionInput{Thread: v.fs.Arg(0), InteractionID: v.fs.Arg(1)}))
}

func react(ctx context.Context, e cmdEnv) error {
	v := newVerb("react", "THREAD MESSAGE EMOJI [--remove] [--data DIR]", e.stderr, false)
	remove := v.fs.Bool("remove", false, "remove hermes's reaction instead of adding it")
	h, done, err := v.open(ctx, e, 3, "THREAD, MESSAGE and EMOJI")
	if err != nil {
		return err
	}
	defer done()
	return e.printResult(h.React(ctx, host.ReactInput{Thread: v.fs.Arg(0), MessageID: v.fs.Arg(1), Emoji: v.fs.Arg(2), Remove: *remove}))
}

func card(ctx context.Context, e cmdEnv) error {
	v := newVerb("card", `THREAD FILE [--client-id ID] [--data DIR]   (FILE "-" reads standard input)`, e.stderr, true)
	h, done, err := v.open(ctx, e, 2, "THREAD and FILE")
	if err != nil {
		return err
	}
	defer done()
	var data []byte
	if name := v.fs.Arg(1); name == "-" {
		data, err = readInput(ctx, e.stdin, chatrelay.MaxCardInput+1)
	} else {
		data, err = readFile(name, chatrelay.MaxCardInput+1)
	}
	if err != nil {
		return err
	}
	c, err := chatrelay.ParseCard(data)
	if err != nil {
		return err
	}
	return e.printResult(h.SendCard(ctx, host.SendCardInput{Thread: v.fs.Arg(0), Card: c, ClientID: v.clientID}))
}

// readInput reads standard input to its end, at most limit bytes, or
// until ctx is done: main takes SIGINT and SIGTERM into ctx, so that an
// interrupt ends a read that waits on a terminal or a stuck pipe (the
// read itself is left behind, to end with the process).
func readInput(ctx context.Context, r io.Reader, limit int64) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	c := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, limit))
		c <- read{b, err}
	}()
	select {
	case got := <-c:
		return got.b, got.err
	case <-ctx.Done():
		return nil, errors.New("interrupted while reading standard input: nothing was sent")
	}
}

// readFile reads at most limit bytes of a file the command line names
// (card's FILE): one that cannot be opened, or a folder, is a bad command
// line (exit 2) naming it, as reply --attach refuses one.
func readFile(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, usageError(fmt.Sprintf("FILE %s: %v", name, errors.Unwrap(err)))
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, usageError(fmt.Sprintf("FILE %s: is a folder: give a file", name))
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// openThread is chatrelay open: hermes starts a conversation. It prints
// {"thread", "link"}: the claim link holds the thread's token, shown this
// once and kept nowhere. With --client-id, running it again prints the
// same thread and link (and "replayed": true) and makes nothing new.
func openThread(ctx context.Context, e cmdEnv) error {
	v := newVerb("open", "[--title T] [--text FIRST] [--client-id KEY] [--public-url URL] [--data DIR]", e.stderr, true).withPublicURL().startsStore()
	title := v.fs.String("title", "", fmt.Sprintf("the thread's `title` (at most %d code points), shown in the page's header and in list", chatrelay.LimitThreadTitle.Max))
	text := v.fs.String("text", "", "hermes's first `message` (default: the title; one of the two is needed)")
	h, done, err := v.open(ctx, e, 0, "no operands (--title, --text)")
	if err != nil {
		return err
	}
	defer done()
	r, err := h.OpenThread(ctx, host.OpenThreadInput{Title: *title, Text: *text, ClientID: v.clientID})
	if err != nil {
		return err
	}
	if h.PublicURL == "" {
		fmt.Fprintln(e.stderr, "chatrelay open: no public URL: put the server's address before the link, or give --public-url")
	}
	return printJSON(e.stdout, r)
}

// attachFlag registers the repeatable --attach FILE and --attach-as
// NAME=FILE: files that do what (the usage's words), then more words after
// their limits. Both fill one list, in the order given.
func (v *verbFlags) attachFlag(what, after string) *attachList {
	var attach attachList
	v.fs.Var(attachPaths{&attach}, "attach", fmt.Sprintf("a `file` %s, named by its base name (repeatable, at most %d with --attach-as, each at most %d bytes)%s", what, chatrelay.LimitAttachments.Max, chatrelay.LimitAttachmentBytes.Max, after))
	v.fs.Var(attachNamed{&attach}, "attach-as", "as --attach, the file named NAME: `NAME=FILE`, for a pipe (--attach-as change.diff=<(git diff)) or another name")
	return &attach
}

// attachList is the files of --attach and --attach-as, in order.
type attachList []attachArg

// attachArg is a file to attach: its path, and the name it is given (""
// for its base name).
type attachArg struct{ path, name string }

// flag is the option as the user gave it, for an error about it.
func (a attachArg) flag() string {
	if a.name != "" {
		return "--attach-as " + a.name + "=" + a.path
	}
	return "--attach " + a.path
}

// attachPaths is --attach FILE.
type attachPaths struct{ l *attachList }

func (a attachPaths) String() string {
	if a.l == nil {
		return ""
	}
	var paths []string
	for _, f := range *a.l {
		paths = append(paths, f.path)
	}
	return strings.Join(paths, ",")
}

func (a attachPaths) Set(v string) error { *a.l = append(*a.l, attachArg{path: v}); return nil }
func (attachPaths) repeatable()          {}

// attachNamed is --attach-as NAME=FILE (NAME holds no "=", FILE may).
type attachNamed struct{ l *attachList }

func (a attachNamed) String() string { return "" }

func (a attachNamed) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return errors.New("want NAME=FILE, such as change.diff=<(git diff)")
	}
	*a.l = append(*a.l, attachArg{path: path, name: name})
	return nil
}
func (attachNamed) repeatable() {}

// openAttached is open, then the files of --attach opened (openAttachments).
// The caller calls done, which closes the files and the store.
func (v *verbFlags) openAttached(ctx context.Context, e cmdEnv, n int, what string, attach *attachList) (*host.Verbs, []host.AttachmentInput, func(), error) {
	h, closeStore, err := v.open(ctx, e, n, what)
	if err != nil {
		return nil, nil, nil, err
	}
	files, closeFiles, err := openAttachments(*attach)
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	// An interrupt closes the files: a read that waits on a pipe
	// (--attach-as report.txt=<(make-report)) then fails, and nothing is sent.
	stop := context.AfterFunc(ctx, closeFiles)
	return h, files, func() { stop(); closeFiles(); closeStore() }, nil
}

// interrupted is err, or, if ctx is done (an interrupt or SIGTERM), the
// words that say so. Most likely nothing was stored, but a write cut off
// while Redis ran it may have been, as any call whose answer is lost: the
// words say how to be sure.
func interrupted(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return errors.New("interrupted before the store answered: most likely nothing was sent (run it again with the same --client-id to be sure it is stored once)")
	}
	return err
}

// openAttachments opens the files of --attach and --attach-as, to be
// streamed into the store (never read whole): each named by its name, or
// else its base name, typed by that name's extension. It refuses more
// than LimitAttachments before opening any, and a file with no name of
// its own (a pipe, <(git diff), is /dev/fd/63: "63") that --attach-as
// does not name.
func openAttachments(list attachList) ([]host.AttachmentInput, func(), error) {
	if err := chatrelay.LimitAttachments.CheckItems(chatrelay.TooManyAttachments, "--attach", len(list)); err != nil {
		return nil, func() {}, err
	}
	for _, a := range list {
		if a.name == "" && nameless(a.path) {
			return nil, func() {}, usageError(fmt.Sprintf("--attach %s: a pipe (such as <(git diff)) has no file name, it would be named %q: name it with --attach-as NAME=%s", a.path, filepath.Base(a.path), a.path))
		}
	}
	var files []host.AttachmentInput
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	for _, a := range list {
		p := a.path
		f, err := os.Open(p)
		if err != nil {
			closeAll()
			return nil, func() {}, usageError(fmt.Sprintf("%s: %v", a.flag(), errors.Unwrap(err)))
		}
		opened = append(opened, f)
		// A folder opens, and fails only when read, mid-upload: refuse it
		// here, as a missing file is (a pipe, <(git diff), streams).
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			closeAll()
			return nil, func() {}, usageError(fmt.Sprintf("%s: is a folder: give a file", a.flag()))
		}
		name := a.name
		if name == "" {
			name = filepath.Base(p)
		}
		typ := mime.TypeByExtension(filepath.Ext(name))
		files = append(files, host.AttachmentInput{Name: name, Type: typ, Body: f})
	}
	return files, closeAll, nil
}

// fdPath is a path that names a file descriptor, not a file:
// /dev/fd/63 (bash's <(cmd)), /proc/self/fd/63, /proc/1234/fd/63,
// /dev/stdin.
var fdPath = regexp.MustCompile(`^(/dev/fd|/proc/(self|thread-self|[0-9]+)/fd)/[0-9]+$|^/dev/std(in|out|err)$`)

// nameless reports whether path is a file descriptor's, whose base name
// ("63") is no name for what it holds.
func nameless(path string) bool { return fdPath.MatchString(filepath.Clean(path)) }
