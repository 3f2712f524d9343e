package chatrelay

import (
	"slices"
	"strings"
	"time"
)

// NewMessage is what a writer supplies; the store assigns the rest.
type NewMessage struct {
	Author     Author
	Text       string // ignored for an Ask (the rendering is stored) and a Card (its fallback text)
	AuthorName string // a participant's name
	// ClientID makes the post idempotent: a message of the thread with the
	// same ClientID is answered again (Entry.Replayed) instead of stored,
	// or, if it differs, refused with ClientIDConflict.
	ClientID string
	Ask      *Ask  // hermes asks: the message carries a new pending interaction
	Card     *Card // hermes sends a card
	// Participant is the grant id of a participant's post (Author is then
	// "p:" + id): the store refuses it unless the grant is active, under
	// its cap (CapReached) and has fewer than three messages after
	// hermes's newest (TooManyMessages), and counts it in the grant.
	Participant string
	// MustExist refuses to create the thread (the host CLI's writes).
	MustExist bool
	// Title, when set, becomes the thread's title (open_thread: hermes
	// starts a conversation). Checked by CheckTitle.
	Title string
	// Attachments are the ids of uploads of the thread (Part 5) that the
	// message carries: the store refuses an unknown or used one
	// (InvalidAttachment) and stores their objects in the message. With
	// attachments the text may be empty.
	Attachments []string
}

// Prepare checks m and fills what it implies: the default author, a
// checked Ask or Card, and the stored text (an interaction's rendering, a
// card's fallback). It returns the domain's codes for bad input.
func (m *NewMessage) Prepare(now time.Time) (*Interaction, error) {
	if m.Author == "" {
		m.Author = Operator
	}
	if err := CheckClientID(m.ClientID); err != nil {
		return nil, err
	}
	if err := CheckAttachmentIDs(m.Attachments); err != nil {
		return nil, err
	}
	if m.Title != "" {
		if err := CheckNewTitle(m.Title); err != nil {
			return nil, err
		}
	}
	var ix *Interaction
	switch {
	case m.Ask != nil && m.Card != nil:
		return nil, Errorf(InvalidInteraction, "a message is an interaction or a card, not both")
	case m.Ask != nil:
		if err := m.Ask.Check(); err != nil {
			return nil, err
		}
		ix = m.Ask.Interaction(now)
		m.Text = ix.RenderText()
		return ix, nil
	case m.Card != nil:
		if err := m.Card.Check(); err != nil {
			return nil, err
		}
		m.Text = m.Card.FallbackText
		return nil, nil
	}
	if len(m.Attachments) > 0 && strings.TrimSpace(m.Text) == "" {
		m.Text = "" // the attachments are the message
		return nil, nil
	}
	return nil, CheckText(m.Text)
}

// SameContent reports whether a stored message is what m would store
// again: the same author, and the same text, card or question. (An
// interaction's stored text names its deadline, so questions are compared
// by what was asked.)
func SameContent(stored Message, m NewMessage) bool {
	if stored.Author != m.Author || stored.AuthorName != m.AuthorName ||
		!slices.Equal(AttachmentIDs(stored.Attachments), m.Attachments) && !(len(stored.Attachments) == 0 && len(m.Attachments) == 0) {
		return false
	}
	switch {
	case m.Ask != nil:
		ix := stored.Interaction
		return ix != nil && ix.Type == m.Ask.Type && ix.Title == m.Ask.Title && ix.Prompt == m.Ask.Prompt &&
			ix.AllowText == m.Ask.AllowText && slices.Equal(ix.Choices, m.Ask.Choices) && slices.Equal(ix.Details, m.Ask.Details)
	case m.Card != nil:
		return stored.Card != nil && string(MarshalMessageV2(Message{Card: stored.Card})) ==
			string(MarshalMessageV2(Message{Card: m.Card}))
	}
	return stored.Interaction == nil && stored.Card == nil && stored.Text == m.Text
}
