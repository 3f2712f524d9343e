// Package host is the host agent's verbs (contract Part 4, "The host's
// verbs") over a store: one implementation behind the host CLI and the MCP
// server, so that both bindings take the same arguments, check the same
// limits and answer the same results. Every write is hermes's.
//
// Inputs and results are plain structs with the contract's JSON names;
// the JSON Schema bundle describes them, and the MCP tools take their
// input schemas from it.
package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Verbs runs the host's verbs on a store. It is safe for concurrent use.
type Verbs struct {
	Store store.Store
	Now   func() time.Time // defaults to time.Now
	// Feed is Store's change feed, which the waits follow; nil: the verbs
	// make one on first use, shared by all their waits.
	Feed *store.Feed
	// PublicURL is the base of open_thread's claim links (the server's
	// public address, with its prefix); "": the link is its path alone.
	PublicURL string
	// AuthorName, if set, is the author_name of every message the verbs
	// write (hermes's still): the agent key's name over MCP HTTP (scope.go).
	AuthorName string
	// Reaches, if set, is the scope of the verbs: a thread it refuses is
	// NotFound to every verb, list_threads and the waits leave it out, and
	// open_thread is NotPermitted (scope.go). nil: every thread.
	Reaches func(thread string) bool
	// Caller names who calls the verbs, for open_thread's client_id
	// (OpenToken): "" is the host (the CLI, MCP over stdio); ForAgent
	// sets the agent key's. Two callers with the same client_id open two
	// threads.
	Caller string
	// MaxAttachmentBytes is the most bytes of one file the verbs attach
	// (serve --max-attachment-bytes over MCP HTTP); 0 is
	// chatrelay.LimitAttachmentBytes.
	MaxAttachmentBytes int64
	// Recheck is how often wait_interaction looks in the store again
	// while nothing it follows changes, so that an interaction gone with
	// no change to tell it (Redis flushed by hand) ends the wait with
	// not_found; 0 is DefaultRecheck.
	Recheck  time.Duration
	feedOnce sync.Once
}

// DefaultRecheck is Verbs.Recheck's default.
const DefaultRecheck = 30 * time.Second

func (v *Verbs) feed() *store.Feed {
	v.feedOnce.Do(func() {
		if v.Feed == nil {
			v.Feed = store.NewFeed(v.Store)
		}
	})
	return v.Feed
}

func (v *Verbs) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// Names lists the verbs in the contract's order.
func Names() []string { return chatrelay.Verbs() }

// ListThreadsInput is list_threads's input: nothing.
type ListThreadsInput struct{}

// ListThreadsResult is list_threads's result: the threads, newest
// activity first, and those left out because they cannot be read.
type ListThreadsResult struct {
	Threads    []store.ThreadInfo `json:"threads"`
	Unreadable []UnreadableThread `json:"unreadable,omitempty"`
}

// UnreadableThread is a thread list_threads left out: its stored data
// cannot be read (Code: thread_unreadable, or store_unavailable for a file
// the store cannot open or read), as a read of it would answer.
type UnreadableThread struct {
	Thread string         `json:"thread"`
	Code   chatrelay.Code `json:"code"`
}

// ListThreads lists the threads, newest activity first: a thread that
// cannot be read hides none of the others, and is named in Unreadable.
func (v *Verbs) ListThreads(ctx context.Context, _ ListThreadsInput) (ListThreadsResult, error) {
	infos, bad, err := store.ThreadsOf(ctx, v.Store)
	infos = v.inScope(infos)
	if infos == nil {
		infos = []store.ThreadInfo{}
	}
	r := ListThreadsResult{Threads: infos}
	for _, b := range bad {
		if v.Reaches == nil || v.Reaches(b.Thread) {
			r.Unreadable = append(r.Unreadable, UnreadableThread{Thread: b.Thread, Code: chatrelay.CodeOf(b.Err)})
		}
	}
	return r, err
}

// ReadThreadInput is read_thread's input.
type ReadThreadInput struct {
	Thread string `json:"thread"`
	Since  int64  `json:"since,omitempty"` // a v2 cursor; 0: the newest Limit messages
	Limit  int    `json:"limit,omitempty"` // with no cursor; 0: 50
}

// ReadThreadResult is read_thread's result: the v2 page.
type ReadThreadResult struct {
	Thread   string            `json:"thread"`
	Messages []json.RawMessage `json:"messages"` // v2 message objects
	Cursor   int64             `json:"cursor"`   // pass it back as since
	Awaiting bool              `json:"awaiting"` // the newest message is not hermes's
	Reset    bool              `json:"reset"`    // retention dropped changes after since
}

