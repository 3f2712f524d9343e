package chatrelay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The JSON Schema bundle (contract Part 4, "The schema and the limits, as
// artifacts"): one draft 2020-12 document whose $defs describe every
// request body, every answer (errors included), every SSE data and
// WebSocket frame, every participant and interaction object, and every
// host verb's input and result. It is the normative form of the contract:
// the Go types are tested against it.
//
// It is written here by hand, as Go values, so that every maxLength,
// maxItems, minimum, maximum and pattern is taken from the limits table
// (limits.go) and the id patterns: a limit is changed in one place.
//
// Conventions:
//   - a verb's input is "<verb>.input" and its result "<verb>.result";
//     each input is self-contained (no $ref), so that an MCP tool's input
//     schema is exactly its $defs entry;
//   - the other entries refer to each other with $ref;
//   - "x-routes", "x-verbs" and "x-sse" at the root (annotations, which
//     validators ignore) say which entry describes what: a route's body and
//     its answers by status, an SSE event's data, a verb's input and result.

// SchemaVersion names this version of the bundle and of the limits
// artifact.
const SchemaVersion = "chatrelay.v2"

// SchemaDraft is the JSON Schema dialect of the bundle.
const SchemaDraft = "https://json-schema.org/draft/2020-12/schema"

// Schema returns the bundle, rendered: indented JSON with a final newline,
// the same bytes every time (GET /api/schema.json, chatrelay schema, and
// the committed schema/chatrelay.schema.json).
func Schema() []byte { return bytes.Clone(schemaBytes()) }

// SchemaDef returns the $defs entry name, rendered as compact JSON, and
// whether there is one.
func SchemaDef(name string) (json.RawMessage, bool) {
	d, ok := schemaDoc()["$defs"].(obj)[name]
	if !ok {
		return nil, false
	}
	return marshal(d), true
}

// SchemaDefNames lists the $defs entries, sorted.
func SchemaDefNames() []string {
	return slices.Sorted(maps.Keys(schemaDoc()["$defs"].(obj)))
}

// The host's verbs' names, as the MCP tools (chatrelay_<verb>) and the
// schema ($defs <verb>.input, <verb>.result) name them. Each verb's
// description, input and result are in the verb table (verbDefs).
const (
	VerbListThreads       = "list_threads"
	VerbReadThread        = "read_thread"
	VerbWaitMessages      = "wait_messages"
	VerbSend              = "send"
	VerbRequestInput      = "request_input"
	VerbRequestApproval   = "request_approval"
	VerbCheckInteraction  = "check_interaction"
	VerbWaitInteraction   = "wait_interaction"
	VerbCancelInteraction = "cancel_interaction"
	VerbReact             = "react"
	VerbSendCard          = "send_card"
)

// Verbs lists the host's verbs as the bundle names them, in the
// contract's order.
func Verbs() []string {
	var out []string
	for _, v := range verbDefs() {
		out = append(out, v.name)
	}
	return out
}

var (
	schemaDoc   = sync.OnceValue(buildSchema)
	schemaBytes = sync.OnceValue(func() []byte { return render(schemaDoc()) })
)

// render encodes v indented, without HTML escaping, with a final newline.
func render(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic("chatrelay: render: " + err.Error())
	}
	return b.Bytes()
}

// obj is a JSON object under construction; encoding/json writes its keys
// sorted, so the rendering is stable.
type obj = map[string]any

func ref(name string) obj { return obj{"$ref": "#/$defs/" + name} }

func describe(s obj, desc string) obj {
	if desc != "" {
		s["description"] = desc
	}
	return s
}

// object is a closed object: the properties listed, the required ones
// among them, and no other.
func object(desc string, props obj, required ...string) obj {
	for _, r := range required {
		if _, ok := props[r]; !ok {
			panic("chatrelay: schema: required " + r + " is not a property")
		}
	}
	if required == nil {
		required = []string{}
	}
	return describe(obj{"type": "object", "properties": props, "required": required, "additionalProperties": false}, desc)
}

// open is an object that may carry more properties than those listed
// (request bodies: the server ignores fields it does not know).
func open(desc string, props obj, required ...string) obj {
	o := object(desc, props, required...)
	delete(o, "additionalProperties")
	return o
}

// str is a string bounded by l (code points: JSON Schema's maxLength).
func str(l Limit, desc string) obj {
	if l.Unit != CodePoints {
		panic("chatrelay: schema: " + l.Name + " is not counted in code points")
	}
	s := obj{"type": "string", "maxLength": l.Max}
	if l.Min > 0 {
		s["minLength"] = l.Min
	}
	return describe(s, desc)
}

