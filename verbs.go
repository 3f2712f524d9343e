package chatrelay

import (
	"fmt"
	"slices"
	"time"
)

// The verb table: the host's verbs, each with its name, its description,
// its input and its result, written once. The host implements them
// (host.Verbs), the MCP server serves them as tools, and the bundle's
// $defs and x-verbs are read from it.

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
	VerbOpenThread        = "open_thread"
)

// ToolName is the MCP tool of a verb: chatrelay_<verb>.
func ToolName(verb string) string { return "chatrelay_" + verb }

// Verbs lists the host's verbs as the bundle names them, in the
// contract's order.
func Verbs() []string {
	var out []string
	for _, v := range verbDefs() {
		out = append(out, v.name)
	}
	return out
}

func verbMap() obj {
	m := obj{}
	for _, v := range Verbs() {
		m[v] = obj{"input": v + ".input", "result": v + ".result", "mcp": ToolName(v)}
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
	v := newVerbParts()
	return slices.Concat(v.readVerbs(), v.askVerbs(), v.markVerbs(), v.openVerbs())
}

// verbParts are the schemas several verbs share.
type verbParts struct {
	thread, clientID, ixID, wait, messageResult, interactionResult, attachments obj
}

// AttachmentDataWords describes a tool's file data bounded by max bytes
// (the bundle's default; MCP over HTTP states its --max-attachment-bytes).
func AttachmentDataWords(max int64) string {
	return fmt.Sprintf("its bytes, base64 (at most %d bytes once decoded)", max)
}

func newVerbParts() verbParts {
	var v verbParts
	v.thread = pattern(ThreadPattern, "the thread id (16 hex characters)")
	v.clientID = pattern(ClientIDPattern, "optional idempotency key: calling again with it stores nothing new and answers the first message")
	v.ixID = pattern(InteractionIDPattern, "the interaction id (ix_…)")
	v.attachments = array(LimitAttachments, object("a file", obj{
		"name": describe(obj{"type": "string", "minLength": 1}, fmt.Sprintf("the file's name; cleaned, then cut to %d code points", LimitAttachmentName.Max)),
		"type": describe(obj{"type": "string"}, "its media type (default application/octet-stream)"),
		"data": describe(obj{"type": "string", "contentEncoding": "base64"}, AttachmentDataWords(int64(LimitAttachmentBytes.Max))),
	}, "name", "data"), "files the message carries (the text may then be empty)")
	v.wait = integer(LimitWaitTimeout.Min, LimitWaitTimeout.Max, fmt.Sprintf("seconds to wait, at most %d; 0 or absent: %d", LimitWaitTimeout.Max, LimitWaitTimeout.Max))
	v.messageResult = object("the v2 message written, and whether it was already stored under its client_id", obj{
		"message": ref("message.v2"), "replayed": boolean(""),
	}, "message")
	v.interactionResult = object("the interaction as it stands now (pending past its deadline reads expired) and its message", obj{
		"thread": ref("thread"), "message_id": ref("message_id"), "interaction": ref("interaction"),
		"replayed":  boolean("the client_id named an interaction already asked"),
		"timed_out": boolean("wait_interaction: still pending when the wait ended"),
	}, "thread", "message_id", "interaction")
	return v
}

// timeout is an interaction's timeout, bounded by l, def by default.
func timeout(l Limit, def time.Duration) obj {
	return integer(0, l.Max, fmt.Sprintf("seconds until the deadline, %d … %d; 0 or absent: %d", l.Min, l.Max, int(def/time.Second)))
}

// readVerbs are the verbs that read: list_threads, read_thread, wait_messages.
func (v verbParts) readVerbs() []verbDef {
	return []verbDef{
		{
			VerbListThreads, "List the threads, newest activity first, with whether each awaits hermes's answer.",
			object("", obj{}),
			object("", obj{"threads": list(object("", obj{
				"thread": ref("thread"), "messages": integer(0, -1, "messages kept"), "last_author": ref("author"),
				"last_epoch": epoch("the newest message's epoch"), "rev": epoch("the newest change's epoch"),
				"awaiting": boolean("the newest message is not hermes's"),
				"title":    str(LimitThreadTitle, "the thread's title (open_thread), if it has one"),
			}, "thread", "messages", "last_author", "last_epoch", "rev", "awaiting"), ""),
				"unreadable": list(object("", obj{"thread": ref("thread"), "code": ref("code")}, "thread", "code"),
					"the threads left out because their stored data cannot be read (thread_unreadable, or store_unavailable for a file the store cannot open or read), as a read of one would answer; absent if none"),
			}, "threads"),
		},
		{
			VerbReadThread, "Read a thread's messages (v2 objects, with interactions, cards and reactions). No since: the newest messages; since: every message changed after that cursor.",
			object("", obj{
				"thread": v.thread,
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
				"timeout": v.wait,
			}),
			object("the messages not by hermes after the cursor, oldest first (none if it timed out)", obj{
				"messages": list(object("", obj{"thread": ref("thread"), "message": ref("message.v2")}, "thread", "message"), ""),
				"cursor":   epoch("pass it back as since"), "timed_out": boolean(""),
			}, "messages", "cursor", "timed_out"),
		},
	}
}

// askVerbs are send and the interactions' verbs.
func (v verbParts) askVerbs() []verbDef {
	return []verbDef{
		{
			VerbSend, "Send a message to a thread as hermes.",
			object("", obj{
				"thread": v.thread, "text": str(Limit{LimitPostText.Name, 0, LimitPostText.Max, CodePoints}, "the message; refused, never truncated, past its limit; may be empty with attachments"), "client_id": v.clientID,
				"attachments": v.attachments,
			}, "thread", "text"),
			v.messageResult,
		},
		{
			VerbRequestInput, "Ask the person a question: one of the choices, or any text when allow_text. Then wait for the answer with chatrelay_wait_interaction.",
			object("", obj{
				"thread": v.thread, "prompt": text(LimitInputPrompt, "the question"), "title": str(LimitInputTitle, ""),
				"choices":    array(LimitChoices, choice(), "the answers offered; values unique"),
				"allow_text": boolean("any text may answer, not only a choice"),
				"timeout":    timeout(LimitInputTimeout, DefaultInputTimeout), "client_id": v.clientID,
				"attachments": v.attachments,
			}, "thread", "prompt"),
			v.interactionResult,
		},
		{
			VerbRequestApproval, "Ask the person to approve or deny before you act. Then wait for the decision with chatrelay_wait_interaction; act only if it is approved.",
			object("", obj{
				"thread": v.thread, "summary": text(LimitApprovalText, "what you would do, for the person to judge"),
				"title":   str(LimitApprovalTitle, "the tool or action"),
				"details": array(LimitDetails, detail(), "labelled facts"),
				"timeout": timeout(LimitApprovalTime, DefaultApprovalTimeout), "client_id": v.clientID,
				"attachments": v.attachments,
			}, "thread", "summary"),
			v.interactionResult,
		},
		{
			VerbCheckInteraction, "An interaction's state and answer, now.",
			object("", obj{"thread": v.thread, "interaction_id": v.ixID}, "thread", "interaction_id"),
			v.interactionResult,
		},
		{
			VerbWaitInteraction, "Wait until an interaction is answered, expired or canceled, or the timeout (timed_out: still pending; call again).",
			object("", obj{
				"thread": v.thread, "interaction_id": v.ixID, "timeout": v.wait,
			}, "thread", "interaction_id"),
			v.interactionResult,
		},
		{
			VerbCancelInteraction, "Withdraw a pending interaction.",
			object("", obj{"thread": v.thread, "interaction_id": v.ixID}, "thread", "interaction_id"),
			v.interactionResult,
		},
	}
}

// markVerbs are react and send_card.
func (v verbParts) markVerbs() []verbDef {
	return []verbDef{
		{
			VerbReact, "Add (or remove) hermes's reaction to a message.",
			object("", obj{
				"thread": v.thread, "message_id": pattern(MessageIDPattern, "the message id (MSG-…)"),
				"emoji":  withPattern(str(LimitEmoji, "the reaction, e.g. 👍"), emojiPattern),
				"remove": boolean("remove the reaction instead of adding it"),
			}, "thread", "message_id", "emoji"),
			v.messageResult,
		},
		{
			VerbSendCard, "Send a card: a title, fallback text and blocks (text, fields, link, code), drawn as text.",
			object("", obj{
				"thread": v.thread, "card": card(cardBlock(object("", obj{"label": str(LimitFieldLabel, ""), "value": str(LimitFieldValue, "")}, "label", "value"))),
				"client_id": v.clientID, "attachments": v.attachments,
			}, "thread", "card"),
			v.messageResult,
		},
	}
}

// openVerbs are the verbs of Part 5: open_thread, hermes starts a
// conversation.
func (v verbParts) openVerbs() []verbDef {
	return []verbDef{
		{
			VerbOpenThread, "Start a new conversation: a new thread with hermes's first message (text, else title), and its claim link. Whoever opens the link first holds the thread; give the link to the person once (it is not kept anywhere).",
			object("at least one of title and text", obj{
				"title":     str(LimitThreadTitle, "the thread's title, shown in the page's header and in list"),
				"text":      text(LimitPostText, "hermes's first message; absent: the title"),
				"client_id": pattern(ClientIDPattern, "optional idempotency key: calling again with it (the same caller: the host, or one agent key) opens nothing new and answers the same thread and link; another title or text with it is client_id_conflict"),
			}),
			object("", obj{
				"thread":   ref("thread"),
				"link":     describe(obj{"type": "string"}, "the claim link, <base>/#t=<token> (the server's public URL; without one the path alone, /#t=<token>)"),
				"replayed": boolean("the client_id named a thread already opened: nothing new was made"),
			}, "thread", "link"),
		},
	}
}