// ReadThread reads a thread's messages (v2) after a cursor.
func (v *Verbs) ReadThread(ctx context.Context, in ReadThreadInput) (ReadThreadResult, error) {
	if err := v.checkThread(in.Thread); err != nil {
		return ReadThreadResult{}, err
	}
	if in.Since < 0 || in.Limit < 0 {
		return ReadThreadResult{}, chatrelay.Errorf(chatrelay.InvalidSince, "since and limit are not negative")
	}
	limit := in.Limit
	if limit == 0 {
		limit = chatrelay.PollPage
	}
	if in.Since > 0 {
		limit = 0
	}
	p, err := v.Store.Changes(ctx, in.Thread, in.Since, limit)
	if err != nil {
		return ReadThreadResult{}, err
	}
	out := ReadThreadResult{Thread: in.Thread, Messages: []json.RawMessage{}, Cursor: p.Cursor, Awaiting: p.Awaiting, Reset: p.Reset}
	for _, e := range p.Messages {
		out.Messages = append(out.Messages, e.JSON2)
	}
	return out, nil
}

// SendInput is send's input: a hermes message.
type SendInput struct {
	Thread      string            `json:"thread"`
	Text        string            `json:"text"`
	ClientID    string            `json:"client_id,omitempty"`
	Attachments []AttachmentInput `json:"attachments,omitempty"` // attach.go
}

// MessageResult is the result of the verbs that write a message: the v2
// message, and whether it was already stored under its client_id.
type MessageResult struct {
	Message  json.RawMessage `json:"message"`
	Replayed bool            `json:"replayed,omitempty"`
}

// Send posts a hermes message to a thread that exists.
func (v *Verbs) Send(ctx context.Context, in SendInput) (MessageResult, error) {
	if err := v.checkThread(in.Thread); err != nil {
		return MessageResult{}, err
	}
	if strings.TrimSpace(in.Text) != "" || len(in.Attachments) == 0 {
		if err := chatrelay.CheckText(in.Text); err != nil {
			return MessageResult{}, err // before any file is stored
		}
	}
	ids, err := v.attach(ctx, in.Thread, in.ClientID, in.Attachments)
	if err != nil {
		return MessageResult{}, err
	}
	e, err := v.Store.Append(ctx, in.Thread, store.NewMessage{Author: chatrelay.Hermes, AuthorName: v.AuthorName, Text: in.Text, ClientID: in.ClientID, MustExist: true, Attachments: ids})
	return messageResult(e, err)
}

func messageResult(e store.Entry, err error) (MessageResult, error) {
	if err != nil {
		return MessageResult{}, err
	}
	return MessageResult{Message: e.JSON2, Replayed: e.Replayed}, nil
}

// RequestInputInput is request_input's input.
type RequestInputInput struct {
	Thread    string             `json:"thread"`
	Prompt    string             `json:"prompt"`
	Title     string             `json:"title,omitempty"`
	Choices   []chatrelay.Choice `json:"choices,omitempty"`
	AllowText bool               `json:"allow_text,omitempty"`
	Timeout   int                `json:"timeout,omitempty"` // seconds; 0: 600
	ClientID  string             `json:"client_id,omitempty"`
	// Attachments are files the question shows (attach.go).
	Attachments []AttachmentInput `json:"attachments,omitempty"`
}

// RequestApprovalInput is request_approval's input.
type RequestApprovalInput struct {
	Thread   string             `json:"thread"`
	Summary  string             `json:"summary"` // the interaction's prompt
	Title    string             `json:"title,omitempty"`
	Details  []chatrelay.Detail `json:"details,omitempty"`
	Timeout  int                `json:"timeout,omitempty"` // seconds; 0: 3600
	ClientID string             `json:"client_id,omitempty"`
	// Attachments are files the approval is about: the diff, the
	// screenshot (attach.go).
	Attachments []AttachmentInput `json:"attachments,omitempty"`
}

// InteractionResult is the result of the verbs about one interaction:
// the interaction as the store holds it (a pending one found past its
// deadline is first expired in the store, unless an answer got there
// first: see settle), and the message that carries it.
type InteractionResult struct {
	Thread      string                 `json:"thread"`
	MessageID   string                 `json:"message_id"`
	Interaction *chatrelay.Interaction `json:"interaction"`
	Replayed    bool                   `json:"replayed,omitempty"`
	TimedOut    bool                   `json:"timed_out,omitempty"` // wait_interaction: still pending at its timeout
}