// text is a string bounded by l that holds more than white space.
func text(l Limit, desc string) obj {
	s := str(l, desc)
	s["pattern"] = `\S`
	return s
}

// array is an array of items bounded by l.
func array(l Limit, items any, desc string) obj {
	if l.Unit != Items {
		panic("chatrelay: schema: " + l.Name + " does not count items")
	}
	s := obj{"type": "array", "items": items, "maxItems": l.Max}
	if l.Min > 0 {
		s["minItems"] = l.Min
	}
	return describe(s, desc)
}

// list is an unbounded array.
func list(items any, desc string) obj {
	return describe(obj{"type": "array", "items": items}, desc)
}

// integer is an integer in [min, max] (max < 0: unbounded).
func integer(min, max int, desc string) obj {
	s := obj{"type": "integer", "minimum": min}
	if max >= 0 {
		s["maximum"] = max
	}
	return describe(s, desc)
}

func boolean(desc string) obj { return describe(obj{"type": "boolean"}, desc) }

func constant(v any) obj { return obj{"const": v} }

func enum(desc string, vals ...any) obj { return describe(obj{"enum": vals}, desc) }

func pattern(p interface{ String() string }, desc string) obj {
	return describe(obj{"type": "string", "pattern": p.String()}, desc)
}

func oneOf(desc string, alts ...any) obj { return describe(obj{"oneOf": alts}, desc) }

// withProps returns a copy of the closed object o with more properties.
func withProps(o obj, props obj, required ...string) obj {
	c := maps.Clone(o)
	p := maps.Clone(o["properties"].(obj))
	maps.Copy(p, props)
	c["properties"] = p
	c["required"] = append(slices.Clone(c["required"].([]string)), required...)
	return c
}

func epoch(desc string) obj {
	if desc == "" {
		desc = "milliseconds since the Unix epoch"
	}
	return integer(0, -1, desc)
}

