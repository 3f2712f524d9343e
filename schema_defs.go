package chatrelay

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// The bundle's $defs, section by section (buildSchema, schema.go).

// ids adds the $defs entries: ids and scalars.
func (d defSet) ids() {
	d.add("thread", pattern(ThreadPattern, "a thread id: the first 16 hex characters of sha256(token)"))
	d.add("token", pattern(TokenPattern, "a thread token, sent as X-Chat-Token"))
	d.add("message_id", pattern(MessageIDPattern, "a message id"))
	d.add("interaction_id", pattern(InteractionIDPattern, "an interaction id"))
	d.add("client_id", pattern(ClientIDPattern, "an idempotency key: a repeat with the same client_id stores nothing and answers the first message again"))
	d.add("participant_id", pattern(ParticipantIDPattern, "a participant id"))
	d.add("share_token", pattern(ShareTokenPattern, "a share token, sent as Authorization: Bearer; shown once"))
	d.add("attachment_id", pattern(AttachmentIDPattern, "an attachment id: an upload of the thread, named once by a post"))
	d.add("device_id", pattern(DeviceIDPattern, "a device id"))
	d.add("device_token", pattern(DeviceTokenPattern, "a device token, sent as Authorization: Bearer; shown once"))
	d.add("epoch", epoch(""))
	d.add("ts", describe(obj{"type": "string", "pattern": tsPattern}, "the epoch's second in RFC 3339, UTC, written +00:00"))
	d.add("author", describe(obj{"type": "string", "pattern": authorPattern}, "who wrote a message: operator, agent, hermes, or p:<participant id>"))
	d.add("emoji", describe(withPattern(str(LimitEmoji, ""), emojiPattern), fmt.Sprintf("a reaction: %d … %d code points, no white space, control character or invisible format character (bidi controls, zero width spaces, U+FEFF; the joiner U+200D and a subdivision flag's tags are allowed)", LimitEmoji.Min, LimitEmoji.Max)))
	d.add("code", enum("an error's machine code", codeStrings(Codes())...))
}

// messages adds the $defs entries: messages.
func (d defSet) messages() {
	v1 := obj{
		"id": ref("message_id"), "epoch": ref("epoch"), "ts": ref("ts"), "author": ref("author"),
		"text": text(LimitPostText, "the text; an interaction's readable rendering, or a card's fallback_text"),
	}
	d.add("message", object("the v1 message object: exactly these five fields", v1, "id", "epoch", "ts", "author", "text"))
	d.add("message.v2", textMayBeEmpty(withProps(object("the v2 message object: the v1 fields, rev, and the v2 fields the message has", v1,
		"id", "epoch", "ts", "author", "text"), obj{
		"rev":         epoch("the epoch of the message's latest change (its epoch if it never changed): the v2 cursor"),
		"author_name": str(LimitName, "a participant's name; on a hermes message, the name of the agent key it was written with (MCP over HTTP, Part 5)"),
		"client_id":   ref("client_id"),
		"interaction": ref("interaction"),
		"card":        ref("card"),
		"reactions":   ref("reactions"),
		"attachments": array(LimitAttachments, ref("attachment"), "the files the post named, in its order"),
	}, "rev"), "attachments"))
	d.add("attachment", object("an attachment: an uploaded file (Part 5); GET "+PathAttachments+"/{id} serves its bytes", obj{
		"id":     ref("attachment_id"),
		"name":   str(LimitAttachmentName, "the file's name, cleaned as a participant's name"),
		"type":   describe(obj{"type": "string"}, "the media type the uploader sent (how it is served is decided from the bytes)"),
		"size":   integer(0, LimitThreadAttachments.Max, fmt.Sprintf("bytes: at most the server's --max-attachment-bytes (default %d; limits.json states it)", LimitAttachmentBytes.Max)),
		"sha256": describe(obj{"type": "string", "pattern": "^[0-9a-f]{64}$"}, "the SHA-256 of the bytes, lowercase hex"),
		"width":  integer(1, -1, "an image's width in pixels, read from its header"),
		"height": integer(1, -1, "an image's height in pixels, read from its header"),
	}, "id", "name", "type", "size", "sha256"))
	d.add("reactions", describe(obj{
		"type":                 "object",
		"propertyNames":        ref("emoji"),
		"additionalProperties": describe(obj{"type": "array", "items": ref("author"), "minItems": 1, "uniqueItems": true}, "the reactors, in the order they reacted"),
		"minProperties":        1,
	}, "each emoji with its reactors; absent when there is none"))
}