// RequestInput asks the person for input.
func (v *Verbs) RequestInput(ctx context.Context, in RequestInputInput) (InteractionResult, error) {
	return v.ask(ctx, in.Thread, in.ClientID, chatrelay.Ask{Type: chatrelay.Input, Title: in.Title, Prompt: in.Prompt,
		Choices: in.Choices, AllowText: in.AllowText, Timeout: seconds(in.Timeout)}, in.Attachments)
}

// RequestApproval asks the person to approve or deny.
func (v *Verbs) RequestApproval(ctx context.Context, in RequestApprovalInput) (InteractionResult, error) {
	return v.ask(ctx, in.Thread, in.ClientID, chatrelay.Ask{Type: chatrelay.Approval, Title: in.Title, Prompt: in.Summary,
		Details: in.Details, Timeout: seconds(in.Timeout)}, in.Attachments)
}

func seconds(n int) time.Duration {
	if n < 0 {
		return -1 // refused by Ask.Check
	}
	return time.Duration(n) * time.Second
}

func (v *Verbs) ask(ctx context.Context, thread, clientID string, a chatrelay.Ask, files []AttachmentInput) (InteractionResult, error) {
	if err := v.checkThread(thread); err != nil {
		return InteractionResult{}, err
	}
	if len(files) > 0 {
		if err := a.Check(); err != nil {
			return InteractionResult{}, err // before any file is stored
		}
	}
	ids, err := v.attach(ctx, thread, clientID, files)
	if err != nil {
		return InteractionResult{}, err
	}
	e, err := v.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, AuthorName: v.AuthorName, Ask: &a, ClientID: clientID, MustExist: true, Attachments: ids})
	if err != nil {
		return InteractionResult{}, err
	}
	r := v.result(thread, e)
	r.Replayed = e.Replayed
	return r, nil
}

// result is the InteractionResult of a message carrying an interaction,
// in the state the store holds.
func (v *Verbs) result(thread string, e store.Entry) InteractionResult {
	ix := *e.Interaction
	return InteractionResult{Thread: thread, MessageID: e.ID, Interaction: &ix}
}

// settle returns e, the message carrying an interaction as read, in its
// final state if the deadline decided it. A pending interaction past its
// deadline (on v's clock) is never reported expired on the reader's word:
// an answer the store took before the deadline may still be being
// written. The store expires it under the thread's lock (a compare-and-set
// on Redis), where an answer that got there first wins, and what the store
// answers is the outcome, the same for every reader. If the store's clock
// has not reached the deadline yet, the interaction stays pending.
func (v *Verbs) settle(ctx context.Context, thread string, e store.Entry) (store.Entry, error) {
	ix := e.Interaction
	if ix.State != chatrelay.Pending || v.now().UnixMilli() < ix.Deadline {
		return e, nil
	}
	return v.Store.Change(ctx, thread, store.Change{Op: store.Expire, InteractionID: ix.ID})
}

// InteractionInput names an interaction: check_interaction's and
// cancel_interaction's input.
type InteractionInput struct {
	Thread        string `json:"thread"`
	InteractionID string `json:"interaction_id"`
}

// CheckInteraction returns an interaction's state and answer.
func (v *Verbs) CheckInteraction(ctx context.Context, in InteractionInput) (InteractionResult, error) {
	e, err := v.find(ctx, in.Thread, in.InteractionID)
	if err == nil {
		e, err = v.settle(ctx, in.Thread, e)
	}
	if err != nil {
		return InteractionResult{}, err
	}
	return v.result(in.Thread, e), nil
}

// find returns the message carrying an interaction.
func (v *Verbs) find(ctx context.Context, thread, id string) (store.Entry, error) {
	if err := v.checkThread(thread); err != nil {
		return store.Entry{}, err
	}
	if !chatrelay.InteractionIDPattern.MatchString(id) {
		return store.Entry{}, chatrelay.Errorf(chatrelay.NotFound, "no interaction %q: an interaction id is ix_ and 12 hex", clipID(id))
	}
	p, err := v.Store.Changes(ctx, thread, 0, 0)
	if err != nil {
		return store.Entry{}, err
	}
	i := slices.IndexFunc(p.Messages, func(e store.Entry) bool { return e.Interaction != nil && e.Interaction.ID == id })
	if i < 0 {
		return store.Entry{}, chatrelay.Errorf(chatrelay.NotFound, "no interaction %s in thread %s", id, thread)
	}
	return p.Messages[i], nil
}