// Patterns the bundle states that are not ids.
const (
	tsPattern     = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\+00:00$`
	authorPattern = `^(operator|agent|hermes|p:p_[0-9a-f]{8})$`
	// No white space, no control character. CheckEmoji also refuses the
	// invisible format characters but the joiner U+200D (and a flag's
	// tags): a pattern that says so would need \p{Cf} with U+200D set
	// apart, which no one regexp syntax of both Go and ECMA-262 spells,
	// or those characters written invisibly in the bundle, so the
	// description says it and the pattern is looser.
	emojiPattern = `^[^\s\x00-\x1f\x7f-\x9f]+$`
	linkPattern  = `^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+`
)

func codeStrings(codes []Code) []any {
	out := make([]any, len(codes))
	for i, c := range codes {
		out[i] = string(c)
	}
	return out
}

func buildSchema() obj {
	defs := obj{}
	add := func(name string, s obj) {
		if _, dup := defs[name]; dup {
			panic("chatrelay: schema: $defs " + name + " twice")
		}
		defs[name] = s
	}

	// Ids and scalars.
	add("thread", pattern(ThreadPattern, "a thread id: the first 16 hex characters of sha256(token)"))
	add("token", pattern(TokenPattern, "a thread token, sent as X-Chat-Token"))
	add("message_id", pattern(MessageIDPattern, "a message id"))
	add("interaction_id", pattern(InteractionIDPattern, "an interaction id"))
	add("client_id", pattern(ClientIDPattern, "an idempotency key: a repeat with the same client_id stores nothing and answers the first message again"))
	add("participant_id", pattern(ParticipantIDPattern, "a participant id"))
	add("share_token", pattern(ShareTokenPattern, "a share token, sent as Authorization: Bearer; shown once"))
	add("epoch", epoch(""))
	add("ts", describe(obj{"type": "string", "pattern": tsPattern}, "the epoch's second in RFC 3339, UTC, written +00:00"))
	add("author", describe(obj{"type": "string", "pattern": authorPattern}, "who wrote a message: operator, agent, hermes, or p:<participant id>"))
	add("emoji", describe(withPattern(str(LimitEmoji, ""), emojiPattern), "a reaction: 1 … 64 code points, no white space, control character or invisible format character (bidi controls, zero width spaces, U+FEFF; the joiner U+200D and a subdivision flag's tags are allowed)"))
	add("code", enum("an error's machine code", codeStrings(Codes())...))

	// Messages.
	v1 := obj{
		"id": ref("message_id"), "epoch": ref("epoch"), "ts": ref("ts"), "author": ref("author"),
		"text": text(LimitPostText, "the text; an interaction's readable rendering, or a card's fallback_text"),
	}
	add("message", object("the v1 message object: exactly these five fields", v1, "id", "epoch", "ts", "author", "text"))
	add("message.v2", withProps(object("the v2 message object: the v1 fields, rev, and the v2 fields the message has", v1,
		"id", "epoch", "ts", "author", "text"), obj{
		"rev":         epoch("the epoch of the message's latest change (its epoch if it never changed): the v2 cursor"),
		"author_name": str(LimitName, "a participant's name"),
		"client_id":   ref("client_id"),
		"interaction": ref("interaction"),
		"card":        ref("card"),
		"reactions":   ref("reactions"),
	}, "rev"))
	add("reactions", describe(obj{
		"type":                 "object",
		"propertyNames":        ref("emoji"),
		"additionalProperties": describe(obj{"type": "array", "items": ref("author"), "minItems": 1, "uniqueItems": true}, "the reactors, in the order they reacted"),
		"minProperties":        1,
	}, "each emoji with its reactors; absent when there is none"))

	// Interactions.
	add("choice", choice())
	add("detail", detail())
	ixCommon := obj{
		"id": ref("interaction_id"), "deadline": epoch("when it expires unanswered"),
		"answered_by": ref("author"), "answered_at": epoch("when it was answered, expired or canceled"),
	}
	add("interaction.approval", object("an approval: approve or deny before hermes acts", merge(ixCommon, obj{
		"type":       constant(string(Approval)),
		"title":      str(LimitApprovalTitle, "the tool or action"),
		"prompt":     text(LimitApprovalText, "the summary of what hermes would do"),
		"allow_text": constant(false),
		"details":    array(LimitDetails, ref("detail"), "labelled facts"),
		"state":      enum("", string(Pending), string(Approved), string(Denied), string(Expired), string(Canceled)),
		"answer": object("the decision", obj{
			"decision": enum("", Approve, Deny),
		}, "decision"),
	}), "id", "type", "prompt", "allow_text", "deadline", "state"))
	add("interaction.input", object("an input: one of the choices, or text when allow_text", merge(ixCommon, obj{
		"type":       constant(string(Input)),
		"title":      str(LimitInputTitle, ""),
		"prompt":     text(LimitInputPrompt, "the question"),
		"choices":    array(LimitChoices, ref("choice"), "the answers offered; values unique"),
		"allow_text": boolean("any text may answer, not only a choice"),
		"state":      enum("", string(Pending), string(Answered), string(Expired), string(Canceled)),
		"answer": object("the value", obj{
			"value": text(LimitAnswerValue, ""),
		}, "value"),
	}), "id", "type", "prompt", "allow_text", "deadline", "state"))
	add("interaction", oneOf("hermes asks a person: approval or input; pending, then exactly one final state",
		ref("interaction.approval"), ref("interaction.input")))

	// Cards.
	add("field", object("", obj{"label": str(LimitFieldLabel, ""), "value": str(LimitFieldValue, "")}, "label", "value"))
	add("block", cardBlock(ref("field")))
	add("card", card(ref("block")))

	// Participants (Part 3).
	roles := []any{"viewer", "commenter"}
	kinds := []any{"human", "agent"}
	add("participant", object("a grant: one participant, one role, until it expires or is revoked (never its token)", obj{
		"id": ref("participant_id"), "name": str(LimitName, "the cleaned name"),
		"kind": enum("", kinds...), "role": enum("", roles...),
		"created_at": ref("epoch"), "expires_at": ref("epoch"),
		"state": enum("a grant whose cap is spent stays active", "active", "revoked", "expired"),
		"cap":   count(LimitCap, "most messages the participant may ever post"),
		"sent":  integer(0, -1, "the participant's accepted posts"),
	}, "id", "name", "kind", "role", "created_at", "expires_at", "state", "cap", "sent"))
	add("participant.summary", object("an active grant as whoami lists it", obj{
		"id": ref("participant_id"), "name": str(LimitName, ""), "kind": enum("", kinds...), "role": enum("", roles...),
	}, "id", "name", "kind", "role"))
	add("audit.event", object("one audit record: never a token, a digest or a message text", obj{
		"at": ref("epoch"), "event": enum("", "issued", "revoked", "expired", "refused", "first_use"),
		"participant": ref("participant_id"), "code": ref("code"), "ip": describe(obj{"type": "string"}, "the client address"),
	}, "at", "event", "participant"))

	// Request bodies.
	add("post.body", open("POST "+PathPost+", and a participant's post (which carries no kind)", obj{
		"text":      text(LimitPostText, "the message; rejected, never truncated, past its limit"),
		"kind":      enum("operator (the default; null too) or agent; never hermes", string(Operator), string(Agent), nil),
		"client_id": oneOf("", ref("client_id"), obj{"type": "null"}),
	}, "text"))
	add("respond.body", oneOf("POST "+PathRespond+": a decision answers an approval, a value an input",
		open("", obj{"interaction_id": ref("interaction_id"), "decision": enum("", Approve, Deny)}, "interaction_id", "decision"),
		open("", obj{"interaction_id": ref("interaction_id"), "value": text(LimitAnswerValue, "a choice's value, or any text when allow_text")}, "interaction_id", "value"),
	))
	add("react.body", open("POST "+PathReact, obj{
		"message_id": ref("message_id"), "emoji": ref("emoji"), "remove": boolean("remove the reaction instead of adding it"),
	}, "message_id", "emoji"))
	add("participant.invite.body", open("POST "+PathParticipants, obj{
		"name":       describe(obj{"type": "string", "minLength": 1}, fmt.Sprintf("cleaned, then cut to %d code points; empty after cleaning is refused", LimitName.Max)),
		"role":       describe(enum("", roles...), "default viewer"),
		"kind":       describe(enum("", kinds...), "default human"),
		"expires_in": describe(integer(LimitExpiresIn.Min, LimitExpiresIn.Max, ""), fmt.Sprintf("seconds; default %d", int(DefaultExpiresIn/time.Second))),
		"cap":        describe(count(LimitCap, ""), fmt.Sprintf("most messages the participant may post; default %d", DefaultCap)),
	}, "name"))

	// Answers.
	retryable := []Code{}
	for _, c := range Codes() {
		if c.Retryable() {
			retryable = append(retryable, c)
		}
	}
	retryWords := ""
	for i, c := range retryable {
		switch {
		case i == 0:
		case i == len(retryable)-1:
			retryWords += " and "
		default:
			retryWords += ", "
		}
		retryWords += string(c)
	}
	add("error", describe(obj{
		"type": "object",
		"properties": obj{
			"success":        constant(false),
			"error":          describe(obj{"type": "string"}, "words for a person"),
			"code":           ref("code"),
			"retryable":      boolean("only " + retryWords + " are"),
			"retry_after_ms": integer(1, -1, "rate_limited: how long to wait"),
			"see":            constant(PathPost),
			"message":        ref("message.v2"),
		},
		"required":             []string{"success", "error", "code", "retryable"},
		"additionalProperties": false,
		"if":                   obj{"properties": obj{"code": enum("", codeStrings(retryable)...)}},
		"then":                 obj{"properties": obj{"retryable": constant(true)}},
		"else":                 obj{"properties": obj{"retryable": constant(false)}},
	}, "every error answer: see is on the retired route's 410, message on a 409 about a message"))
	ok := constant(true)
	add("post.answer", object("201 to a post", obj{
		"success": ok, "id": ref("message_id"), "epoch": ref("epoch"), "ts": ref("ts"), "thread": ref("thread"),
	}, "success", "id", "epoch", "ts", "thread"))
	add("poll.answer", object("200 to a v1 poll", obj{
		"success": ok, "thread": ref("thread"), "messages": list(ref("message"), "oldest first"),
		"awaiting": boolean("the last message was not written by hermes"), "cursor": epoch("the newest message's epoch; 0 for an empty thread"),
	}, "success", "thread", "messages", "awaiting", "cursor"))
	add("poll.v2.answer", object("200 to a v2 poll (v=2)", obj{
		"success": ok, "thread": ref("thread"), "messages": list(ref("message.v2"), "each message changed after since, oldest change first, in its current state"),
		"reset":    boolean("retention dropped a message changed after since: redraw"),
		"awaiting": boolean("the last message was not written by hermes"), "cursor": epoch("the thread's newest change"),
	}, "success", "thread", "messages", "reset", "awaiting", "cursor"))
	add("ticket.answer", object("201 to POST "+PathTicket, obj{
		"success": ok, "ticket": describe(obj{"type": "string", "minLength": 1}, "opaque; opens a stream with ?ticket="),
		"thread": ref("thread"), "expires_at": ref("epoch"),
	}, "success", "ticket", "thread", "expires_at"))
	messageAnswer := object("200: the v2 message in its current state", obj{"success": ok, "message": ref("message.v2")}, "success", "message")
	add("respond.answer", messageAnswer)
	add("react.answer", maps.Clone(messageAnswer))
	add("participant.invite.answer", object("201 to an invite: the token and the link are shown once", obj{
		"success": ok, "participant": ref("participant"), "token": ref("share_token"),
		"link": describe(obj{"type": "string", "pattern": `/p#chp_`}, "<base>/p#chp_…: the token only in the fragment"),
		"qr":   describe(obj{"type": "string", "pattern": `^data:image/png;base64,`}, "the link as a QR code, a PNG data URL (chatrelay's addition, for the page)"),
	}, "success", "participant", "token", "link"))
	add("participants.answer", object("200: every grant, newest first", obj{
		"success": ok, "participants": list(ref("participant"), ""),
	}, "success", "participants"))
	add("participant.revoke.answer", object("200 to a revoke (again: the same)", obj{
		"success": ok, "participant": ref("participant"),
	}, "success", "participant"))
	add("audit.answer", object("200: the audit, oldest first", obj{
		"success": ok, "events": list(ref("audit.event"), ""),
	}, "success", "events"))
	add("whoami.answer", object("200: who the caller is in the thread", obj{
		"success": ok, "thread": ref("thread"), "role": enum("", "owner", "viewer", "commenter"),
		"participant":  oneOf("the caller's grant; null for the owner", ref("participant"), obj{"type": "null"}),
		"participants": list(ref("participant.summary"), "the active grants"),
	}, "success", "thread", "role", "participant", "participants"))
	add("schema.answer", describe(obj{"$ref": SchemaDraft}, "GET "+PathSchema+": this bundle"))
	add("limits.answer", limitsAnswer())

	// SSE data.
	ready := obj{"thread": ref("thread"), "cursor": epoch("v1: the newest message's epoch; v2: the newest change's"), "awaiting": boolean("")}
	add("sse.ready", object("event: ready (no id), once the subscriber is registered", ready, "thread", "cursor", "awaiting"))
	add("sse.reset", object("event: reset: retention dropped messages after the cursor; redraw", obj{}))
	add("sse.revoked", object("event: revoked: the participant's grant ended; the stream closes", obj{
		"code": enum("", string(TokenRevoked), string(TokenExpired)),
	}, "code"))

	// WebSocket frames.
	add("ws.ready", withProps(object("the first frame, once registered", ready, "thread", "cursor", "awaiting"), obj{"type": constant("ready")}, "type"))
	add("ws.reset", object("retention dropped messages after the cursor; redraw", obj{"type": constant("reset")}, "type"))
	add("ws.message", object("a new message (v1)", obj{"type": constant("message"), "message": ref("message")}, "type", "message"))
	add("ws.v2.message", object("a message the client cannot have yet (v2)", obj{"type": constant("message"), "message": ref("message.v2")}, "type", "message"))
	add("ws.v2.update", object("a change of a message the client has (v2)", obj{"type": constant("update"), "message": ref("message.v2")}, "type", "message"))
	add("ws.posted", describe(withProps(defs["post.answer"].(obj), obj{
		"type": constant("posted"), "replayed": boolean("the client_id named a message already stored"),
	}, "type"), "the answer to a client's post frame"))
	errFrame := maps.Clone(defs["error"].(obj))
	errProps := maps.Clone(errFrame["properties"].(obj))
	errProps["type"] = constant("error")
	errFrame["properties"] = errProps
	errFrame["required"] = append(slices.Clone(errFrame["required"].([]string)), "type")
	add("ws.error", describe(errFrame, "the answer to a client frame that was refused"))
	add("ws.post", open("a client's frame: post over the socket (not with a ticket)", obj{
		"type": constant("post"), "text": text(LimitPostText, ""),
		"kind":      enum("", string(Operator), string(Agent), nil),
		"client_id": oneOf("", ref("client_id"), obj{"type": "null"}),
	}, "type", "text"))
	add("ws.frame", oneOf("any frame the server sends on a v1 socket",
		ref("ws.ready"), ref("ws.reset"), ref("ws.message"), ref("ws.posted"), ref("ws.error")))
	add("ws.v2.frame", oneOf("any frame the server sends on a v2 socket (v=2)",
		ref("ws.ready"), ref("ws.reset"), ref("ws.v2.message"), ref("ws.v2.update"), ref("ws.posted"), ref("ws.error")))

	// The host's verbs.
	for _, v := range verbDefs() {
		add(v.name+".input", describe(v.input, v.description))
		add(v.name+".result", v.result)
	}
	add("verb.error", object("a verb's refusal (an MCP tool error's structured content)", obj{
		"code": ref("code"), "error": describe(obj{"type": "string"}, "words for a person"), "retryable": boolean(""),
	}, "code", "error", "retryable"))

	return obj{
		"$schema":          SchemaDraft,
		"title":            "chatrelay",
		"description":      "The chatrelay wire contract (Parts 1-4) and the host's verbs, " + SchemaVersion + ". Every limit's unit is in GET " + PathLimits + ": maxLength counts code points.",
		"$defs":            defs,
		"x-schema-version": SchemaVersion,
		"x-routes":         xRoutes(),
		"x-sse":            sseEvents(),
		"x-ws":             obj{"v1": "ws.frame", "v2": "ws.v2.frame", "client": "ws.post"},
		"x-verbs":          verbMap(),
	}
}

