package chatrelay

import (
	"fmt"
	"regexp"
	"time"
	"unicode"
	"unicode/utf8"
)

// Unit is what a limit counts.
type Unit string

// The units of the limits.
const (
	CodePoints    Unit = "code_points"     // Unicode code points of a string (JSON Schema's maxLength)
	Bytes         Unit = "bytes"           // bytes: of a request body, a file, or a string as UTF-8 (a URL)
	JSONUTF8Bytes Unit = "json_utf8_bytes" // bytes of a value encoded as compact UTF-8 JSON
	Items         Unit = "items"           // elements of an array
	Seconds       Unit = "seconds"         // a duration
	Count         Unit = "count"           // things counted over time (posts, grants)
)

// Limit is one limit of the contract: the most (and, where it has one,
// the least) a value may hold, in Unit. The table below is the one source
// of every limit: the validators check against it, the JSON Schema's
// maxLength and maxItems are made from it, and GET /api/limits.json
// states it; a limit is changed here only.
type Limit struct {
	Name string // "post.text": the field it bounds, as the limits artifact names it
	Min  int
	Max  int
	Unit Unit
}

// The limits (contract Parts 1, 3 and 4).
var (
	LimitPostText = Limit{"post.text", 1, MaxText, CodePoints}
	LimitPostBody = Limit{"post.body", 0, MaxBody, Bytes}

	LimitInputTitle    = Limit{"input.title", 0, 160, CodePoints}
	LimitApprovalTitle = Limit{"approval.title", 0, 128, CodePoints}
	LimitInputPrompt   = Limit{"input.prompt", 1, 4000, CodePoints}
	LimitApprovalText  = Limit{"approval.prompt", 1, 1000, CodePoints}
	LimitChoices       = Limit{"input.choices", 0, 12, Items}
	LimitChoiceValue   = Limit{"choice.value", 1, 200, CodePoints}
	LimitChoiceLabel   = Limit{"choice.label", 0, 120, CodePoints}
	LimitChoiceDesc    = Limit{"choice.description", 0, 300, CodePoints}
	LimitDetails       = Limit{"approval.details", 0, 8, Items}
	LimitDetailLabel   = Limit{"detail.label", 1, 80, CodePoints}
	LimitDetailValue   = Limit{"detail.value", 0, 500, CodePoints}
	LimitInputTimeout  = Limit{"input.timeout", 1, 30 * 60, Seconds}
	LimitApprovalTime  = Limit{"approval.timeout", 1, 72 * 3600, Seconds}
	LimitAnswerValue   = Limit{"answer.value", 1, 8192, CodePoints}

	LimitEmoji     = Limit{"reaction.emoji", 1, 64, CodePoints}
	LimitReactions = Limit{"message.reactions", 0, 20, Items} // distinct emoji on one message

	LimitCard         = Limit{"card", 0, 32768, JSONUTF8Bytes}
	LimitCardTitle    = Limit{"card.title", 0, 200, CodePoints}
	LimitCardFallback = Limit{"card.fallback_text", 1, 2000, CodePoints}
	LimitCardBlocks   = Limit{"card.blocks", 0, 64, Items}
	LimitBlockText    = Limit{"block.text", 1, 4000, CodePoints}
	LimitFields       = Limit{"block.fields", 1, 20, Items}
	LimitFieldLabel   = Limit{"field.label", 1, 80, CodePoints}
	LimitFieldValue   = Limit{"field.value", 0, 500, CodePoints}
	LimitLinkURL      = Limit{"link.url", 1, 2048, CodePoints}
	LimitLinkLabel    = Limit{"link.label", 0, 200, CodePoints}
	LimitCodeText     = Limit{"code.text", 1, 4000, CodePoints}
	LimitCodeLanguage = Limit{"code.language", 0, 32, CodePoints}

	LimitClientID = Limit{"client_id", 1, 160, CodePoints}

	LimitThreadTitle = Limit{"thread.title", 0, 160, CodePoints} // open_thread's title (Part 5)

	LimitWaitTimeout = Limit{"wait.timeout", 0, 300, Seconds}

	LimitName         = Limit{"participant.name", 1, 64, CodePoints}
	LimitExpiresIn    = Limit{"participant.expires_in", 3600, 2592000, Seconds}
	LimitCap          = Limit{"participant.cap", 1, 1000, Count}
	LimitActiveGrants = Limit{"participant.grants", 0, 50, Count} // active grants per thread
	LimitWaitingPosts = Limit{"participant.pending", 0, 3, Count} // a participant's posts after hermes's newest
	LimitAuditKept    = Limit{"audit.events", 0, 1000, Count}
	// Invites per thread in any InviteWindow: the owner's over HTTP and the
	// host's (chatrelay share) alike; one more is RateLimited.
	LimitInvites = Limit{"participant.invites_per_hour", 0, 60, Count}
	// An ended grant (revoked or expired) stays in the participants record,
	// listed with its state, for LimitEndedListed after it ended, and a
	// thread keeps at most LimitEndedKept of them (the newest ended); older
	// ones are dropped from the record (the audit keeps its own history).
	LimitEndedListed = Limit{"participant.ended_listed", 0, 30 * 24 * 3600, Seconds}
	LimitEndedKept   = Limit{"participant.ended_kept", 0, 100, Count}

	// Attachments (Part 5). LimitAttachmentBytes is the default of
	// --max-attachment-bytes; the running server's is in limits.json.
	LimitAttachments       = Limit{"message.attachments", 0, 10, Items}
	LimitAttachmentBytes   = Limit{"attachment.size", 0, 10 << 20, Bytes}
	LimitThreadAttachments = Limit{"thread.attachments", 0, 100 << 20, Bytes}   // the distinct bytes of the named files and an uploader's drafts
	LimitAttachmentName    = Limit{"attachment.name", 1, 200, CodePoints}       // once cleaned
	LimitAttachmentUnused  = Limit{"attachment.unreferenced", 0, 3600, Seconds} // an upload no post names is deleted after it
	// LimitAttachmentPending bounds the owner's uploads (its token's, its
	// devices', the host's) that no message names yet (within their
	// hour): one more is refused.
	LimitAttachmentPending = Limit{"attachment.pending", 0, 100, Count}
	// A participant's upload is judged on its own uploads no message
	// names yet (at most LimitParticipantPending of them, of at most
	// LimitParticipantDraftBytes distinct bytes) and the attachments
	// messages name (with its own, LimitThreadAttachments), as the owner's
	// is on its own (LimitAttachmentPending). Another's drafts count for
	// either as nothing: a refusal tells a participant nothing of them,
	// and participants' drafts never hold the owner's uploads back.
	LimitParticipantPending    = Limit{"attachment.pending_per_participant", 0, 10, Count}
	LimitParticipantDraftBytes = Limit{"attachment.pending_bytes_per_participant", 0, 20 << 20, Bytes}
	// Devices (Part 5): a device's life, and the active devices of a
	// thread (beside its share links, not among them).
	LimitDeviceExpiresIn = Limit{"device.expires_in", 3600, 31536000, Seconds}
	LimitActiveDevices   = Limit{"device.active", 0, 10, Count}
	// Web Push (Part 5): subscriptions per thread, and a push's payload
	// before encryption, whose strings are cut (not refused) to
	// LimitPushString.
	LimitPushSubscriptions = Limit{"push.subscriptions", 0, 20, Count}
	// LimitPushParticipants is the most of a thread's subscriptions that
	// its participants hold together; the rest (a quarter, as a thread's
	// streams) is kept for the owner's token and devices, so that a share
	// link cannot keep the owner's approvals from its browsers.
	LimitPushParticipants = Limit{"push.subscriptions_participants", 0, 15, Count}
	LimitPushPayload      = Limit{"push.payload", 0, 3072, JSONUTF8Bytes}
	LimitPushString       = Limit{"push.string", 0, 500, CodePoints}
	// LimitPushEndpoint bounds a subscription's endpoint URL, in bytes
	// (as taken and as stored, escaped): the subscribe check (webpush's
	// Guard is given it), the stored record's check and the schema's
	// maxLength (code points: never more than the bytes) read it.
	LimitPushEndpoint = Limit{"push.endpoint", 1, 2048, Bytes}
	// Agent keys (Part 5): a key's name (refused past it, not cut: it is
	// every message's author_name), the threads a scoped key names, and
	// the active keys of a store.
	LimitAgentName    = Limit{"agent.name", 1, 64, CodePoints}
	LimitAgentThreads = Limit{"agent.threads", 0, 100, Items}
	LimitActiveAgents = Limit{"agent.active", 0, 100, Count}
	// LimitMCPBody bounds an MCP request (an HTTP body, a stdio line), a
	// tool call's files in base64 included: over MCP a file is bounded
	// by it (about 750 KiB) before attachment.size.
	LimitMCPBody = Limit{"mcp.body", 0, MaxMCPBody, Bytes}
)