// CancelInteraction withdraws a pending interaction.
func (v *Verbs) CancelInteraction(ctx context.Context, in InteractionInput) (InteractionResult, error) {
	if _, err := v.find(ctx, in.Thread, in.InteractionID); err != nil {
		return InteractionResult{}, err
	}
	e, err := v.Store.Change(ctx, in.Thread, store.Change{Op: store.Cancel, InteractionID: in.InteractionID, By: chatrelay.Hermes})
	if err != nil {
		return InteractionResult{}, err
	}
	return v.result(in.Thread, e), nil
}

// ReactInput is react's input: hermes's reaction.
type ReactInput struct {
	Thread    string `json:"thread"`
	MessageID string `json:"message_id"`
	Emoji     string `json:"emoji"`
	Remove    bool   `json:"remove,omitempty"`
}

// React adds or removes hermes's reaction to a message.
func (v *Verbs) React(ctx context.Context, in ReactInput) (MessageResult, error) {
	if err := v.checkThread(in.Thread); err != nil {
		return MessageResult{}, err
	}
	if err := chatrelay.CheckEmoji(in.Emoji); err != nil {
		return MessageResult{}, err
	}
	if !chatrelay.MessageIDPattern.MatchString(in.MessageID) {
		return MessageResult{}, chatrelay.Errorf(chatrelay.NotFound, "no message %q: a message id is MSG-YYYYMMDD-HHMMSS- and 6 hex", clipID(in.MessageID))
	}
	op := store.React
	if in.Remove {
		op = store.Unreact
	}
	e, err := v.Store.Change(ctx, in.Thread, store.Change{Op: op, MessageID: in.MessageID, Emoji: in.Emoji, By: chatrelay.Hermes})
	return messageResult(e, err)
}

// SendCardInput is send_card's input.
type SendCardInput struct {
	Thread      string            `json:"thread"`
	Card        *chatrelay.Card   `json:"card"`
	ClientID    string            `json:"client_id,omitempty"`
	Attachments []AttachmentInput `json:"attachments,omitempty"` // attach.go
}

// SendCard posts a hermes card.
func (v *Verbs) SendCard(ctx context.Context, in SendCardInput) (MessageResult, error) {
	if err := v.checkThread(in.Thread); err != nil {
		return MessageResult{}, err
	}
	if in.Card == nil {
		return MessageResult{}, chatrelay.Errorf(chatrelay.InvalidCard, "a card is needed")
	}
	if err := in.Card.Check(); err != nil {
		return MessageResult{}, err
	}
	ids, err := v.attach(ctx, in.Thread, in.ClientID, in.Attachments)
	if err != nil {
		return MessageResult{}, err
	}
	e, err := v.Store.Append(ctx, in.Thread, store.NewMessage{Author: chatrelay.Hermes, AuthorName: v.AuthorName, Card: in.Card, ClientID: in.ClientID, MustExist: true, Attachments: ids})
	return messageResult(e, err)
}

func checkThread(thread string) error {
	if !chatrelay.ValidThread(thread) {
		return chatrelay.Errorf(chatrelay.InvalidThread, "a thread id is 16 lowercase hex characters, not %q", clipID(thread))
	}
	return nil
}

func clipID(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// waitLimit bounds a timeout (seconds) of wait_messages and
// wait_interaction: 0 is the most, 300 s.
func waitLimit(timeout int) (time.Duration, error) {
	lo, hi := chatrelay.LimitWaitTimeout.Duration()
	d := time.Duration(timeout) * time.Second
	if d < lo || d > hi {
		return 0, chatrelay.Errorf(chatrelay.InvalidJSON, "timeout is 0 … %d seconds, not %d", chatrelay.LimitWaitTimeout.Max, timeout)
	}
	if d == 0 {
		d = hi
	}
	return d, nil
}

// exitCodes are the exit statuses of `chatrelay ask --wait` and `check
// --wait` for each final state.
var exitCodes = map[chatrelay.State]int{
	chatrelay.Approved: 0, chatrelay.Answered: 0, chatrelay.Denied: 10, chatrelay.Expired: 11, chatrelay.Canceled: 12,
}

// ExitCode is the exit status that reports a final state to a shell:
// 0 approved or answered, 10 denied, 11 expired, 12 canceled.
func ExitCode(s chatrelay.State) (int, error) {
	c, ok := exitCodes[s]
	if !ok {
		return 1, fmt.Errorf("state %q is not final", s)
	}
	return c, nil
}
