package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// OpenThreadInput is open_thread's input: at least one of the two.
type OpenThreadInput struct {
	Title string `json:"title,omitempty"` // the thread's title (≤ chatrelay.LimitThreadTitle)
	Text  string `json:"text,omitempty"`  // hermes's first message; "": the title
}

// OpenThreadResult is open_thread's result: the new thread and its claim
// link, which holds the thread's token (given this once: kept nowhere).
type OpenThreadResult struct {
	Thread string `json:"thread"`
	Link   string `json:"link"`
}

// OpenThread creates a thread with a fresh token (32 bytes from the
// system's CSPRNG), writes hermes's first message (the text, else the
// title) with the thread's title, and answers the claim link
// <PublicURL>/#t=<token>. The token is not stored (the store is given the
// thread id only) nor logged: the link is its one copy. A title past its
// limit is TextTooLong; neither a title nor a text is InvalidText.
func (v *Verbs) OpenThread(ctx context.Context, in OpenThreadInput) (OpenThreadResult, error) {
	if v.Reaches != nil {
		return OpenThreadResult{}, chatrelay.Errorf(chatrelay.NotPermitted, "this agent key reaches only the threads it names: a key for every thread (agent add --threads all) may open one")
	}
	if err := chatrelay.CheckNewTitle(in.Title); err != nil {
		return OpenThreadResult{}, err
	}
	text := in.Text
	if text == "" {
		text = in.Title
	}
	if text == "" {
		return OpenThreadResult{}, chatrelay.Errorf(chatrelay.InvalidText, "open_thread needs a title or a text (hermes's first message)")
	}
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	token := hex.EncodeToString(b[:])
	thread := chatrelay.ThreadOf(token)
	if _, err := v.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, AuthorName: v.AuthorName, Text: text, Title: in.Title}); err != nil {
		return OpenThreadResult{}, err
	}
	base := v.PublicURL
	if base == "" {
		base = LinkBase(ctx)
	}
	return OpenThreadResult{Thread: thread, Link: ClaimLink(base, token)}, nil
}

type linkBaseKey struct{}

// WithLinkBase is ctx carrying the base of the links a verb answers when
// Verbs.PublicURL is empty: over MCP HTTP, the address the agent reached
// the server at (as a share link's base is the request's), so that
// open_thread's claim link is one a person can open, not a path alone.
func WithLinkBase(ctx context.Context, base string) context.Context {
	return context.WithValue(ctx, linkBaseKey{}, base)
}

// LinkBase is the base WithLinkBase put in ctx, or "".
func LinkBase(ctx context.Context) string {
	b, _ := ctx.Value(linkBaseKey{}).(string)
	return b
}

// ClaimLink is the link that hands a thread to whoever opens it first:
// base (the server's public address, with its prefix) + "/#t=" + token.
// Without a base it is the path alone, for the server's address to come
// before it.
func ClaimLink(base, token string) string { return link(base, "/#t=", token) }
