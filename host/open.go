package host

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// OpenThreadInput is open_thread's input: at least one of the two.
type OpenThreadInput struct {
	Title string `json:"title,omitempty"` // the thread's title (≤ chatrelay.LimitThreadTitle)
	Text  string `json:"text,omitempty"`  // hermes's first message; "": the title
	// ClientID makes the call idempotent: a repeat of it by the same
	// caller answers the same thread and link and makes nothing new.
	ClientID string `json:"client_id,omitempty"`
}

// OpenThreadResult is open_thread's result: the new thread and its claim
// link, which holds the thread's token (given this once: kept nowhere).
type OpenThreadResult struct {
	Thread string `json:"thread"`
	Link   string `json:"link"`
	// Replayed says that the client_id named a thread already opened:
	// nothing new was made.
	Replayed bool `json:"replayed,omitempty"`
}

// OpenThread creates a thread, writes hermes's first message (the text,
// else the title) with the thread's title, and answers the claim link
// <PublicURL>/#t=<token>. The token is not stored (the store is given the
// thread id only) nor logged: the link is its one copy. A title past its
// limit is TextTooLong; neither a title nor a text is InvalidText.
//
// Without a client_id the token is fresh (32 bytes from the system's
// CSPRNG). With one it is derived (OpenToken): the same caller repeating
// the client_id gets the same token, so the same thread, whose first
// message carries the client_id; the store answers the repeat as it
// answers a repeated post (Replayed: nothing new is made), or refuses it
// with ClientIDConflict if its text or title differs.
func (v *Verbs) OpenThread(ctx context.Context, in OpenThreadInput) (OpenThreadResult, error) {
	if v.Reaches != nil {
		return OpenThreadResult{}, chatrelay.Errorf(chatrelay.NotPermitted, "this agent key reaches only the threads it names: a key for every thread (agent add --threads all) may open one")
	}
	if err := chatrelay.CheckNewTitle(in.Title); err != nil {
		return OpenThreadResult{}, err
	}
	if err := chatrelay.CheckClientID(in.ClientID); err != nil {
		return OpenThreadResult{}, err
	}
	text := in.Text
	if text == "" {
		text = in.Title
	}
	if text == "" {
		return OpenThreadResult{}, chatrelay.Errorf(chatrelay.InvalidText, "open_thread needs a title or a text (hermes's first message)")
	}
	token, err := v.openToken(ctx, in.ClientID)
	if err != nil {
		return OpenThreadResult{}, err
	}
	thread := chatrelay.ThreadOf(token)
	e, err := v.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, AuthorName: v.AuthorName, Text: text, Title: in.Title, ClientID: in.ClientID})
	if err != nil {
		return OpenThreadResult{}, err
	}
	if e.Replayed {
		// The first message is the same; the title, which the message
		// does not hold, must be too.
		p, err := v.Store.Changes(ctx, thread, 0, 1)
		if err != nil {
			return OpenThreadResult{}, err
		}
		if p.Title != in.Title {
			return OpenThreadResult{}, &chatrelay.Error{Code: chatrelay.ClientIDConflict, About: e.JSON2,
				Message: "this client_id opened a thread with another title; use a new client_id for a new thread"}
		}
	}
	base := v.PublicURL
	if base == "" {
		base = LinkBase(ctx)
	}
	return OpenThreadResult{Thread: thread, Link: ClaimLink(base, token), Replayed: e.Replayed}, nil
}

// OpenedWith reports whether the caller opened a thread with clientID
// whose first message the store still holds: a repeat of that
// open_thread stores nothing (it is answered again, or refused
// ClientIDConflict), so a full rate window need not refuse it.
func (v *Verbs) OpenedWith(ctx context.Context, clientID string) bool {
	if clientID == "" || chatrelay.CheckClientID(clientID) != nil {
		return false
	}
	token, err := v.openToken(ctx, clientID)
	if err != nil {
		return false
	}
	_, ok := store.StoredWith(ctx, v.Store, chatrelay.ThreadOf(token), clientID)
	return ok
}

// openToken is the owner token of a thread the caller opens: fresh (32
// bytes from the system's CSPRNG) without a client_id, else derived
// (OpenToken) under the store's secret.
func (v *Verbs) openToken(ctx context.Context, clientID string) (string, error) {
	if clientID == "" {
		var b [32]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		return hex.EncodeToString(b[:]), nil
	}
	ks := store.OpenSecretsOf(v.Store)
	if ks == nil {
		return "", chatrelay.Errorf(chatrelay.NotPermitted, "this store keeps no open_thread secret: open the thread without a client_id")
	}
	secret, err := ks.OpenSecret(ctx)
	if err != nil {
		return "", err
	}
	return OpenToken(secret, v.Caller, clientID), nil
}

// openTokenDomain is the domain string of OpenToken's HMAC: a token
// derived for open_thread is of no other use.
const openTokenDomain = "chatrelay open_thread client_id v1"

// OpenToken is the owner token of a thread that caller opens with
// clientID: HMAC-SHA256, keyed by the store's secret
// (store.OpenSecrets), of the domain string, the caller and the client_id,
// each ended by a NUL (neither holds one), as 64 lowercase hex, the form of
// every token (chatrelay.ValidToken). Without the secret nobody can tell
// the token from the caller and the client_id; with another caller or
// client_id it is another token, so another thread.
func OpenToken(secret []byte, caller, clientID string) string {
	m := hmac.New(sha256.New, secret)
	for _, s := range []string{openTokenDomain, caller, clientID} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
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
