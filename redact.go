package chatrelay

import (
	"regexp"
	"slices"
)

// Redaction (contract Part 3): every string a participant is sent has its
// secret-shaped substrings replaced by "[redacted]". The owner and the
// host always see the stored text; redaction never changes what is
// stored. These patterns are the whole list; redact_test.go plants each
// shape and checks the ordinary text that looks close stays as it is.

// Redacted is what a secret becomes.
const Redacted = "[redacted]"

// secretPatterns are the secret shapes, each replaced whole.
var secretPatterns = []*regexp.Regexp{
	// PEM private key blocks, from BEGIN to its END line (or to the end of
	// the text if it was cut).
	regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`),
	// OpenAI-style keys.
	regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`),
	// GitHub tokens.
	regexp.MustCompile(`\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}`),
	regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}`),
	// AWS access key ids.
	regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`),
	// Slack tokens.
	regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),
	// JWTs: three base64url parts, the first starting eyJ.
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}`),
	// Share tokens.
	regexp.MustCompile(`\bchp_[A-Za-z0-9_-]{43}`),
	// Thread tokens: exactly 64 hex characters.
	regexp.MustCompile(`\b[0-9a-fA-F]{64}\b`),
}

// valuePattern finds the value after password, passwd, secret, token or
// api_key/api-key followed by "=" or ":"; group 1 is what stays.
var valuePattern = regexp.MustCompile(`(?i)(\b(?:password|passwd|secret|token|api[_-]key)\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&"']+)`)

// urlPassword finds the password in a URL's user info; groups 1 and 3
// stay.
var urlPassword = regexp.MustCompile(`(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)([^\s/@]+)(@)`)

// Redact returns s with every secret-shaped substring replaced by
// "[redacted]". Text with none is returned as it is (no copy).
func Redact(s string) string {
	out := s
	for _, re := range secretPatterns {
		out = re.ReplaceAllLiteralString(out, Redacted)
	}
	out = urlPassword.ReplaceAllString(out, "${1}"+Redacted+"${3}")
	out = valuePattern.ReplaceAllStringFunc(out, func(m string) string {
		sub := valuePattern.FindStringSubmatch(m)
		if sub[2] == Redacted {
			return m
		}
		return sub[1] + Redacted
	})
	return out
}

// RedactMessage returns m with every string a participant could read
// redacted: its text, and in v2 its interaction's and card's words. A
// redaction can lengthen a string ("password=x" becomes
// "password=[redacted]"): each is then cut to its field's limit, with "…",
// so the participant's view keeps every limit of the contract. m is not
// changed (its interaction and card are copied). It also reports whether
// any string changed: if none did, a participant reads m as it is.
func RedactMessage(m Message) (Message, bool) {
	var r redactor
	m.Text = r.to(m.Text, LimitPostText)
	if ix := m.Interaction; ix != nil {
		c := *ix
		title, prompt := LimitInputTitle, LimitInputPrompt
		if c.Type == Approval {
			title, prompt = LimitApprovalTitle, LimitApprovalText
		}
		c.Title, c.Prompt = r.to(c.Title, title), r.to(c.Prompt, prompt)
		c.Choices = slices.Clone(c.Choices)
		for i := range c.Choices {
			ch := &c.Choices[i]
			ch.Value, ch.Label = r.to(ch.Value, LimitChoiceValue), r.to(ch.Label, LimitChoiceLabel)
			ch.Description = r.to(ch.Description, LimitChoiceDesc)
		}
		c.Details = r.details(c.Details, LimitDetailLabel, LimitDetailValue)
		if c.Answer != nil {
			a := *c.Answer
			a.Value = r.to(a.Value, LimitAnswerValue)
			c.Answer = &a
		}
		m.Interaction = &c
	}
	if cd := m.Card; cd != nil {
		c := *cd
		c.Title, c.FallbackText = r.to(c.Title, LimitCardTitle), r.to(c.FallbackText, LimitCardFallback)
		c.Blocks = slices.Clone(c.Blocks)
		for i := range c.Blocks {
			b := &c.Blocks[i]
			text := LimitBlockText
			if b.Type == CodeBlock {
				text = LimitCodeText
			}
			b.Text, b.URL = r.to(b.Text, text), r.to(b.URL, LimitLinkURL)
			b.Label, b.Language = r.to(b.Label, LimitLinkLabel), r.to(b.Language, LimitCodeLanguage)
			b.Fields = r.details(b.Fields, LimitFieldLabel, LimitFieldValue)
		}
		m.Card = &c
	}
	return m, r.changed
}

// redactor redacts a message's strings and notes whether any changed.
type redactor struct{ changed bool }

// to redacts s and cuts it to l.Max code points.
func (r *redactor) to(s string, l Limit) string {
	out := cut(Redact(s), l.Max)
	if out != s {
		r.changed = true
	}
	return out
}

func (r *redactor) details(ds []Detail, label, value Limit) []Detail {
	if ds == nil {
		return nil
	}
	out := slices.Clone(ds)
	for i := range out {
		out[i].Label, out[i].Value = r.to(out[i].Label, label), r.to(out[i].Value, value)
	}
	return out
}
