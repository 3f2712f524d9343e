package chatrelay

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Redaction (contract Part 3): every string a participant is sent has its
// secret-shaped substrings replaced by "[redacted]". The owner and the
// host always see the stored text; redaction never changes what is
// stored. These patterns are the whole list; redact_test.go plants each
// shape and checks the ordinary text that looks close stays as it is.

// Redacted is what a secret becomes.
const Redacted = "[redacted]"

// A secret shape starts and, if it has a fixed length, ends at a
// boundary: the text's start or end, or any character but an ASCII letter
// or digit ("_" counts, so PROD_ghp_… is found), or where the shape just
// before it was redacted.

// shape is a secret shape: each match of re is replaced by "[redacted]",
// keeping its group "keep" if it has one.
type shape struct {
	starts []string       // every match starts with one of these (in lower case, any case matching, if fold)
	fold   bool           // starts match in any case
	re     *regexp.Regexp // the shape, anchored at a start
	fixed  bool           // it has a fixed length, so it also ends at a boundary
	inside bool           // it may start inside a word (a PEM block's dashes)
	// run is the class of the shape's first run of characters (after its
	// start) if no match can start inside that run once one starting
	// before it in the run failed (a JWT's first part, which ends only at
	// its "."): the search skips the run, so it stays linear.
	run func(byte) bool
}

func shapeRE(expr string) *regexp.Regexp { return regexp.MustCompile(`^(?:` + expr + `)`) }