// InviteWindow is the sliding window of LimitInvites.
const InviteWindow = time.Hour

// Limits lists every limit, in the table's order.
func Limits() []Limit {
	return []Limit{
		LimitPostText, LimitPostBody,
		LimitInputTitle, LimitApprovalTitle, LimitInputPrompt, LimitApprovalText,
		LimitChoices, LimitChoiceValue, LimitChoiceLabel, LimitChoiceDesc,
		LimitDetails, LimitDetailLabel, LimitDetailValue,
		LimitInputTimeout, LimitApprovalTime, LimitAnswerValue,
		LimitEmoji, LimitReactions,
		LimitCard, LimitCardTitle, LimitCardFallback, LimitCardBlocks, LimitBlockText,
		LimitFields, LimitFieldLabel, LimitFieldValue, LimitLinkURL, LimitLinkLabel,
		LimitCodeText, LimitCodeLanguage,
		LimitClientID, LimitThreadTitle, LimitWaitTimeout,
		LimitName, LimitExpiresIn, LimitCap, LimitActiveGrants, LimitWaitingPosts, LimitAuditKept,
		LimitInvites, LimitEndedListed, LimitEndedKept,
		LimitAttachments, LimitAttachmentBytes, LimitThreadAttachments, LimitAttachmentName, LimitAttachmentUnused, LimitAttachmentPending,
		LimitParticipantPending, LimitParticipantDraftBytes,
		LimitDeviceExpiresIn, LimitActiveDevices,
		LimitPushSubscriptions, LimitPushParticipants, LimitPushPayload, LimitPushString, LimitPushEndpoint,
		LimitAgentName, LimitAgentThreads, LimitActiveAgents, LimitMCPBody,
	}
}