// merge returns the properties of a and b.
func merge(a, b obj) obj {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

func withPattern(s obj, p string) obj {
	s["pattern"] = p
	return s
}

// count is an integer bounded by a Count limit.
func count(l Limit, desc string) obj {
	if l.Unit != Count {
		panic("chatrelay: schema: " + l.Name + " is not a count")
	}
	return integer(l.Min, l.Max, desc)
}

func choice() obj {
	return object("an answer an input offers", obj{
		"value": str(LimitChoiceValue, "what the answer is"), "label": str(LimitChoiceLabel, ""), "description": str(LimitChoiceDesc, ""),
	}, "value")
}

func detail() obj {
	return object("a labelled fact an approval shows", obj{"label": str(LimitDetailLabel, ""), "value": str(LimitDetailValue, "")}, "label", "value")
}

// cardBlock is a card's block; field is the schema of a fields block's
// field (a $ref, or the field itself where the schema must stand alone).
func cardBlock(field any) obj {
	return oneOf("a card's block: each type takes only its own fields",
		object("", obj{"type": constant(string(TextBlock)), "text": str(LimitBlockText, "")}, "type", "text"),
		object("", obj{"type": constant(string(FieldsBlock)), "fields": array(LimitFields, field, "")}, "type", "fields"),
		object("", obj{"type": constant(string(LinkBlock)), "url": withPattern(str(LimitLinkURL, "http or https only"), linkPattern), "label": str(LimitLinkLabel, "")}, "type", "url"),
		object("", obj{"type": constant(string(CodeBlock)), "text": str(LimitCodeText, ""), "language": str(LimitCodeLanguage, "")}, "type", "text"),
	)
}

// card is a card whose blocks are block.
func card(block any) obj {
	return object(fmt.Sprintf("hermes's card, drawn as text, never as HTML; at most %d bytes as UTF-8 JSON (%s)", LimitCard.Max, LimitCard.Unit), obj{
		"title":         str(LimitCardTitle, ""),
		"fallback_text": text(LimitCardFallback, "what a v1 client shows: the message's text"),
		"blocks":        array(LimitCardBlocks, block, ""),
	}, "fallback_text", "blocks")
}

func limitsAnswer() obj {
	units := []any{string(CodePoints), string(Bytes), string(JSONUTF8Bytes), string(Items), string(Seconds), string(Count)}
	limit := object("", obj{"min": integer(0, -1, ""), "max": integer(0, -1, ""), "unit": enum("", units...)}, "min", "max", "unit")
	names := obj{}
	for _, l := range Limits() {
		names[l.Name] = limit
	}
	return object("GET "+PathLimits+": every limit with its unit, the id patterns, the server's rate windows and retention", obj{
		"schema_version": constant(SchemaVersion),
		"limits":         object("", names, slices.Sorted(maps.Keys(names))...),
		"patterns":       describe(obj{"type": "object", "additionalProperties": obj{"type": "string"}}, "the id patterns, Go and ECMA-262 alike"),
		"rate_limits": object("the sliding rate windows over accepted posts (reactions have their own of the same sizes)", obj{
			"per_thread": integer(1, -1, ""), "per_ip": integer(1, -1, ""), "window_seconds": seconds(),
		}, "per_thread", "per_ip", "window_seconds"),
		"streams": object("open SSE and WebSocket streams", obj{
			"per_thread":              integer(1, -1, ""),
			"participants_per_thread": integer(0, -1, "of per_thread, the most that a thread's participants may hold together; the rest is kept for the owner"),
			"per_ip":                  integer(1, -1, ""),
		}, "per_thread", "participants_per_thread", "per_ip"),
		"retention": object("which messages a thread keeps", obj{
			"messages": integer(1, -1, "the newest N"), "age_seconds": seconds(),
		}, "messages", "age_seconds"),
	}, "schema_version", "limits", "patterns", "rate_limits", "streams", "retention")
}

// xRoutes is x-routes, from the route table (routes.go): each documented
// route's body and its answers by status (every error answer, 4xx or 5xx,
// is "error"), or the stream it opens and its view (x-sse, x-ws). A v1
// route also answers with a .php suffix, and the whole API may be mounted
// under a prefix.
func xRoutes() obj {
	r := obj{}
	for _, rt := range Routes() {
		if !rt.Documented() {
			continue
		}
		key := rt.Key()
		if rt.Stream != "" {
			r[key] = obj{"stream": rt.Stream, "view": "v1"}
			r[key+"?v=2"] = obj{"stream": rt.Stream, "view": "v2"}
			continue
		}
		r[key] = routeEntry(rt.Body, rt.Status, rt.Answer)
		if rt.AnswerV2 != "" {
			r[key+"?v=2"] = routeEntry(rt.Body, rt.Status, rt.AnswerV2)
		}
	}
	return r
}

func routeEntry(body string, status int, answer string) obj {
	answers := obj{}
	if answer != "" {
		answers[strconv.Itoa(status)] = answer
	}
	e := obj{"answers": answers}
	if body != "" {
		e["body"] = body
	}
	return e
}

func sseEvents() obj {
	v1 := obj{"ready": "sse.ready", "reset": "sse.reset", "message": "message", "revoked": "sse.revoked"}
	v2 := maps.Clone(v1)
	v2["message"], v2["update"] = "message.v2", "message.v2"
	return obj{"v1": v1, "v2": v2}
}

func verbMap() obj {
	m := obj{}
	for _, v := range Verbs() {
		m[v] = obj{"input": v + ".input", "result": v + ".result", "mcp": "chatrelay_" + v}
	}
	return m
}

// verbDef is a row of the verb table: a verb's name, what it does (its
// input's description, which an MCP tool shows), its input and its
// result.
type verbDef struct {
	name, description string
	input, result     obj
}

// verbDefs is the verb table, in the contract's order. Each input stands
// alone (no $ref): an MCP tool's input schema is exactly its $defs entry.
func verbDefs() []verbDef {
	thread := pattern(ThreadPattern, "the thread id (16 hex characters)")
	clientID := pattern(ClientIDPattern, "optional idempotency key: calling again with it stores nothing new and answers the first message")
	ixID := pattern(InteractionIDPattern, "the interaction id (ix_…)")
	wait := integer(LimitWaitTimeout.Min, LimitWaitTimeout.Max, fmt.Sprintf("seconds to wait, at most %d; 0 or absent: %d", LimitWaitTimeout.Max, LimitWaitTimeout.Max))
	timeout := func(l Limit, def time.Duration) obj {
		return integer(0, l.Max, fmt.Sprintf("seconds until the deadline, %d … %d; 0 or absent: %d", l.Min, l.Max, int(def/time.Second)))
	}
	messageResult := object("the v2 message written, and whether it was already stored under its client_id", obj{
		"message": ref("message.v2"), "replayed": boolean(""),
	}, "message")
	interactionResult := object("the interaction as it stands now (pending past its deadline reads expired) and its message", obj{
		"thread": ref("thread"), "message_id": ref("message_id"), "interaction": ref("interaction"),
		"replayed":  boolean("the client_id named an interaction already asked"),
		"timed_out": boolean("wait_interaction: still pending when the wait ended"),
	}, "thread", "message_id", "interaction")
	return []verbDef{
		{
			VerbListThreads, "List the threads, newest activity first, with whether each awaits hermes's answer.",
			object("", obj{}),
			object("", obj{"threads": list(object("", obj{
				"thread": ref("thread"), "messages": integer(0, -1, "messages kept"), "last_author": ref("author"),
				"last_epoch": epoch("the newest message's epoch"), "rev": epoch("the newest change's epoch"),
				"awaiting": boolean("the newest message is not hermes's"),
			}, "thread", "messages", "last_author", "last_epoch", "rev", "awaiting"), "")}, "threads"),
		},
		{
			VerbReadThread, "Read a thread's messages (v2 objects, with interactions, cards and reactions). No since: the newest messages; since: every message changed after that cursor.",
			object("", obj{
				"thread": thread,
				"since":  integer(0, -1, "a cursor from an earlier read (its cursor); 0 or absent: the newest messages"),
				"limit":  integer(0, -1, fmt.Sprintf("how many of the newest, without since; 0 or absent: %d", PollPage)),
			}, "thread"),
			object("", obj{
				"thread": ref("thread"), "messages": list(ref("message.v2"), "oldest change first"),
				"cursor": epoch("pass it back as since"), "awaiting": boolean("the newest message is not hermes's"),
				"reset": boolean("retention dropped changes after since"),
			}, "thread", "messages", "cursor", "awaiting", "reset"),
		},
		{
			VerbWaitMessages, "Wait until a thread (or any thread) has a message not written by hermes after a cursor, or the timeout. Returns at once if there is one. Without since, returns at once what hermes has not answered (in each thread, the messages after hermes's newest one), else waits for the next message.",
			object("", obj{
				"thread":  describe(pattern(ThreadPattern, ""), "the thread to watch; absent: every thread"),
				"since":   integer(0, -1, "an epoch cursor (a wait's or a read's cursor); 0 or absent: the messages hermes has not answered yet, else the next one"),
				"timeout": wait,
			}),
			object("the messages not by hermes after the cursor, oldest first (none if it timed out)", obj{
				"messages": list(object("", obj{"thread": ref("thread"), "message": ref("message.v2")}, "thread", "message"), ""),
				"cursor":   epoch("pass it back as since"), "timed_out": boolean(""),
			}, "messages", "cursor", "timed_out"),
		},
		{
			VerbSend, "Send a message to a thread as hermes.",
			object("", obj{
				"thread": thread, "text": text(LimitPostText, "the message; refused, never truncated, past its limit"), "client_id": clientID,
			}, "thread", "text"),
			messageResult,
		},
		{
			VerbRequestInput, "Ask the person a question: one of the choices, or any text when allow_text. Then wait for the answer with chatrelay_wait_interaction.",
			object("", obj{
				"thread": thread, "prompt": text(LimitInputPrompt, "the question"), "title": str(LimitInputTitle, ""),
				"choices":    array(LimitChoices, choice(), "the answers offered; values unique"),
				"allow_text": boolean("any text may answer, not only a choice"),
				"timeout":    timeout(LimitInputTimeout, DefaultInputTimeout), "client_id": clientID,
			}, "thread", "prompt"),
			interactionResult,
		},
		{
			VerbRequestApproval, "Ask the person to approve or deny before you act. Then wait for the decision with chatrelay_wait_interaction; act only if it is approved.",
			object("", obj{
				"thread": thread, "summary": text(LimitApprovalText, "what you would do, for the person to judge"),
				"title":   str(LimitApprovalTitle, "the tool or action"),
				"details": array(LimitDetails, detail(), "labelled facts"),
				"timeout": timeout(LimitApprovalTime, DefaultApprovalTimeout), "client_id": clientID,
			}, "thread", "summary"),
			interactionResult,
		},
		{
			VerbCheckInteraction, "An interaction's state and answer, now.",
			object("", obj{"thread": thread, "interaction_id": ixID}, "thread", "interaction_id"),
			interactionResult,
		},
		{
			VerbWaitInteraction, "Wait until an interaction is answered, expired or canceled, or the timeout (timed_out: still pending; call again).",
			object("", obj{
				"thread": thread, "interaction_id": ixID, "timeout": wait,
			}, "thread", "interaction_id"),
			interactionResult,
		},
		{
			VerbCancelInteraction, "Withdraw a pending interaction.",
			object("", obj{"thread": thread, "interaction_id": ixID}, "thread", "interaction_id"),
			interactionResult,
		},
		{
			VerbReact, "Add (or remove) hermes's reaction to a message.",
			object("", obj{
				"thread": thread, "message_id": pattern(MessageIDPattern, "the message id (MSG-…)"),
				"emoji":  withPattern(str(LimitEmoji, "the reaction, e.g. 👍"), emojiPattern),
				"remove": boolean("remove the reaction instead of adding it"),
			}, "thread", "message_id", "emoji"),
			messageResult,
		},
		{
			VerbSendCard, "Send a card: a title, fallback text and blocks (text, fields, link, code), drawn as text.",
			object("", obj{
				"thread": thread, "card": card(cardBlock(object("", obj{"label": str(LimitFieldLabel, ""), "value": str(LimitFieldValue, "")}, "label", "value"))),
				"client_id": clientID,
			}, "thread", "card"),
			messageResult,
		},
	}
}

func seconds() obj { return obj{"type": "number", "exclusiveMinimum": 0} }

// LimitsArtifact returns the limits artifact (GET /api/limits.json,
// chatrelay schema --limits): every limit of the table with its unit, the
// id patterns, and the rate windows, stream limits and retention given
// (zero fields: the defaults). Rendered like Schema.
func LimitsArtifact(w Windows, s StreamLimits, r Retention) []byte {
	w, s, r = w.WithDefaults(), s.WithDefaults(), r.WithDefaults()
	limits := obj{}
	for _, l := range Limits() {
		limits[l.Name] = obj{"min": l.Min, "max": l.Max, "unit": string(l.Unit)}
	}
	patterns := obj{}
	for name, p := range Patterns() {
		patterns[name] = p.String()
	}
	return render(obj{
		"schema_version": SchemaVersion,
		"limits":         limits,
		"patterns":       patterns,
		"rate_limits":    obj{"per_thread": w.PerThread, "per_ip": w.PerIP, "window_seconds": w.Window.Seconds()},
		"streams":        obj{"per_thread": s.PerThread, "participants_per_thread": s.Participants(), "per_ip": s.PerIP},
		"retention":      obj{"messages": r.Messages, "age_seconds": r.Age.Seconds()},
	})
}
