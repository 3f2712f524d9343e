package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// watchLine is one line of watch and subscribe output.
type watchLine struct {
	Thread  string          `json:"thread"`
	From    string          `json:"from,omitempty"` // a participant's message: "Alex (p_1a2b3c4d)"
	Message json.RawMessage `json:"message,omitempty"`
	Update  json.RawMessage `json:"update,omitempty"` // an interaction changed: the v2 message now
	Reset   bool            `json:"reset,omitempty"`  // messages were dropped by retention: redraw
}

// watch prints every new message of every thread as one JSON line, read
// from the store's change feed: no server needed.
func watch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("watch", "watch [--data DIR] [--since EPOCH] [--all] [--v2]", stderr)
	var sf storeFlags
	sf.register(fs, false)
	since := fs.Int64("since", 0, "first print stored messages with epoch > `EPOCH` (0: only new ones)")
	all := fs.Bool("all", false, "include hermes's own messages")
	v2 := fs.Bool("v2", false, "print messages as v2 objects (interactions, cards, reactions)")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 || *since < 0 {
		return usageError("watch takes no arguments and a non-negative --since")
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()

	enc := json.NewEncoder(stdout)
	// Interaction changes are printed as update lines (whoever answered),
	// so an agent that watches learns of an answer without polling.
	return store.Watch(ctx, st, *since, true, func(thread string, e store.Entry, update bool) error {
		if update {
			if e.Interaction == nil {
				return nil
			}
			return enc.Encode(watchLine{Thread: thread, Update: e.JSON2})
		}
		if e.Author == chatrelay.Hermes && !*all {
			if e.Interaction != nil && e.Rev != e.Epoch {
				// hermes's question is left out, but not what became
				// of it: first seen already changed (answered while a
				// watch --since was away, or between two reads of the
				// feed), its update line alone.
				return enc.Encode(watchLine{Thread: thread, Update: e.JSON2})
			}
			return nil
		}
		js := e.JSON
		if *v2 {
			js = e.JSON2
		}
		line := watchLine{Thread: thread, Message: js}
		if strings.HasPrefix(string(e.Author), "p:") {
			line.From = who(e.Message)
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
		if e.Interaction != nil && e.Rev != e.Epoch {
			// First seen already changed (answered between two reads of
			// the feed): its update line too, so no answer goes unsaid.
			return enc.Encode(watchLine{Thread: thread, Update: e.JSON2})
		}
		return nil
	}, func(thread string) error {
		// Retention dropped messages this watch had not printed (it was
		// away, or fell behind): say so before what it kept, as subscribe
		// does.
		return enc.Encode(watchLine{Thread: thread, Reset: true})
	}, func(thread string, err error) {
		fmt.Fprintf(stderr, "chatrelay watch: thread %s: %v\n", thread, err)
	})
}

// subscribe prints one thread's live messages from a remote server, over
// its WebSocket, resuming from the last epoch after every drop.
func subscribe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("subscribe", "subscribe --server URL [--token T | --ticket K] [--since N]", stderr)
	server := fs.String("server", "", "the chatrelay `URL`, with its prefix: http://127.0.0.1:8080")
	token := fs.String("token", "", "the thread's token (64 hex); prefer CHATRELAY_TOKEN to keep it out of ps")
	ticket := fs.String("ticket", "", "a read-only ticket instead of a token (it expires: a stream open then goes on, but a reconnect after that is refused and subscribe ends, exit 1)")
	since := fs.Int64("since", 0, fmt.Sprintf("resume after `N` (epoch ms); 0: the newest %d, then live", chatrelay.PollPage))
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	switch {
	case *server == "" || (*token == "") == (*ticket == "") || fs.NArg() > 0:
		return usageError("subscribe needs --server and exactly one of --token or --ticket, and no argument")
	case *since < 0:
		return usageError("--since: an epoch in ms, 0 or more")
	}
	if !strings.HasPrefix(*server, "http://") && !strings.HasPrefix(*server, "https://") {
		return usageError(fmt.Sprintf("--server %q: want http:// or https://", *server))
	}
	// The stream's path goes after --server: a query or a fragment (a
	// page's address pasted whole, a claim link's #t=…) would take it in.
	if u, err := url.Parse(*server); err != nil || u.Host == "" || u.RawQuery != "" || u.ForceQuery || strings.Contains(*server, "#") {
		base, _, frag := strings.Cut(*server, "#")
		shown := shownURL(base) // no password, no query: either may be a secret
		if frag {
			shown = strings.TrimSuffix(shown, `"`) + `#…"` // a claim link's token
		}
		return usageError(fmt.Sprintf("--server %s: want the server's address and prefix only, such as http://127.0.0.1:8080 (a host, no query, no fragment)", shown))
	}
	if *token != "" && !chatrelay.ValidToken(*token) { // else every resume would be refused, or never sent
		return usageError("--token: a thread's token is 64 lowercase hex (a share link's chp_ token has no stream here)")
	}
	enc := json.NewEncoder(stdout)
	return transport.Subscribe(ctx, transport.SubscribeOptions{
		Server: *server, Token: *token, Ticket: *ticket, Since: *since,
		Dropped: func(err error, cursor int64) {
			fmt.Fprintf(stderr, "chatrelay subscribe: stream ended (%v); resuming after %d\n", err, cursor)
		},
	}, func(it transport.StreamItem) error {
		return enc.Encode(watchLine{Thread: it.Thread, Message: it.Message, Reset: it.Reset})
	})
}
