package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// The share and device commands both make a link that is shown once: they
// open the thread's participants the same way, pick the link's base the
// same way and end its printing the same way.

// openParticipants checks thread and opens the participants of the store
// the flags name. what names what a store without participants does not
// keep ("share links", "devices"). The caller closes the backend.
func openParticipants(ctx context.Context, sf *storeFlags, thread, what string) (*store.Backend, *host.Participants, error) {
	if !chatrelay.ValidThread(thread) {
		return nil, nil, chatrelay.Errorf(chatrelay.InvalidThread, "a thread id is 16 lowercase hex characters")
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return nil, nil, err
	}
	parts, ok := st.Store.(store.Participants)
	if !ok {
		st.Close()
		return nil, nil, fmt.Errorf("the store %s keeps no %s", st.Where, what)
	}
	return st, &host.Participants{Store: parts}, nil
}

// linkBase is the base of a link shown once: publicURL (the --public-url
// flag) without its trailing slash, else recorded (what the folder's server
// records); "" when neither is known.
func linkBase(publicURL, recorded string) (string, error) {
	base := strings.TrimSuffix(publicURL, "/")
	if base == "" {
		base = recorded
	}
	if base != "" {
		if _, err := transport.CheckPublicURL(base); err != nil {
			return "", usageError("--public-url " + err.Error())
		}
	}
	return base, nil
}

// printLinkEnd ends the printing of a link shown once: a hint when the link
// has no base, else its QR code when w is a terminal.
func printLinkEnd(w io.Writer, base, link string) {
	if base == "" {
		fmt.Fprintln(w, "\n(put the server's address before the link, or give --public-url)")
	}
	if isTerminal(w) && base != "" {
		if q, err := qrcode.New(link, qrcode.Medium); err == nil {
			fmt.Fprintf(w, "\n%s", q.ToSmallString(false))
		}
	}
}

// unseenLink is nil when the link shown once did get out to w; else an
// error naming the link made but never seen (its token is lost), with the
// command that revokes it.
func unseenLink(w io.Writer, cmd, thread, id string) error {
	o, ok := w.(*outWriter)
	if !ok || o.failed() == nil {
		return nil
	}
	return fmt.Errorf("the link of %s was made but not shown (%w): revoke it with chatrelay %s revoke %s %s", id, o.failed(), cmd, thread, id)
}

// printThreadList prints a list of the thread's (its share links, its
// devices, its audit trail) read with err: with --json one object,
// {"thread": …, key: list}; else text writes it.
func printThreadList[T any](e cmdEnv, thread, key string, asJSON bool, list []T, err error, text func(w io.Writer, list []T) error) error {
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, map[string]any{"thread": thread, key: list})
	}
	return text(e.stdout, list)
}