// Default interaction deadlines (contract Part 4) and grant terms (Part 3).
const (
	DefaultInputTimeout    = 10 * time.Minute
	DefaultApprovalTimeout = time.Hour
	DefaultExpiresIn       = 7 * 24 * time.Hour  // a share link's life
	DefaultCap             = 50                  // a participant's posts in a grant's life
	DefaultDeviceExpiresIn = 90 * 24 * time.Hour // a device's life (Part 5)
)

// Duration is l's Min and Max as durations (for Seconds limits).
func (l Limit) Duration() (min, max time.Duration) {
	return time.Duration(l.Min) * time.Second, time.Duration(l.Max) * time.Second
}

// Check returns an *Error with code c if the string s breaks l (code
// points). what names the field in the message.
func (l Limit) Check(c Code, what, s string) error {
	if !utf8.ValidString(s) {
		return Errorf(c, "%s is not valid UTF-8", what)
	}
	n := utf8.RuneCountInString(s)
	switch {
	case n > l.Max:
		return Errorf(c, "%s is too long: %d code points, at most %d", what, n, l.Max)
	case n < l.Min && l.Min == 1:
		return Errorf(c, "%s is empty", what)
	case n < l.Min:
		return Errorf(c, "%s is too short: %d code points, at least %d", what, n, l.Min)
	}
	return nil
}