// base64url reports whether c is a base64url character.
func base64url(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

// secretShapes are the secret shapes.
var secretShapes = []shape{
	// PEM and PGP private key blocks, from BEGIN to its END line (or to
	// the end of the text if it was cut).
	{starts: []string{"-----BEGIN "}, inside: true,
		re: shapeRE(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z0-9 ]*-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY[A-Z0-9 ]*-----|\z)`)},
	// OpenAI-style keys.
	{starts: []string{"sk-"}, re: shapeRE(`sk-[A-Za-z0-9_-]{16,}`)},
	// GitHub tokens.
	{starts: []string{"ghp_", "gho_", "ghs_", "ghu_", "ghr_"}, re: shapeRE(`gh[psour]_[A-Za-z0-9]{20,}`)},
	{starts: []string{"github_pat_"}, re: shapeRE(`github_pat_[A-Za-z0-9_]{20,}`)},
	// AWS access key ids.
	{starts: []string{"AKIA", "ASIA"}, re: shapeRE(`A(?:KIA|SIA)[A-Z0-9]{16}`), fixed: true},
	// Slack tokens: xoxb-, xoxp-, xoxe- … (every xox?-) and app tokens.
	{starts: []string{"xox", "xapp-"}, re: shapeRE(`x(?:ox[a-z]|app)-[A-Za-z0-9-]{10,}`)},
	// JWTs: three base64url parts, the first starting eyJ.
	{starts: []string{"eyJ"}, run: base64url,
		re: shapeRE(`eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}`)},
	// Share tokens, device tokens and agent keys (Part 5: the owner's
	// own, never a participant's to see; an agent key is hermes's on /mcp).
	{starts: []string{"chp_", "chd_", "cha_"}, re: shapeRE(`ch[pda]_[A-Za-z0-9_-]{43}`)},
	// A webhook secret (Standard Webhooks' whsec_ and 24 to 64 bytes in
	// base64, serve --webhook-secret): whoever reads it signs events the
	// operator's receiver takes for the server's.
	{starts: []string{"whsec_"}, re: shapeRE(`whsec_[A-Za-z0-9+/]{32,}={0,2}`)},
	// The server's tickets (Part 2's, and a file's): t1.<thread>.<expiry>.<mac>,
	// t2 with a grant's id, f1 and f2 with an attachment's id too. A ticket
	// written in a message (the address of a stream or a file) opens what
	// it was minted for, the owner's unredacted view included, until it
	// expires: a credential, as a share token is. Its start is shape
	// enough: one glued to the next word is redacted too.
	{starts: []string{"t1.", "t2.", "f1.", "f2."},
		re: shapeRE(`[tf][12]\.[0-9a-f]{16}(?:\.[pd]_[0-9a-f]{8})?(?:\.at_[0-9a-f]{12})?\.[0-9]{1,19}\.[A-Za-z0-9_-]{43}`)},
	// A bearer credential, wherever it is written.
	{starts: []string{"bearer"}, fold: true, re: shapeRE(`(?P<keep>(?i:bearer)[ \t]+)[A-Za-z0-9._~+/-]{16,}=*`)},
}

// replace redacts every match of sh in s that starts (and, if fixed,
// ends) at a boundary. Each place a match may start is tried once, and a
// match is tried only at a boundary, so the work is linear in s (times a
// match's length).
func (sh shape) replace(s string) string {
	in := s // where the starts are looked for
	if sh.fold {
		in = asciiLower(s)
	}
	keep := sh.re.SubexpIndex("keep")
	starts := newFinder(in, sh.starts)
	sp := splice{s: s}
	for i := 0; i < len(s); {
		k, n := starts.from(i)
		if k < 0 {
			break
		}
		i = k
		if !sh.inside && !(i == sp.last && sp.last > 0) && !boundaryBefore(s, i) {
			i++
			continue
		}
		loc := sh.re.FindStringSubmatchIndex(s[i:])
		if loc == nil || sh.fixed && !boundaryAfter(s, i+loc[1]) {
			i++
			if sh.run != nil {
				for i += n - 1; i < len(s) && sh.run(s[i]); i++ {
				}
			}
			continue
		}
		kept := ""
		if keep > 0 && loc[2*keep] >= 0 {
			kept = s[i+loc[2*keep] : i+loc[2*keep+1]]
		}
		sp.redact(i, i+max(loc[1], 1), kept)
		i = sp.last
	}
	return sp.String()
}

// finder finds where any of its literals occurs next in s. It asks for
// each literal's next place only once that place is passed, so finding
// every place, in order, is linear in s.
type finder struct {
	s    string
	lits []string
	next []int // lits[j]'s place at or after the last asked; -1: none; -2: not looked for yet
}

func newFinder(s string, lits []string) *finder {
	f := &finder{s: s, lits: lits, next: make([]int, len(lits))}
	for j := range f.next {
		f.next[j] = -2
	}
	return f
}

// from is the first place at or after i where a literal occurs, and its
// length; or -1.
func (f *finder) from(i int) (int, int) {
	at, n := -1, 0
	for j, l := range f.lits {
		if f.next[j] == -2 || f.next[j] >= 0 && f.next[j] < i {
			f.next[j] = -1
			if k := strings.Index(f.s[i:], l); k >= 0 {
				f.next[j] = i + k
			}
		}
		if k := f.next[j]; k >= 0 && (at < 0 || k < at) {
			at, n = k, len(l)
		}
	}
	return at, n
}

// redactThreadTokens redacts every run of exactly 64 hex characters
// between boundaries: a thread token.
func redactThreadTokens(s string) string {
	sp := splice{s: s}
	for i := 0; i < len(s); {
		if !isHex(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isHex(s[j]) {
			j++
		}
		if j-i == 64 && boundaryBefore(s, i) && boundaryAfter(s, j) {
			sp.redact(i, j, "")
		}
		i = j
	}
	return sp.String()
}

// splice is s with spans replaced by Redacted, built left to right.
type splice struct {
	s    string
	b    strings.Builder
	last int // s[:last] is written
}

// redact writes s up to from, then kept and Redacted in place of
// s[from:to].
func (sp *splice) redact(from, to int, kept string) {
	sp.b.WriteString(sp.s[sp.last:from])
	sp.b.WriteString(kept)
	sp.b.WriteString(Redacted)
	sp.last = to
}

// String is s with its spans redacted: s itself when none was.
func (sp *splice) String() string {
	if sp.last == 0 {
		return sp.s
	}
	sp.b.WriteString(sp.s[sp.last:])
	return sp.b.String()
}

func boundaryBefore(s string, i int) bool { return i == 0 || !isAlnum(s[i-1]) }
func boundaryAfter(s string, i int) bool  { return i == len(s) || !isAlnum(s[i]) }

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// secretNames are what makes a key or a label secret-named, in any case,
// alone or inside a longer name (DB_PASSWORD, GITHUB_TOKEN,
// client_secret, access_token): "api" is api_key, api-key, apikey or, in
// words, "api key", and "private" private_key, private-key, privatekey or
// "private key" (SSH_PRIVATE_KEY: a name beside the contract's list,
// which redacts more, never less; a label is a person's words: "API key").
var secretNames = []string{"password", "passwd", "secret", "token", "api", "private", "authorization"}

// secretNameAt is the length of the secret name that lower (ASCII lower
// case) holds at i, or 0.
func secretNameAt(lower string, i int) int {
	for _, n := range secretNames {
		if !strings.HasPrefix(lower[i:], n) {
			continue
		}
		if n != "api" && n != "private" {
			return len(n)
		}
		j := i + len(n)
		if j < len(lower) && (lower[j] == '_' || lower[j] == '-' || lower[j] == ' ') {
			j++
		}
		if strings.HasPrefix(lower[j:], "key") {
			return j + 3 - i
		}
	}
	return 0
}

// secretNamed reports whether a label is secret-named.
func secretNamed(label string) bool {
	lower := asciiLower(label)
	for i := range lower {
		if secretNameAt(lower, i) > 0 {
			return true
		}
	}
	return false
}

// asciiLower is s with ASCII letters in lower case, byte for byte (even
// in invalid UTF-8), so its bytes line up with s's.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// isKeyChar reports whether c may be part of a key's name.
func isKeyChar(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == '-' }

// redactValues redacts the value after each secret-named key followed by
// "=" or ":" (the key may be quoted, as in JSON, and the sign may have
// spaces or tabs around it). The value runs to the end of the line or,
// when quoted, to its closing quote (an unterminated quote: to the end of
// the line); only what is inside the quotes is replaced, so JSON stays
// JSON. A value that is already "[redacted]", or one cut to its field's
// limit (a start of it and "…": RedactMessage's cut), is left as it is.
func redactValues(s string) string {
	if !strings.ContainsAny(s, "=:") {
		return s
	}
	lower := asciiLower(s)
	sp := splice{s: s}
	for i := 0; i < len(s); i++ {
		n := secretNameAt(lower, i)
		if n == 0 {
			continue
		}
		j := i + n
		for j < len(s) && isKeyChar(s[j]) {
			j++
		}
		if j < len(s) && s[j] == '\\' {
			j++
		}
		if j < len(s) && (s[j] == '"' || s[j] == '\'') {
			j++
		}
		j = skipBlanks(s, j)
		if j == len(s) || s[j] != '=' && s[j] != ':' {
			continue
		}
		from, to, end, ok := valueAt(s, skipBlanks(s, j+1))
		if !ok {
			continue
		}
		if !redacted(s[from:to]) {
			sp.redact(from, to, "")
		}
		i = end - 1 // the next key starts after the value
	}
	return sp.String()
}

// redacted reports whether v is "[redacted]", or a start of it cut with
// "…": were the cut one redacted again, the view would lose its "…", or
// change each time it is redacted.
func redacted(v string) bool {
	if v == Redacted {
		return true
	}
	start, ok := strings.CutSuffix(v, "…")
	return ok && strings.HasPrefix(Redacted, start)
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// valueAt reads the value that starts at i: s[from:to] is what is
// replaced, s[i:end] the whole value with its quotes. A quoted value runs
// to its closing quote (a backslash escapes in double quotes), an
// unterminated one or a bare one to the end of the line.
func valueAt(s string, i int) (from, to, end int, ok bool) {
	if i == len(s) || isSpace(s[i]) {
		return 0, 0, 0, false
	}
	eol := func(from int) int {
		if k := strings.IndexAny(s[from:], "\r\n"); k >= 0 {
			return from + k
		}
		return len(s)
	}
	switch q := s[i]; q {
	case '"':
		for k := i + 1; k < len(s); k++ {
			switch s[k] {
			case '\\':
				k++
			case '"':
				return i + 1, k, k + 1, true
			}
		}
		to = eol(i + 1)
		return i + 1, to, to, true
	case '\'':
		if k := strings.IndexByte(s[i+1:], '\''); k >= 0 {
			return i + 1, i + 1 + k, i + 2 + k, true
		}
		to = eol(i + 1)
		return i + 1, to, to, true
	}
	to = eol(i)
	return i, to, to, true
}

// isSpace reports whether c is ASCII white space.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' || c == '\v'
}

// redactURLPasswords redacts the password of each URL's user info,
// scheme://user:password@host: the user may be empty (redis://:pass@host)
// and the password may hold "@" or "/", running to the last "@" before
// white space.
func redactURLPasswords(s string) string {
	sp := splice{s: s}
	runEnd, lastAt := -1, -1
	for pos := 0; ; {
		k := strings.Index(s[pos:], "://")
		if k < 0 {
			break
		}
		at := pos + k
		pos = at + 3
		if at < sp.last || !hasScheme(s[:at]) {
			continue
		}
		i := pos
		for i < len(s) && !isSpace(s[i]) && s[i] != ':' && s[i] != '/' && s[i] != '@' {
			i++
		}
		if i == len(s) || s[i] != ':' {
			continue
		}
		from := i + 1
		if from > runEnd { // the run of non-space the password is in, and its last "@"
			runEnd = from
			for runEnd < len(s) && !isSpace(s[runEnd]) {
				runEnd++
			}
			lastAt = from + strings.LastIndexByte(s[from:runEnd], '@')
		}
		to := lastAt
		if to <= from {
			continue
		}
		if s[from:to] != Redacted {
			sp.redact(from, to, "")
		}
		pos = to
	}
	return sp.String()
}

// hasScheme reports whether s ends with a URL scheme: letters, digits,
// "+", "." and "-", one of them a letter.
func hasScheme(s string) bool {
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			return true
		case c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-':
		default:
			return false
		}
	}
	return false
}

// maxPasses bounds how often Redact runs over a text.
const maxPasses = 8

// Redact returns s with every secret-shaped substring replaced by
// "[redacted]". Text with none is returned as it is (no copy).
//
// Redact is idempotent: it runs over its own result again until that
// changes no more (one redaction can uncover another: in
// `s://u:password="x y"@h` the URL's password ends at "@" only once the
// quoted value is one word), so no secret shape is left in what it
// returns. A text still changing after maxPasses runs is redacted whole.
func Redact(s string) string {
	out := s
	for range maxPasses {
		next := redactOnce(out)
		if next == out {
			return out
		}
		out = next
	}
	return Redacted
}

// RedactTo is Redact(s) cut to l.Max code points (with "…"): a string a
// participant reads beside a message (a thread's title, a name in whoami)
// keeps its field's limit, and reads as RedactMessage's strings do (a
// shape the cut's "…" ends is redacted too: redacted again, it is the same).
func RedactTo(s string, l Limit) string {
	var r redactor
	return r.to(s, l)
}

// redactOnce redacts s once: the secret shapes, then URL passwords, then
// the values of secret-named keys.
func redactOnce(s string) string {
	for _, sh := range secretShapes {
		s = sh.replace(s)
	}
	s = redactThreadTokens(s)
	s = redactURLPasswords(s)
	return redactValues(s)
}

// RedactMessage returns m as a participant sees it: every string a
// participant could read redacted (its text, in v2 its interaction's and
// card's words, its reactions' emoji, its attachments' names and
// types), the value of every detail or card field whose label is
// secret-named redacted whole (and wherever else the message holds it as
// a word, if it has minEcho code points or more), and without its
// client_id (the owner's tab's identity, never a participant's to see).
// A redaction can lengthen a string ("password=x" becomes
// "password=[redacted]"): each is then cut to its field's limit, with
// "…", so the participant's view keeps every limit of the contract. m is
// not changed (its interaction, card and reactions are copied). It also
// reports whether anything changed: if nothing did, a participant reads m
// as it is.
func RedactMessage(m Message) (Message, bool) {
	var r redactor
	if m.Interaction != nil {
		r.note(m.Interaction.Details)
	}
	if m.Card != nil {
		for _, b := range m.Card.Blocks {
			r.note(b.Fields)
		}
	}
	slices.SortFunc(r.echoes, func(a, b string) int { return len(b) - len(a) }) // a longer one first: a shorter inside it would leave its rest
	if m.ClientID != "" {
		m.ClientID, r.changed = "", true
	}
	// An interaction's text is its rendering (RenderText): rendered
	// again from the redacted interaction below, so that a detail's value
	// redacted whole for its label is redacted in the text too.
	rendered := m.Interaction != nil && m.Text == m.Interaction.RenderText()
	m.Text = r.to(m.Text, LimitPostText)
	m.AuthorName = r.to(m.AuthorName, LimitName) // a name the owner gave a share link or an agent key
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
		if rendered {
			m.Text = r.to(c.RenderText(), LimitPostText)
		}
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
	m.Reactions = r.reactions(m.Reactions)
	if len(m.Attachments) > 0 {
		as := slices.Clone(m.Attachments)
		for i := range as {
			as[i].Name = r.to(as[i].Name, LimitAttachmentName)
			// The type is the uploader's word too (CleanMediaType keeps any
			// token: application/ghp_…); it never lengthens, nor reaches
			// the name's limit.
			as[i].Type = r.to(as[i].Type, LimitAttachmentName)
		}
		m.Attachments = as
	}
	return m, r.changed
}

// redactor redacts a message's strings and notes whether any changed.
type redactor struct {
	changed bool
	// echoes are the values redacted whole for their secret-named label
	// (note), redacted too wherever else the message holds them: a card's
	// fallback_text that lists its fields as "label: value" lines, a
	// prompt that names the value again.
	echoes []string
}

// minEcho is the fewest code points of a value looked for elsewhere: a
// shorter one ("on", "yes") would redact ordinary words.
const minEcho = 4

// note adds the values of ds whose label is secret-named to r.echoes.
func (r *redactor) note(ds []Detail) {
	for _, d := range ds {
		v := strings.TrimSpace(d.Value)
		if secretNamed(d.Label) && v != Redacted && utf8.RuneCountInString(v) >= minEcho && !slices.Contains(r.echoes, v) {
			r.echoes = append(r.echoes, v)
		}
	}
}

// redact is Redact(s) with every echo in it redacted first, where it is
// not part of a longer word.
func (r *redactor) redact(s string) string {
	for _, v := range r.echoes {
		sp := splice{s: s}
		for i := 0; ; {
			k := strings.Index(s[i:], v)
			if k < 0 {
				break
			}
			from, to := i+k, i+k+len(v)
			if (!isAlnum(v[0]) || boundaryBefore(s, from)) && (!isAlnum(v[len(v)-1]) || boundaryAfter(s, to)) {
				sp.redact(from, to, "")
				i = to
			} else {
				i = from + 1
			}
		}
		s = sp.String()
	}
	return Redact(s)
}

// to redacts s and cuts it to l.Max code points. The cut's "…" can end
// a shape ("AKIA" and 16 of a longer run, 64 of 66 hex): what it left is
// redacted again, and cut, until that changes nothing, so that the view
// redacted again is the view.
func (r *redactor) to(s string, l Limit) string {
	red := r.redact(s)
	out := cut(red, l.Max)
	if out != red {
		for range maxPasses {
			next := cut(Redact(out), l.Max)
			if next == out {
				break
			}
			out = next
		}
	}
	if out != s {
		r.changed = true
	}
	return out
}

// details redacts labelled values; a secret-named label's value is
// redacted whole.
func (r *redactor) details(ds []Detail, label, value Limit) []Detail {
	if ds == nil {
		return nil
	}
	out := slices.Clone(ds)
	for i := range out {
		d := &out[i]
		secret := secretNamed(d.Label)
		d.Label = r.to(d.Label, label)
		if secret && d.Value != "" && d.Value != Redacted {
			d.Value, r.changed = Redacted, true
			continue
		}
		d.Value = r.to(d.Value, value)
	}
	return out
}

// reactions redacts the emoji of rs (a reactor's key is any short
// string). Emoji that become the same are merged, their reactors in
// order, each once. rs is returned itself if no emoji changed.
func (r *redactor) reactions(rs Reactions) Reactions {
	var out Reactions
	for emoji := range rs {
		if r.redact(emoji) != emoji {
			out = make(Reactions, len(rs))
			break
		}
	}
	if out == nil {
		return rs
	}
	r.changed = true
	keys := slices.Sorted(maps.Keys(rs)) // a map's order is random: merged reactors in a fixed order
	for _, emoji := range keys {
		k := r.redact(emoji)
		for _, who := range rs[emoji] {
			if !slices.Contains(out[k], who) {
				out[k] = append(out[k], who)
			}
		}
	}
	return out
}
