package chatrelay

import (
	"slices"
	"time"
)

// ChangeOp is what a Change does.
type ChangeOp string

// The changes.
const (
	Respond ChangeOp = "respond" // answer an interaction: the first answer wins
	Cancel  ChangeOp = "cancel"  // hermes withdraws a pending interaction
	Expire  ChangeOp = "expire"  // a pending interaction's deadline passed
	React   ChangeOp = "react"   // add By's reaction Emoji to a message
	Unreact ChangeOp = "unreact" // remove it
)

// Change is a change of a stored message.
type Change struct {
	Op            ChangeOp
	MessageID     string // React, Unreact
	InteractionID string // Respond, Cancel, Expire
	Answer        Answer // Respond
	Emoji         string // React, Unreact
	By            Author // who answers, cancels or reacts
}

// ApplyChange applies c to m (a copy the caller owns) at now, and reports
// whether m changed. Its errors: NotFound (a message without the
// interaction), InvalidAnswer, InvalidEmoji, and InteractionClosed — an
// answer or cancel of an interaction no longer pending. An answer that
// comes at or after the deadline changes m to expired and is refused.
func ApplyChange(m *Message, c Change, now time.Time) (changed bool, err error) {
	switch c.Op {
	case React, Unreact:
		return applyReaction(m, c)
	case Expire, Cancel, Respond:
		return applyToInteraction(m, c, now.UnixMilli())
	}
	return false, Errorf(Internal, "unknown change %q", c.Op)
}

// applyReaction adds or removes c.By's reaction c.Emoji.
func applyReaction(m *Message, c Change) (changed bool, err error) {
	if err := CheckEmoji(c.Emoji); err != nil {
		return false, err
	}
	who := m.Reactions[c.Emoji]
	has := slices.Contains(who, c.By)
	if c.Op == React {
		if has {
			return false, nil
		}
		if len(who) == 0 && len(m.Reactions) >= LimitReactions.Max {
			return false, Errorf(TooManyReactions, "this message has %d different reactions, the most it may have; react with one of them", LimitReactions.Max)
		}
		if m.Reactions == nil {
			m.Reactions = Reactions{}
		}
		m.Reactions[c.Emoji] = append(who, c.By)
		return true, nil
	}
	if !has {
		return false, nil
	}
	who = slices.DeleteFunc(who, func(a Author) bool { return a == c.By })
	if len(who) == 0 {
		delete(m.Reactions, c.Emoji)
		if len(m.Reactions) == 0 {
			m.Reactions = nil
		}
	} else {
		m.Reactions[c.Emoji] = who
	}
	return true, nil
}

// applyToInteraction expires, cancels or answers the message's
// interaction at epoch ms at. A cancel or an answer finds the interaction
// closed once it left pending, or once its deadline passed (which expires
// it now: the one outcome every reader then sees).
func applyToInteraction(m *Message, c Change, at int64) (changed bool, err error) {
	ix := m.Interaction
	if ix == nil || ix.ID != c.InteractionID {
		return false, Errorf(NotFound, "no interaction %s in this thread", c.InteractionID)
	}
	due := ix.State == Pending && at >= ix.Deadline
	if due {
		ix.State, ix.AnsweredAt = Expired, max(at, ix.Deadline)
	}
	switch {
	case c.Op == Expire:
		return due, nil
	case due:
		return true, closed(ix)
	case ix.State != Pending:
		return false, closed(ix)
	case c.Op == Cancel:
		ix.State, ix.AnsweredBy, ix.AnsweredAt = Canceled, c.By, at
		return true, nil
	}
	if err := ix.CheckAnswer(c.Answer); err != nil {
		return false, err
	}
	a := c.Answer
	ix.Answer, ix.AnsweredBy, ix.AnsweredAt = &a, c.By, at
	switch {
	case ix.Type == Input:
		ix.State = Answered
	case a.Decision == Approve:
		ix.State = Approved
	default:
		ix.State = Denied
	}
	return true, nil
}

func closed(ix *Interaction) error {
	return Errorf(InteractionClosed, "this interaction is %s: the first answer won", ix.State)
}

// CloneMessage copies m deeply enough to change its interaction and
// reactions without touching m (stored entries are shared).
func CloneMessage(m Message) Message {
	if m.Interaction != nil {
		ix := *m.Interaction
		if ix.Answer != nil {
			a := *ix.Answer
			ix.Answer = &a
		}
		m.Interaction = &ix
	}
	if m.Reactions != nil {
		r := make(Reactions, len(m.Reactions))
		for k, v := range m.Reactions {
			r[k] = slices.Clone(v)
		}
		m.Reactions = r
	}
	return m
}

// WithAbout returns err with the message's v2 JSON js as its About, if err
// is a domain *Error (a copy: err itself is not changed).
func WithAbout(err error, js []byte) error {
	if e, ok := err.(*Error); ok {
		c := *e
		c.About = js
		return &c
	}
	return err
}
