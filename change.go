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
	ix := m.Interaction
	if ix == nil || ix.ID != c.InteractionID {
		return false, Errorf(NotFound, "no interaction %s in this thread", c.InteractionID)
	}
	at := now.UnixMilli()
	expire := func() {
		ix.State, ix.AnsweredAt = Expired, max(at, ix.Deadline)
	}
	switch c.Op {
	case Expire:
		if ix.State != Pending || at < ix.Deadline {
			return false, nil
		}
		expire()
		return true, nil
	case Cancel:
		if ix.State == Pending && at >= ix.Deadline {
			expire()
			return true, closed(ix)
		}
		if ix.State != Pending {
			return false, closed(ix)
		}
		ix.State, ix.AnsweredBy, ix.AnsweredAt = Canceled, c.By, at
		return true, nil
	case Respond:
		if ix.State == Pending && at >= ix.Deadline {
			expire()
			return true, closed(ix)
		}
		if ix.State != Pending {
			return false, closed(ix)
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
	return false, Errorf(Internal, "unknown change %q", c.Op)
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
