package main

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

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
	asJSON := fs.Bool("json", false, "one JSON array instead of a table")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("list takes no arguments")
	}
	opt, err := sf.options(false)
	if err != nil {
		return err
	}
	st, err := sf.open(ctx, opt)
	if err != nil {
		return err
	}
	defer st.Close()
	threads, err := st.Threads(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
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
	fmt.Fprintln(tw, "THREAD\tMESSAGES\tLAST AUTHOR\tLAST (UTC)\tAWAITING")
	for _, t := range threads {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%v\n", t.Thread, t.Messages, t.LastAuthor, utc(t.LastEpoch), t.Awaiting)
	}
	return tw.Flush()
}

func show(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("show", "show [--data DIR] [--json] [--since N] THREAD", stderr)
	var sf storeFlags
	sf.register(fs, false)
	asJSON := fs.Bool("json", false, "the page as JSON, shaped like the poll answer")
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
	opt, err := sf.options(false)
	if err != nil {
		return err
	}
	st, err := sf.open(ctx, opt)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := st.Since(ctx, fs.Arg(0), *since, 0)
	if err != nil {
		return err
	}
	if *asJSON {
		msgs := make([]chatrelay.Message, len(p.Messages))
		for i, e := range p.Messages {
			msgs[i] = e.Message
		}
		return json.NewEncoder(stdout).Encode(map[string]any{
			"thread": p.Thread, "messages": msgs, "awaiting": p.Awaiting, "cursor": p.Cursor,
		})
	}
	for _, e := range p.Messages {
		text := strings.ReplaceAll(e.Text, "\n", "\n    ")
		fmt.Fprintf(stdout, "%s  %-8s %d\n    %s\n", utc(e.Epoch), e.Author, e.Epoch, text)
	}
	fmt.Fprintf(stdout, "-- thread %s: %d messages shown, cursor %d, awaiting %v\n", p.Thread, len(p.Messages), p.Cursor, p.Awaiting)
	return nil
}

func reply(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("reply", "reply [--data DIR] THREAD TEXT   (TEXT \"-\" reads standard input)", stderr)
	var sf storeFlags
	sf.register(fs, true)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageError("reply takes THREAD and TEXT")
	}
	opt, err := sf.options(false)
	if err != nil {
		return err
	}
	text := fs.Arg(1)
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, 1<<20))
		if err != nil {
			return err
		}
		text = strings.TrimSuffix(string(b), "\n")
	}
	st, err := sf.open(ctx, opt)
	if err != nil {
		return err
	}
	defer st.Close()
	e, err := st.Append(ctx, fs.Arg(0), store.NewMessage{Author: chatrelay.Hermes, Text: text, MustExist: true})
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(map[string]any{"id": e.ID, "epoch": e.Epoch, "ts": e.TS, "thread": fs.Arg(0)})
}