// interactions adds the $defs entries: interactions.
func (d defSet) interactions() {
	d.add("choice", choice())
	d.add("detail", detail())
	ixCommon := obj{
		"id": ref("interaction_id"), "deadline": epoch("when it expires unanswered"),
		"answered_by": ref("author"), "answered_at": epoch("when it was answered, expired or canceled"),
	}
	d.add("interaction.approval", object("an approval: approve or deny before hermes acts", merge(ixCommon, obj{
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
	d.add("interaction.input", object("an input: one of the choices, or text when allow_text", merge(ixCommon, obj{
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
	d.add("interaction", oneOf("hermes asks a person: approval or input; pending, then exactly one final state",
		ref("interaction.approval"), ref("interaction.input")))
}

// cards adds the $defs entries: cards.
func (d defSet) cards() {
	d.add("field", object("", obj{"label": str(LimitFieldLabel, ""), "value": str(LimitFieldValue, "")}, "label", "value"))
	d.add("block", cardBlock(ref("field")))
	d.add("card", card(ref("block")))
}

// participants adds the $defs entries: participants (Part 3).
func (d defSet) participants() {
	roles, kinds := participantRoles(), participantKinds()
	d.add("participant", object("a grant: one participant, one role, until it expires or is revoked (never its token)", obj{
		"id": ref("participant_id"), "name": str(LimitName, "the cleaned name"),
		"kind": enum("", kinds...), "role": enum("", roles...),
		"created_at": ref("epoch"), "expires_at": ref("epoch"),
		"state": enum("a grant whose cap is spent stays active", "active", "revoked", "expired"),
		"cap":   count(LimitCap, "most messages the participant may ever post"),
		"sent":  integer(0, -1, "the participant's accepted posts"),
	}, "id", "name", "kind", "role", "created_at", "expires_at", "state", "cap", "sent"))
	d.add("participant.summary", object("an active grant as whoami lists it", obj{
		"id": ref("participant_id"), "name": str(LimitName, ""), "kind": enum("", kinds...), "role": enum("", roles...),
	}, "id", "name", "kind", "role"))
	d.add("audit.event", oneOf("one audit record: never a token, a digest or a message text; a participant's or a device's",
		object("a participant's event", obj{
			"at": ref("epoch"), "event": enum("", "issued", "revoked", "expired", "refused", "first_use", "upload"),
			"participant": ref("participant_id"), "code": ref("code"), "ip": describe(obj{"type": "string"}, "the client address"),
		}, "at", "event", "participant"),
		object("a device's event (Part 5)", obj{
			"at": ref("epoch"), "event": enum("", "device_issued", "device_revoked", "device_expired", "device_first_use"),
			"device": ref("device_id"), "ip": describe(obj{"type": "string"}, "the client address"),
		}, "at", "event", "device")))
	d.add("device", object("one of the owner's devices (Part 5; never its token)", obj{
		"id": ref("device_id"), "name": str(LimitName, "the cleaned name"),
		"created_at": ref("epoch"), "expires_at": ref("epoch"),
		"last_seen": epoch(fmt.Sprintf("its latest request, to %v; absent before its first", DefaultDeviceSeen)),
		"state":     enum("", "active", "revoked", "expired"),
	}, "id", "name", "created_at", "expires_at", "state"))
}

// bodies adds the $defs entries: request bodies.
func (d defSet) bodies() {
	d.add("post.body", withAttachments(open("POST "+PathPost+", and a participant's post (which carries no kind)", obj{
		"text":      text(LimitPostText, "the message; rejected, never truncated, past its limit"),
		"kind":      enum("operator (the default; null too) or agent; never hermes", string(Operator), string(Agent), nil),
		"client_id": oneOf("", ref("client_id"), obj{"type": "null"}),
	}, "text")))
	d.add("respond.body", oneOf("POST "+PathRespond+": a decision answers an approval, a value an input",
		open("", obj{"interaction_id": ref("interaction_id"), "decision": enum("", Approve, Deny)}, "interaction_id", "decision"),
		open("", obj{"interaction_id": ref("interaction_id"), "value": text(LimitAnswerValue, "a choice's value, or any text when allow_text")}, "interaction_id", "value"),
	))
	d.add("react.body", open("POST "+PathReact, obj{
		"message_id": ref("message_id"), "emoji": ref("emoji"), "remove": boolean("remove the reaction instead of adding it"),
	}, "message_id", "emoji"))
	d.add("device.issue.body", open("POST "+PathDevices, obj{
		"name": describe(obj{"type": "string", "minLength": 1}, fmt.Sprintf("cleaned as a participant's, then cut to %d code points; empty after cleaning is refused", LimitName.Max)),
		"expires_in": describe(obj{"type": "integer", "minimum": LimitDeviceExpiresIn.Min, "maximum": LimitDeviceExpiresIn.Max},
			fmt.Sprintf("seconds; default %d", int(DefaultDeviceExpiresIn/time.Second))),
	}, "name"))
	d.add("participant.invite.body", open("POST "+PathParticipants, obj{
		"name":       describe(obj{"type": "string", "minLength": 1}, fmt.Sprintf("cleaned, then cut to %d code points; empty after cleaning is refused", LimitName.Max)),
		"role":       describe(enum("", participantRoles()...), "default "+string(Commenter)),
		"kind":       describe(enum("", participantKinds()...), "default human"),
		"expires_in": describe(integer(LimitExpiresIn.Min, LimitExpiresIn.Max, ""), fmt.Sprintf("seconds; default %d", int(DefaultExpiresIn/time.Second))),
		"cap":        describe(count(LimitCap, ""), fmt.Sprintf("most messages the participant may post; default %d", DefaultCap)),
	}, "name"))
}

// answers adds the $defs entries: answers.
func (d defSet) answers() {
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
	d.add("error", describe(obj{
		"type": "object",
		"properties": obj{
			"success":        constant(false),
			"error":          describe(obj{"type": "string"}, "words for a person"),
			"code":           ref("code"),
			"retryable":      boolean("only " + retryWords + " are"),
			"retry_after_ms": integer(1, -1, string(RateLimited)+": how long to wait"),
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
	d.add("post.answer", object("201 to a post", obj{
		"success": ok, "id": ref("message_id"), "epoch": ref("epoch"), "ts": ref("ts"), "thread": ref("thread"),
	}, "success", "id", "epoch", "ts", "thread"))
	d.add("poll.answer", object("200 to a v1 poll", obj{
		"success": ok, "thread": ref("thread"), "messages": list(ref("message"), "oldest first"),
		"awaiting": boolean("the last message was not written by hermes"), "cursor": epoch("the newest message's epoch; 0 for an empty thread"),
	}, "success", "thread", "messages", "awaiting", "cursor"))
	d.add("poll.v2.answer", object("200 to a v2 poll (v=2)", obj{
		"success": ok, "thread": ref("thread"), "messages": list(ref("message.v2"), "each message changed after since, oldest change first, in its current state"),
		"title":    str(LimitThreadTitle, "the thread's title, when it has one (open_thread)"),
		"reset":    boolean("retention dropped a message changed after since: redraw"),
		"awaiting": boolean("the last message was not written by hermes"), "cursor": epoch("the thread's newest change"),
	}, "success", "thread", "messages", "reset", "awaiting", "cursor"))
	d.add("attachment.answer", answer("201 to an upload (POST "+PathAttachments+")", "attachment", ref("attachment")))
	d.add("ticket.body", object("POST "+PathTicket+" (optional: no body asks for the thread's ticket; any member but attachment is refused, since a misspelled one would ask for no file)", obj{
		"attachment": describe(ref("attachment_id"), "ask for a file ticket: it opens this one attachment's bytes, and no stream, poll or other file"),
	}))
	d.add("ticket.answer", object("201 to POST "+PathTicket, obj{
		"success": ok, "ticket": describe(obj{"type": "string", "minLength": 1}, "opaque; a thread's ticket opens a stream with ?ticket=, a file ticket its one attachment"),
		"thread": ref("thread"), "expires_at": ref("epoch"),
		"attachment": describe(ref("attachment_id"), "the one file a file ticket opens; absent for a thread's ticket"),
	}, "success", "ticket", "thread", "expires_at"))
	messageAnswer := answer("200: the v2 message in its current state", "message", ref("message.v2"))
	d.add("respond.answer", messageAnswer)
	d.add("react.answer", maps.Clone(messageAnswer))
	d.add("participant.invite.answer", linkAnswer("201 to an invite: the token and the link are shown once", "participant", "share_token", "/p#chp_"))
	d.add("participants.answer", answer("200: every grant, newest first", "participants", list(ref("participant"), "")))
	d.add("participant.revoke.answer", answer("200 to a revoke (again: the same)", "participant", ref("participant")))
	d.add("audit.answer", answer("200: the audit, oldest first", "events", list(ref("audit.event"), "")))
	d.add("whoami.answer", object("200: who the caller is in the thread", obj{
		"success": ok, "thread": ref("thread"), "role": enum("", "owner", "viewer", "commenter"),
		"participant":  oneOf("the caller's grant; null for the owner", ref("participant"), obj{"type": "null"}),
		"device":       describe(ref("device"), "the owner's device the caller is (Part 5); absent otherwise"),
		"participants": list(ref("participant.summary"), "the active grants"),
	}, "success", "thread", "role", "participant", "participants"))
	d.add("device.issue.answer", linkAnswer("201 to POST "+PathDevices+": the token and the link are shown once", "device", "device_token", "/d#chd_"))
	d.add("devices.answer", answer("200: every device, newest first, revoked and expired ones included", "devices", list(ref("device"), "")))
	d.add("device.revoke.answer", answer("200 to a revoke (again: the same)", "device", ref("device")))
	d.add("schema.answer", describe(obj{"$ref": SchemaDraft}, "GET "+PathSchema+": this bundle"))
	d.add("limits.answer", limitsAnswer())
}

// sse adds the $defs entries: sSE data.
func (d defSet) sse() {
	d.add("sse.ready", object("event: ready (no id), once the subscriber is registered", readyProps(), "thread", "cursor", "awaiting"))
	d.add("sse.reset", object("event: reset: retention dropped messages after the cursor; redraw", obj{}))
	d.add("sse.revoked", object("event: revoked: the participant's grant ended; the stream closes", obj{
		"code": enum("", string(TokenRevoked), string(TokenExpired)),
	}, "code"))
}

// ws adds the $defs entries: webSocket frames.
func (d defSet) ws() {
	d.add("ws.ready", withProps(object("the first frame, once registered", readyProps(), "thread", "cursor", "awaiting"), obj{"type": constant("ready")}, "type"))
	d.add("ws.reset", object("retention dropped messages after the cursor; redraw", obj{"type": constant("reset")}, "type"))
	d.add("ws.message", object("a new message (v1)", obj{"type": constant("message"), "message": ref("message")}, "type", "message"))
	d.add("ws.v2.message", object("a message the client cannot have yet (v2)", obj{"type": constant("message"), "message": ref("message.v2")}, "type", "message"))
	d.add("ws.v2.update", object("a change of a message the client has (v2)", obj{"type": constant("update"), "message": ref("message.v2")}, "type", "message"))
	d.add("ws.posted", describe(withProps(d["post.answer"].(obj), obj{
		"type": constant("posted"), "replayed": boolean("the client_id named a message already stored"),
	}, "type"), "the answer to a client's post frame"))
	errFrame := maps.Clone(d["error"].(obj))
	errProps := maps.Clone(errFrame["properties"].(obj))
	errProps["type"] = constant("error")
	errFrame["properties"] = errProps
	errFrame["required"] = append(slices.Clone(errFrame["required"].([]string)), "type")
	d.add("ws.error", describe(errFrame, "the answer to a client frame that was refused"))
	d.add("ws.post", withAttachments(open("a client's frame: post over the socket (not with a ticket); at most post.body bytes, as a POST's body", obj{
		"type": constant("post"), "text": text(LimitPostText, ""),
		"kind":      enum("", string(Operator), string(Agent), nil),
		"client_id": oneOf("", ref("client_id"), obj{"type": "null"}),
	}, "type", "text")))
	d.add("ws.frame", oneOf("any frame the server sends on a v1 socket",
		ref("ws.ready"), ref("ws.reset"), ref("ws.message"), ref("ws.posted"), ref("ws.error")))
	d.add("ws.v2.frame", oneOf("any frame the server sends on a v2 socket (v=2)",
		ref("ws.ready"), ref("ws.reset"), ref("ws.v2.message"), ref("ws.v2.update"), ref("ws.posted"), ref("ws.error")))
}

// verbs adds the $defs entries: the host's verbs.
func (d defSet) verbs() {
	for _, v := range verbDefs() {
		d.add(v.name+".input", describe(v.input, v.description))
		d.add(v.name+".result", v.result)
	}
	d.add("verb.error", object("a verb's refusal (an MCP tool error's structured content)", obj{
		"code": ref("code"), "error": describe(obj{"type": "string"}, "words for a person"), "retryable": boolean(""),
		"retry_after_ms": integer(1, -1, string(RateLimited)+", "+string(TooManyStreams)+": how long to wait before calling again"),
	}, "code", "error", "retryable"))
}

func participantRoles() []any { return []any{"viewer", "commenter"} }

func participantKinds() []any { return []any{"human", "agent"} }

// readyProps are the properties of a stream's ready event and frame.
func readyProps() obj {
	return obj{"thread": ref("thread"), "cursor": epoch("v1: the newest message's epoch; v2: the newest change's"), "awaiting": boolean("")}
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
		"mcp": object("the bounds of MCP over HTTP (serve --mcp), per node", obj{
			"sessions":         integer(1, -1, "open sessions"),
			"sessions_per_key": integer(1, -1, "open sessions of one agent key"),
			"calls_per_key":    integer(1, -1, "tool calls of one agent key in flight, its sessions together"),
			"idle_seconds":     seconds(),
		}, "sessions", "sessions_per_key", "calls_per_key", "idle_seconds"),
	}, "schema_version", "limits", "patterns", "rate_limits", "streams", "retention", "mcp")
}

// withAttachments adds a post's "attachments" to the body b: with at least
// one, its text may be empty (or white space).
func withAttachments(b obj) obj {
	return textMayBeEmpty(withProps(b, obj{"attachments": array(LimitAttachments, ref("attachment_id"), "uploads of the thread (POST "+PathAttachments+"), each named by one post only")}), "attachments")
}

// textMayBeEmpty returns a copy of o whose "text" may be empty (or white
// space) when its array property list has an item.
func textMayBeEmpty(o obj, list string) obj {
	c := maps.Clone(o)
	props := maps.Clone(c["properties"].(obj))
	t := maps.Clone(props["text"].(obj))
	delete(t, "pattern")
	delete(t, "minLength")
	props["text"] = t
	c["properties"] = props
	c["anyOf"] = []any{
		obj{"properties": obj{"text": obj{"minLength": 1, "pattern": `\S`}}},
		obj{"required": []string{list}, "properties": obj{list: obj{"minItems": 1}}},
	}
	return c
}
