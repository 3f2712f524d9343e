package chatrelay

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// InteractionType says what hermes asks for.
type InteractionType string

// The interaction types.
const (
	Approval InteractionType = "approval" // approve or deny, before hermes acts
	Input    InteractionType = "input"    // a value: one of the choices, or text
)

// State is where an interaction stands. It is pending, then exactly one of
// the others, for good.
type State string

// The interaction states.
const (
	Pending  State = "pending"
	Approved State = "approved" // an approval, approved
	Denied   State = "denied"   // an approval, denied
	Answered State = "answered" // an input, answered
	Expired  State = "expired"  // the deadline passed first
	Canceled State = "canceled" // hermes withdrew it
)

// Closed reports whether s is final.
func (s State) Closed() bool { return s != Pending }

// Decisions of an approval.
const (
	Approve = "approve"
	Deny    = "deny"
)

// Interaction is hermes asking a person for input or approval, carried by
// a hermes message (Message.Interaction).
type Interaction struct {
	ID         string          `json:"id"` // "ix_" + 12 lowercase hex
	Type       InteractionType `json:"type"`
	Title      string          `json:"title,omitempty"`
	Prompt     string          `json:"prompt"`
	Choices    []Choice        `json:"choices,omitempty"` // input only
	AllowText  bool            `json:"allow_text"`        // input: any text may answer, not only a choice
	Details    []Detail        `json:"details,omitempty"` // approval only
	Deadline   int64           `json:"deadline"`          // epoch ms
	State      State           `json:"state"`
	Answer     *Answer         `json:"answer,omitempty"`
	AnsweredBy Author          `json:"answered_by,omitempty"`
	AnsweredAt int64           `json:"answered_at,omitempty"` // epoch ms of the answer, expiry or cancel
}

// Choice is one answer an input offers.
type Choice struct {
	Value       string `json:"value"`
	Label       string `json:"label,omitempty"`
	Description string `json:"description,omitempty"`
}

// Detail is one labelled fact an approval shows.
type Detail struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Answer is how an interaction was answered: a decision (approval) or a
// value (input).
type Answer struct {
	Decision string `json:"decision,omitempty"`
	Value    string `json:"value,omitempty"`
}

// NewInteractionID returns a fresh "ix_" + 12 lowercase hex.
func NewInteractionID() string {
	return newID("ix_", 6)
}

// Ask is what hermes sends to ask: the interaction without its id, state
// and deadline, and how long it may wait.
type Ask struct {
	Type      InteractionType
	Title     string
	Prompt    string
	Choices   []Choice
	AllowText bool
	Details   []Detail
	Timeout   time.Duration // 0: the type's default
}

// Check returns an *Error with code InvalidInteraction if a breaks a limit
// of its type; it fills a zero Timeout with the default.
func (a *Ask) Check() error {
	c := InvalidInteraction
	var timeout Limit
	switch a.Type {
	case Approval:
		if err := LimitApprovalTitle.Check(c, "the title", a.Title); err != nil {
			return err
		}
		if err := LimitApprovalText.Check(c, "the summary", a.Prompt); err != nil {
			return err
		}
		if len(a.Choices) > 0 || a.AllowText {
			return Errorf(c, "an approval has no choices and no text answer: it is approved or denied")
		}
		if err := LimitDetails.CheckItems(c, "details", len(a.Details)); err != nil {
			return err
		}
		for i, d := range a.Details {
			if err := LimitDetailLabel.Check(c, fmt.Sprintf("detail %d's label", i+1), d.Label); err != nil {
				return err
			}
			if err := LimitDetailValue.Check(c, fmt.Sprintf("detail %d's value", i+1), d.Value); err != nil {
				return err
			}
		}
		timeout = LimitApprovalTime
		if a.Timeout == 0 {
			a.Timeout = DefaultApprovalTimeout
		}
	case Input:
		if err := LimitInputTitle.Check(c, "the title", a.Title); err != nil {
			return err
		}
		if err := LimitInputPrompt.Check(c, "the prompt", a.Prompt); err != nil {
			return err
		}
		if len(a.Details) > 0 {
			return Errorf(c, "details are for approvals")
		}
		if err := LimitChoices.CheckItems(c, "choices", len(a.Choices)); err != nil {
			return err
		}
		if len(a.Choices) == 0 && !a.AllowText {
			return Errorf(c, "an input needs choices, or allow_text, or both")
		}
		seen := map[string]bool{}
		for i, ch := range a.Choices {
			n := fmt.Sprintf("choice %d", i+1)
			if err := LimitChoiceValue.Check(c, n+"'s value", ch.Value); err != nil {
				return err
			}
			if err := LimitChoiceLabel.Check(c, n+"'s label", ch.Label); err != nil {
				return err
			}
			if err := LimitChoiceDesc.Check(c, n+"'s description", ch.Description); err != nil {
				return err
			}
			if seen[ch.Value] {
				return Errorf(c, "choice values must be unique: %q is given twice", ch.Value)
			}
			seen[ch.Value] = true
		}
		timeout = LimitInputTimeout
		if a.Timeout == 0 {
			a.Timeout = DefaultInputTimeout
		}
	default:
		return Errorf(c, `the type is "approval" or "input"`)
	}
	if strings.TrimSpace(a.Prompt) == "" {
		return Errorf(c, "the prompt is empty")
	}
	lo, hi := timeout.Duration()
	if a.Timeout < lo || a.Timeout > hi {
		return Errorf(c, "the timeout of an %s is %v … %v, not %v", a.Type, lo, hi, a.Timeout)
	}
	return nil
}