// CheckItems returns an *Error with code c if an array of n items breaks l.
func (l Limit) CheckItems(c Code, what string, n int) error {
	if n > l.Max {
		return Errorf(c, "%s: %d items, at most %d", what, n, l.Max)
	}
	if n < l.Min {
		return Errorf(c, "%s: %d items, at least %d", what, n, l.Min)
	}
	return nil
}

func (l Limit) String() string { return fmt.Sprintf("%s ≤ %d %s", l.Name, l.Max, l.Unit) }

// Patterns are the contract's id patterns. Each is in the syntax that Go's
// regexp and ECMA-262 (JSON Schema's pattern) read alike; the schema and
// the limits artifact state them as written here.
var (
	ClientIDPattern      = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9_.:-]{%d,%d}$`, LimitClientID.Min, LimitClientID.Max))
	InteractionIDPattern = regexp.MustCompile(`^ix_[0-9a-f]{12}$`)
	MessageIDPattern     = regexp.MustCompile(`^MSG-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$`)
	ThreadPattern        = regexp.MustCompile(`^[0-9a-f]{16}$`)
	TokenPattern         = regexp.MustCompile(`^[0-9a-f]{64}$`)
	ShareTokenPattern    = regexp.MustCompile(`^chp_[A-Za-z0-9_-]{43}$`)
	ParticipantIDPattern = regexp.MustCompile(`^p_[0-9a-f]{8}$`)
	DeviceTokenPattern   = regexp.MustCompile(`^chd_[A-Za-z0-9_-]{43}$`)
	DeviceIDPattern      = regexp.MustCompile(`^d_[0-9a-f]{8}$`)
)

// Patterns lists the id patterns by the names the limits artifact gives
// them.
func Patterns() map[string]*regexp.Regexp {
	return map[string]*regexp.Regexp{
		"client_id": ClientIDPattern, "interaction_id": InteractionIDPattern, "message_id": MessageIDPattern,
		"thread": ThreadPattern, "token": TokenPattern, "participant_id": ParticipantIDPattern, "share_token": ShareTokenPattern,
		"attachment_id": AttachmentIDPattern,
		"device_id":     DeviceIDPattern, "device_token": DeviceTokenPattern,
	}
}

// CheckTitle returns TextTooLong for a thread title past LimitThreadTitle
// (refused, never truncated), and InvalidText for one that is not valid
// UTF-8 or holds a control character (a title is one line).
func CheckTitle(title string) error {
	if !utf8.ValidString(title) {
		return Errorf(InvalidText, "the title is not valid UTF-8")
	}
	for _, r := range title {
		if unicode.IsControl(r) {
			return Errorf(InvalidText, "the title is one line, with no control characters")
		}
	}
	if n := utf8.RuneCountInString(title); n > LimitThreadTitle.Max {
		return Errorf(TextTooLong, "the title is too long: %d code points, at most %d", n, LimitThreadTitle.Max)
	}
	return nil
}

// CheckNewTitle is CheckTitle for a title being written: one line that
// reads as written, so it also refuses a line or paragraph separator
// (U+2028, U+2029) and a bidi control (U+200E, U+200F, U+061C, U+202A …
// U+202E, U+2066 … U+2069), which would draw the words after it reversed
// in the page's header and the browser's tab. Other format characters
// (an emoji sequence's joiner, a flag's tags) are kept. A title stored
// before is read with CheckTitle.
func CheckNewTitle(title string) error {
	if err := CheckTitle(title); err != nil {
		return err
	}
	for _, r := range title {
		switch {
		case r == '\u2028' || r == '\u2029':
			return Errorf(InvalidText, "the title is one line, with no line or paragraph separator")
		case r == '\u200e' || r == '\u200f' || r == '\u061c' || r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069':
			return Errorf(InvalidText, "the title holds a bidi control (U+%04X), which would draw it otherwise than written", r)
		}
	}
	return nil
}

// CheckClientID returns InvalidClientID unless id matches ClientIDPattern
// ("" is no client_id, and passes).
func CheckClientID(id string) error {
	if id != "" && !ClientIDPattern.MatchString(id) {
		return Errorf(InvalidClientID, "client_id must match %s", ClientIDPattern)
	}
	return nil
}