// Interaction returns the pending interaction of a checked Ask, created at
// now.
func (a Ask) Interaction(now time.Time) *Interaction {
	return &Interaction{
		ID: NewInteractionID(), Type: a.Type, Title: a.Title, Prompt: a.Prompt,
		Choices: slices.Clone(a.Choices), AllowText: a.AllowText, Details: slices.Clone(a.Details),
		Deadline: now.Add(a.Timeout).UnixMilli(), State: Pending,
	}
}

// CheckAnswer returns an *Error with code InvalidAnswer if ans does not
// fit ix: a decision on an input, a value on an approval, a value not among
// the choices when text is not allowed, or over a limit.
func (ix *Interaction) CheckAnswer(ans Answer) error {
	c := InvalidAnswer
	switch ix.Type {
	case Approval:
		if ans.Value != "" {
			return Errorf(c, `an approval is answered with a decision ("approve" or "deny"), not a value`)
		}
		if ans.Decision != Approve && ans.Decision != Deny {
			return Errorf(c, `the decision is "approve" or "deny"`)
		}
	case Input:
		if ans.Decision != "" {
			return Errorf(c, "an input is answered with a value, not a decision")
		}
		if err := LimitAnswerValue.Check(c, "the value", ans.Value); err != nil {
			return err
		}
		if strings.TrimSpace(ans.Value) == "" {
			return Errorf(c, "the value is empty")
		}
		if !ix.AllowText && !slices.ContainsFunc(ix.Choices, func(ch Choice) bool { return ch.Value == ans.Value }) {
			return Errorf(c, "the value must be one of the choices")
		}
	}
	return nil
}

// RenderText is the v1 text of an interaction's message: a readable
// rendering, so that a v1 page or poller sees the question and how to
// answer it. It is cut to MaxText code points (with "…") if the question
// is longer: the v2 object carries it whole.
func (ix *Interaction) RenderText() string {
	var b strings.Builder
	switch ix.Type {
	case Approval:
		b.WriteString("Approval requested")
	default:
		b.WriteString("Question")
	}
	if ix.Title != "" {
		b.WriteString(": " + ix.Title)
	}
	b.WriteString("\n" + ix.Prompt)
	for _, d := range ix.Details {
		b.WriteString("\n- " + d.Label + ": " + d.Value)
	}
	if len(ix.Choices) > 0 {
		b.WriteString("\nChoices:")
		for _, ch := range ix.Choices {
			b.WriteString("\n- " + ch.Value)
			if ch.Label != "" && ch.Label != ch.Value {
				b.WriteString(" (" + ch.Label + ")")
			}
		}
	}
	deadline := time.UnixMilli(ix.Deadline).UTC().Format("2006-01-02 15:04 UTC")
	switch {
	case ix.Type == Approval:
		b.WriteString("\nApprove or deny in the chat page before " + deadline + ".")
	case ix.AllowText && len(ix.Choices) > 0:
		b.WriteString("\nPick a choice or write an answer in the chat page before " + deadline + ".")
	case ix.AllowText:
		b.WriteString("\nAnswer in the chat page before " + deadline + ".")
	default:
		b.WriteString("\nPick a choice in the chat page before " + deadline + ".")
	}
	return cut(b.String(), MaxText)
}

// cut shortens s to at most n code points, ending it with "…" if cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
