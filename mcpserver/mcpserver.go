// Package mcpserver serves the host's verbs (package host) over the Model
// Context Protocol, with the official Go SDK: each verb of the contract's
// table is a tool named chatrelay_<verb>, whose input schema is the JSON
// Schema bundle's <verb>.input entry, taken as it is, never written again,
// and whose output schema is made of its <verb>.result and verb.error
// entries (OutputSchema). A result is both structured content (the verb's
// result, as the CLI prints it) and a short text for the model; a refusal
// is a tool error carrying the contract's code.
//
// The verbs are package host's, implemented once: this package only binds
// them (arguments in, results and errors out), as cmd/chatrelay binds them
// to the command line.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
)

// Instructions tell an agent, in a few lines, how to use the tools (MCP
// "instructions", sent when a client connects).
var Instructions = `chatrelay connects you (as "hermes") to people chatting in browser threads.
- Find work: chatrelay_list_threads (awaiting: true means a person waits for you), then chatrelay_read_thread; pass its cursor back as since to read only what changed.
- Answer: chatrelay_send. Give a client_id when you might retry, so a retry never posts twice.
- Before an action with consequences (deploying, deleting, spending, writing outside the chat), ask first: chatrelay_request_approval with a one-line summary, then chatrelay_wait_interaction; act only if the state is approved. denied, expired or canceled means do not act.
- To ask a question: chatrelay_request_input (choices and/or allow_text), then chatrelay_wait_interaction for the answer.
- To wait for the person: chatrelay_wait_messages. Without since it returns at once what you have not answered yet, else it blocks until the next message; pass its cursor back as since next time. It blocks up to its timeout (at most ` + strconv.Itoa(chatrelay.LimitWaitTimeout.Max) + ` s); timed_out means call it again.
- Errors carry a code (` + string(chatrelay.TextTooLong) + `, ` + string(chatrelay.NotFound) + `, ` + string(chatrelay.InvalidInteraction) + `, …): fix the arguments rather than retrying the same call.`

// Name and Version identify the server to clients.
const (
	Name    = "chatrelay"
	Version = chatrelay.SchemaVersion
)

// DefaultProgressEvery is how often a wait reports its progress.
const DefaultProgressEvery = 10 * time.Second

// Options tune a server. The zero value (or nil) is the defaults.
type Options struct {
	// Log receives the causes of internal errors (a client only sees
	// "internal error"). Defaults to discarding them.
	Log *slog.Logger
	// ProgressEvery is how often a wait (wait_messages, wait_interaction)
	// sends notifications/progress to a call that carries a progressToken,
	// so that a client whose request timeout is shorter than the wait, and
	// that resets it on progress, keeps waiting. Defaults to
	// DefaultProgressEvery.
	ProgressEvery time.Duration
	// Call, if set, wraps every tool call: it may refuse the call (its
	// error is the tool's answer), gives the call its context (one that
	// ends when the caller may no longer call: an agent key revoked), and
	// is told the outcome (nil, or the error the tool answers) and
	// whether the call was a write repeated with its client_id, which
	// stored nothing (replayed). The HTTP server's per-key audit and rate
	// limit (http.go).
	Call func(ctx context.Context, tool string, args json.RawMessage) (context.Context, func(outcome error, replayed bool), error)
	// Stop, if set, ends the waits in flight when it is done: each answers
	// store_unavailable (retryable), so that the process can stop without
	// sitting out their timeouts (the SDK's handlers' contexts do not end
	// with the connection's, and closing a session waits for its calls).
	// A write is carried through.
	Stop context.Context
}

// New returns the MCP server of the host's verbs on v. Serve it over
// stdio with Stdio, which survives a client's malformed lines.
func New(v *host.Verbs, opts *Options) *mcp.Server {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "chatrelay: chat threads with people", Version: Version},
		&mcp.ServerOptions{Instructions: Instructions, Logger: sdkLog(o.Log)})
	for _, verb := range chatrelay.Verbs() {
		b, ok := bindings[verb]
		if !ok {
			panic("mcpserver: no binding for the verb " + verb)
		}
		s.AddTool(toolOf(verb, v.MaxAttachmentBytes), handler(v, verb, b, o))
	}
	return s
}

// sdkLog is the logger handed to the SDK: its lines as they are, except
// two kinds. Those that say a client broke the protocol in its session (a
// second notifications/initialized), which the SDK answers itself and logs
// at error level, are logged at info: any key holder can repeat such a
// mistake, and no operator can act on it (as a refused request is a line
// at info, "request refused"). Its info lines, a session's life (server
// connecting, server session connected with the session's id, session
// initialized, client log level set), are logged at debug: at info every
// key holder wrote four of them a session, and the log held each
// session's Mcp-Session-Id, which with the key resumes the session.
func sdkLog(l *slog.Logger) *slog.Logger { return slog.New(mistakesAtInfo{l.Handler()}) }

// clientMistakes are the messages of the SDK's lines of a client's
// protocol mistake.
var clientMistakes = map[string]bool{
	"duplicate initialize request":         true,
	"duplicate initialized notification":   true,
	"initialized before initialize":        true,
	"method invalid during initialization": true,
	"method removed in the new protocol":   true,
}

// clientMistakePrefixes start the SDK's lines of a client's protocol
// mistake that name what the client sent: a call as MCP 2026-07-28, or
// with a protocol version in its _meta, which a server with sessions
// refuses (-32022).
var clientMistakePrefixes = []string{
	"rejecting request with protocol version ",
}

// clientMistake says whether msg is the SDK's line of a client's mistake.
func clientMistake(msg string) bool {
	return clientMistakes[msg] || slices.ContainsFunc(clientMistakePrefixes, func(p string) bool { return strings.HasPrefix(msg, p) })
}

// mistakesAtInfo is a slog.Handler that handles the lines of
// clientMistakes at info, the SDK's info lines at debug, and every other
// line as its Handler does.
type mistakesAtInfo struct{ slog.Handler }

func (h mistakesAtInfo) Enabled(ctx context.Context, l slog.Level) bool {
	if l <= slog.LevelInfo {
		return h.Handler.Enabled(ctx, min(l, slog.LevelDebug)) // handled at debug
	}
	// A line above info may be a mistake, handled at info.
	return h.Handler.Enabled(ctx, l) || h.Handler.Enabled(ctx, slog.LevelInfo)
}

func (h mistakesAtInfo) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level > slog.LevelInfo && clientMistake(r.Message):
		r.Level = slog.LevelInfo
	case r.Level > slog.LevelDebug && r.Level <= slog.LevelInfo:
		r.Level = slog.LevelDebug
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h mistakesAtInfo) WithAttrs(as []slog.Attr) slog.Handler {
	return mistakesAtInfo{h.Handler.WithAttrs(as)}
}

func (h mistakesAtInfo) WithGroup(name string) slog.Handler {
	return mistakesAtInfo{h.Handler.WithGroup(name)}
}

// ToolName is the tool of a verb.
func ToolName(verb string) string { return chatrelay.ToolName(verb) }

// Tool is the tool of a verb: its input schema and description are the
// bundle's <verb>.input entry, its output schema is OutputSchema(verb).
func Tool(verb string) *mcp.Tool {
	in, ok := chatrelay.SchemaDef(verb + ".input")
	if !ok {
		panic("mcpserver: the bundle has no " + verb + ".input")
	}
	var head struct {
		Description string `json:"description"`
	}
	if err := json.Unmarshal(in, &head); err != nil {
		panic("mcpserver: " + verb + ".input: " + err.Error())
	}
	b := bindings[verb]
	return &mcp.Tool{
		Name:         ToolName(verb),
		Description:  head.Description,
		InputSchema:  in,
		OutputSchema: OutputSchema(verb),
		Annotations: &mcp.ToolAnnotations{
			ReadOnlyHint:    b.readOnly,
			IdempotentHint:  b.readOnly,
			DestructiveHint: new(false),
			OpenWorldHint:   new(false),
		},
	}
}

// toolOf is Tool(verb) stating max (Verbs.MaxAttachmentBytes, when set)
// as the most bytes of a file it attaches, as the calls enforce it.
func toolOf(verb string, max int64) *mcp.Tool {
	t := Tool(verb)
	def := int64(chatrelay.LimitAttachmentBytes.Max)
	if in, ok := t.InputSchema.(json.RawMessage); ok && max > 0 && max != def {
		t.InputSchema = json.RawMessage(bytes.ReplaceAll(in, []byte(chatrelay.AttachmentDataWords(def)), []byte(chatrelay.AttachmentDataWords(max))))
	}
	return t
}

// ErrorDef is the bundle's entry of a tool error's structured content
// (ToolError).
const ErrorDef = "verb.error"

// OutputSchema is the output schema of a verb's tool, made of the bundle's
// entries taken as they are: an object that is the verb's result
// (<verb>.result) or, in a tool error, ErrorDef, with under $defs those two
// entries and every entry they refer to, under their bundle names (so each
// "#/$defs/…" reference reads as in the bundle, and the schema stands
// alone). A tool error is in it because a refusal carries ToolError and
// some clients validate every answer's structured content against the
// output schema, errors included: the TypeScript SDK's client does (1.32.2,
// the one the interop test pins; its code says "not when there's an
// error" but does not check isError), and throws on a mismatch.
func OutputSchema(verb string) json.RawMessage {
	result := verb + ".result"
	defs := map[string]json.RawMessage{}
	var add func(name string)
	add = func(name string) {
		if _, done := defs[name]; done {
			return
		}
		d, ok := chatrelay.SchemaDef(name)
		if !ok {
			panic("mcpserver: the bundle has no " + name)
		}
		defs[name] = d
		var v any
		if err := json.Unmarshal(d, &v); err != nil {
			panic("mcpserver: " + name + ": " + err.Error())
		}
		for _, r := range refs(v, nil) {
			add(r)
		}
	}
	add(result)
	add(ErrorDef)
	for _, name := range []string{result, ErrorDef} {
		var root struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(defs[name], &root); root.Type != "object" {
			// MCP's structured content is a JSON object.
			panic("mcpserver: " + name + " is not an object schema")
		}
	}
	b, err := json.Marshal(map[string]any{
		"type":        "object",
		"description": "chatrelay_" + verb + "'s result (" + result + "), or in a tool error (isError) the refusal (" + ErrorDef + ")",
		"oneOf":       []any{map[string]string{"$ref": "#/$defs/" + result}, map[string]string{"$ref": "#/$defs/" + ErrorDef}},
		"$defs":       defs,
	})
	if err != nil {
		panic("mcpserver: " + verb + "'s output schema: " + err.Error())
	}
	return b
}

// refs appends to names the $defs entries v refers to ("#/$defs/NAME").
func refs(v any, names []string) []string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if r, ok := x.(string); ok && k == "$ref" {
				name, ok := strings.CutPrefix(r, "#/$defs/")
				if !ok {
					panic("mcpserver: a reference outside the bundle's $defs: " + r)
				}
				names = append(names, name)
				continue
			}
			names = refs(x, names)
		}
	case []any:
		for _, x := range v {
			names = refs(x, names)
		}
	}
	return names
}

// binding runs one verb on decoded arguments and says its result in a
// short text.
type binding struct {
	readOnly bool
	waiting  string // a wait's progress message; "": not a wait
	call     func(ctx context.Context, v *host.Verbs, args []byte) (result any, text string, err error)
}

// bind makes the binding of a verb from its method on host.Verbs and its
// text.
func bind[In, Out any](readOnly bool, verb func(*host.Verbs, context.Context, In) (Out, error), say func(In, Out) string) binding {
	return binding{readOnly: readOnly, call: func(ctx context.Context, v *host.Verbs, args []byte) (any, string, error) {
		in, err := decode[In](args)
		if err != nil {
			return nil, "", err
		}
		out, err := verb(v, ctx, in)
		if err != nil {
			return nil, "", err
		}
		return out, say(in, out), nil
	}}
}

var bindings = map[string]binding{
	chatrelay.VerbListThreads:       bind(true, (*host.Verbs).ListThreads, sayThreads),
	chatrelay.VerbReadThread:        bind(true, (*host.Verbs).ReadThread, sayRead),
	chatrelay.VerbWaitMessages:      waits("waiting for a message", bind(true, (*host.Verbs).WaitMessages, sayWait)),
	chatrelay.VerbSend:              bind(false, (*host.Verbs).Send, sayMessage[host.SendInput]("sent")),
	chatrelay.VerbRequestInput:      bind(false, (*host.Verbs).RequestInput, sayAsked[host.RequestInputInput]),
	chatrelay.VerbRequestApproval:   bind(false, (*host.Verbs).RequestApproval, sayAsked[host.RequestApprovalInput]),
	chatrelay.VerbCheckInteraction:  bind(true, (*host.Verbs).CheckInteraction, sayInteraction[host.InteractionInput]),
	chatrelay.VerbWaitInteraction:   waits("waiting for the answer", bind(true, (*host.Verbs).WaitInteraction, sayInteraction[host.WaitInteractionInput])),
	chatrelay.VerbCancelInteraction: bind(false, (*host.Verbs).CancelInteraction, sayInteraction[host.InteractionInput]),
	chatrelay.VerbReact:             bind(false, (*host.Verbs).React, sayReact),
	chatrelay.VerbSendCard:          bind(false, (*host.Verbs).SendCard, sayMessage[host.SendCardInput]("sent the card")),
	chatrelay.VerbOpenThread:        bind(false, (*host.Verbs).OpenThread, sayOpened),
}

// waits marks a binding as a wait, which reports its progress.
func waits(message string, b binding) binding {
	b.waiting = message
	return b
}

// decode reads a tool's arguments into In: a JSON object of In's fields
// and no other (no arguments is {}). Anything else is invalid_json, as a
// body of the wrong shape is over HTTP.
func decode[In any](args []byte) (In, error) {
	var in In
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	err := decodeStrict(args, &in)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && strings.HasPrefix(te.Value, "number") {
		if whole, ok := wholeNumbers(args); ok {
			in = *new(In)
			err = decodeStrict(whole, &in)
		}
	}
	if err != nil {
		return in, chatrelay.Errorf(chatrelay.InvalidJSON, "the arguments do not fit the tool's input schema: %s", argError(err))
	}
	if chatrelay.LoneSurrogate(args) { // refused, never stored as U+FFFD (as over HTTP)
		return in, chatrelay.Errorf(chatrelay.InvalidText, `the arguments hold a lone UTF-16 surrogate escape (such as "\ud83d"): it is no text`)
	}
	if !utf8.Valid(args) { // likewise: the decoder made each bad byte U+FFFD (stdio refuses the line first)
		return in, chatrelay.Errorf(chatrelay.InvalidText, "the arguments are not valid UTF-8")
	}
	return in, nil
}

// decodeStrict decodes args into v: a JSON value of v's fields and no
// other, and nothing after it.
func decodeStrict(args []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the arguments")
	}
	return err
}

// wholeNumbers rewrites args with each number written with a fraction or
// an exponent whose value is a whole number an int64 holds (60.0, 1e3) as
// that integer, which JSON Schema's "integer" counts (Python writes a
// float so) and Go's decoder does not, and each whole number past int64
// as int64's most (or least): a cursor so large reads as "nothing newer",
// as over the API, and any other field is refused by its own bound; ok is
// false if there is none.
func wholeNumbers(args []byte) (out []byte, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	var walk func(x any) any
	walk = func(x any) any {
		switch x := x.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case json.Number:
			if _, err := x.Int64(); err == nil || len(x) > 40 { // an integer already, or no sensible one
				return x
			}
			f, err := x.Float64() // past float64 (1e400): ±Inf, with an error
			if err != nil && !math.IsInf(f, 0) || f != math.Trunc(f) {
				return x
			}
			if math.Abs(f) >= 1<<63 { // past every epoch there can be, as the API's since: the most
				ok = true
				if f < 0 {
					return json.Number(strconv.FormatInt(math.MinInt64, 10))
				}
				return json.Number(strconv.FormatInt(math.MaxInt64, 10))
			}
			r, exact := new(big.Rat).SetString(string(x)) // short, and near an int64: cheap
			if !exact || !r.IsInt() || !r.Num().IsInt64() {
				return x
			}
			ok = true
			return json.Number(r.Num().String())
		}
		return x
	}
	v = walk(v)
	if !ok {
		return nil, false
	}
	out, err := json.Marshal(v)
	return out, err == nil
}

// argError names what is wrong with the arguments, for the model.
func argError(err error) string { return chatrelay.JSONProblem(err) }

// handler is a verb's tool handler.
func handler(v *host.Verbs, verb string, b binding, o Options) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if o.Call == nil {
			res, _, err := callTool(ctx, req, v, verb, b, o)
			return res, err
		}
		if req.Session != nil {
			ctx = context.WithValue(ctx, sessionOf{}, req.Session.ID())
		}
		ctx, after, err := o.Call(ctx, ToolName(verb), req.Params.Arguments)
		if err != nil {
			after(err, false)
			return toolError(verb, err, o.Log), nil
		}
		res, outcome, err := callTool(ctx, req, v, verb, b, o)
		if err != nil {
			outcome = err
		}
		after(outcome, replayed(res))
		return res, err
	}
}

// replayed says whether res answers a write repeated with its client_id:
// the message already stored, nothing new.
func replayed(res *mcp.CallToolResult) bool {
	if res == nil || res.IsError {
		return false
	}
	switch r := res.StructuredContent.(type) {
	case host.MessageResult:
		return r.Replayed
	case host.InteractionResult:
		return r.Replayed
	case host.OpenThreadResult:
		return r.Replayed
	}
	return false
}

// sessionOf is the context key of the id of a call's session, for Call.
type sessionOf struct{}

// callTool runs a tool call: its answer, and the refusal it answers (nil
// for a result).
func callTool(ctx context.Context, req *mcp.CallToolRequest, v *host.Verbs, verb string, b binding, o Options) (res *mcp.CallToolResult, refusal, err error) {
	if token := req.Params.GetProgressToken(); b.waiting != "" && token != nil && req.Session != nil {
		stop := reportProgress(ctx, req.Session, token, b.waiting, waitSeconds(req.Params.Arguments), o.ProgressEvery)
		defer stop()
	}
	if req.Extra != nil && req.Extra.TokenInfo != nil { // what the transport says of the call
		if base, _ := req.Extra.TokenInfo.Extra[linkBaseField].(string); base != "" { // MCP over HTTP: the request's link base
			ctx = host.WithLinkBase(ctx, base)
		}
		// A wait ends with what carries the call. Over HTTP that is its
		// request: once it ends (the client left without
		// notifications/cancelled), the server keeps no events to resume
		// the request's stream with, so the answer could reach no one,
		// and the wait would hold one of the key's calls in flight until
		// its timeout; it is canceled. Over stdio it is the client's
		// input (Stdio): once it ends, the client still reads, so the
		// wait ends as its timeout would end it now, and is answered. A
		// write is carried through.
		if rc, _ := req.Extra.TokenInfo.Extra[requestField].(context.Context); rc != nil && b.waiting != "" {
			end, endWait := context.WithCancel(context.Background())
			defer endWait()
			ctx = host.WithWaitEnd(ctx, end)
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(rc, func() {
				if errors.Is(context.Cause(rc), errInputEnded) {
					endWait()
				} else {
					cancel()
				}
			})()
		}
	}
	if o.Stop != nil && b.waiting != "" {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(o.Stop, func() { cancel(shuttingDown) })()
	}
	out, text, err := b.call(ctx, v, req.Params.Arguments)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			var e *chatrelay.Error
			if errors.As(cause, &e) { // the server ended the call (its key revoked, the server stopping): the client is told
				return toolError(verb, e, o.Log), e, nil
			}
			return nil, ctx.Err(), ctx.Err() // the client canceled the call (or left): no result
		}
		return toolError(verb, err, o.Log), err, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: out}, nil, nil
}

// reportProgress sends notifications/progress for token every interval
// until stop is called (or ctx is done): progress is the seconds waited so
// far, total the wait's timeout. stop returns once nothing more will be
// sent, so that no progress follows the call's answer.
func reportProgress(ctx context.Context, ss *mcp.ServerSession, token any, message string, total, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			waited := time.Duration(n) * every
			ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      waited.Seconds(),
				Total:         total.Seconds(),
				Message:       fmt.Sprintf("%s (%s of at most %s)", message, waited.Round(time.Second), total),
			})
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitSeconds is the timeout a wait's arguments ask for (absent or 0: the
// most), a whole number written with a fraction or an exponent (60.0)
// included, as the verb reads it (decode). Arguments that do not parse
// are refused by the verb.
func waitSeconds(args json.RawMessage) time.Duration {
	var in struct {
		Timeout int `json:"timeout"`
	}
	if json.Unmarshal(args, &in) != nil {
		if whole, ok := wholeNumbers(args); ok {
			json.Unmarshal(whole, &in)
		}
	}
	if in.Timeout <= 0 || in.Timeout > chatrelay.LimitWaitTimeout.Max {
		in.Timeout = chatrelay.LimitWaitTimeout.Max
	}
	return time.Duration(in.Timeout) * time.Second
}

// ToolError is the structured content of a tool error ($defs verb.error).
type ToolError struct {
	Code      chatrelay.Code `json:"code"`
	Error     string         `json:"error"`
	Retryable bool           `json:"retryable"`
	// RetryAfterMS is how long to wait before calling again, for a
	// retryable refusal that knows it (rate_limited, too_many_streams).
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// toolError is a refusal as an MCP tool error: the text "code: words"
// for the model, and ToolError as structured content. An error that is
// not the domain's is "internal error"; its cause is logged, never sent.
func toolError(verb string, err error, log *slog.Logger) *mcp.CallToolResult {
	var e *chatrelay.Error
	if !errors.As(err, &e) || e.Code == chatrelay.Internal {
		log.Error("tool failed", "tool", ToolName(verb), "err", err)
		e = &chatrelay.Error{Code: chatrelay.Internal, Message: "internal error"}
	}
	te := ToolError{Code: e.Code, Error: e.Message, Retryable: e.Code.Retryable()}
	say := string(te.Code) + ": " + te.Error
	if te.Retryable && e.Retry > 0 {
		te.RetryAfterMS = max(e.Retry.Milliseconds(), 1)
		say += " (retry in " + e.Retry.Round(time.Millisecond).String() + ")"
	}
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: say}},
		StructuredContent: te,
	}
}

// The texts for the model. Each is short: what happened, and what a
// message says (cut; the structured content has it whole).

const textCut = 500

func utc(epoch int64) string { return time.UnixMilli(epoch).UTC().Format("2006-01-02 15:04:05Z") }

func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "… (cut here; the structured result has it whole)"
	}
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sayThreads(_ host.ListThreadsInput, r host.ListThreadsResult) string {
	var b strings.Builder
	waiting := 0
	for _, t := range r.Threads {
		if t.Awaiting {
			waiting++
		}
	}
	fmt.Fprintf(&b, "%s, %d awaiting your answer (newest activity first):", plural(len(r.Threads), "thread"), waiting)
	for i, t := range r.Threads {
		if i == 50 {
			fmt.Fprintf(&b, "\n… and %d more", len(r.Threads)-i)
			break
		}
		fmt.Fprintf(&b, "\n- %s: %s, last by %s at %s, awaiting: %s", t.Thread, plural(t.Messages, "message"), t.LastAuthor, utc(t.LastEpoch), yes(t.Awaiting))
	}
	for _, u := range r.Unreadable {
		fmt.Fprintf(&b, "\n- %s: left out, it cannot be read (%s)", u.Thread, u.Code)
	}
	return b.String()
}

// sayMessages writes one line (and the text) per v2 message.
func sayMessages(b *strings.Builder, thread string, raws []json.RawMessage) {
	for _, raw := range raws {
		var m chatrelay.Message
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		fmt.Fprintf(b, "\n[%s", m.ID)
		if thread != "" {
			fmt.Fprintf(b, " in %s", thread)
		}
		author := string(m.Author)
		if m.AuthorName != "" {
			author += " (" + m.AuthorName + ")"
		}
		// The text as a v1 reader has it: a file the message carries is a
		// line of it, so that a model reading only this text learns of it.
		fmt.Fprintf(b, "] %s at %s: %s", author, utc(m.Epoch), cut(chatrelay.V1Text(m), textCut))
		if ix := m.Interaction; ix != nil {
			st := string(ix.State)
			if ix.State == chatrelay.Pending && time.Now().UnixMilli() >= ix.Deadline {
				st = "pending, deadline passed: chatrelay_check_interaction settles it"
			}
			fmt.Fprintf(b, "\n  (%s %s: %s)", ix.Type, ix.ID, st)
		}
		for _, emoji := range slices.Sorted(maps.Keys(m.Reactions)) {
			fmt.Fprintf(b, "\n  %s by %d", emoji, len(m.Reactions[emoji]))
		}
	}
}

func sayRead(_ host.ReadThreadInput, r host.ReadThreadResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "thread %s: %s; cursor %d (pass it as since to read what changes next); awaiting your answer: %s", r.Thread, plural(len(r.Messages), "message"), r.Cursor, yes(r.Awaiting))
	if r.Reset {
		b.WriteString("; some changes after since were dropped by retention: read again without since")
	}
	sayMessages(&b, "", r.Messages)
	return b.String()
}

func sayWait(_ host.WaitMessagesInput, r host.WaitMessagesResult) string {
	if r.TimedOut {
		return fmt.Sprintf("nothing new before the timeout; cursor %d: call chatrelay_wait_messages again with since %d", r.Cursor, r.Cursor)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s; cursor %d (pass it as since next time):", plural(len(r.Messages), "new message"), r.Cursor)
	for _, m := range r.Messages {
		sayMessages(&b, m.Thread, []json.RawMessage{m.Message})
	}
	return b.String()
}

func sayOpened(in host.OpenThreadInput, r host.OpenThreadResult) string {
	if r.Replayed {
		return fmt.Sprintf("the thread %s was already opened under this client_id: nothing new was made; give the person its link (whoever opens it first holds the thread): %s", r.Thread, r.Link)
	}
	shown := "it is shown this once"
	if in.ClientID != "" {
		shown = "calling again with this client_id answers it again"
	}
	return fmt.Sprintf("opened the thread %s; give the person this link (whoever opens it first holds the thread; %s): %s", r.Thread, shown, r.Link)
}

func sayMessage[In any](did string) func(In, host.MessageResult) string {
	return func(_ In, r host.MessageResult) string {
		var m chatrelay.Message
		json.Unmarshal(r.Message, &m)
		s := fmt.Sprintf("%s %s", did, m.ID)
		if r.Replayed {
			s += " (already sent under this client_id: nothing new was stored)"
		}
		return s
	}
}

func sayReact(in host.ReactInput, r host.MessageResult) string {
	if in.Remove {
		return fmt.Sprintf("removed %s from %s", in.Emoji, in.MessageID)
	}
	return fmt.Sprintf("reacted %s to %s", in.Emoji, in.MessageID)
}

func sayAsked[In any](_ In, r host.InteractionResult) string {
	ix := r.Interaction
	s := fmt.Sprintf("asked for %s: %s in thread %s, pending until %s. Call chatrelay_wait_interaction with this interaction_id for the answer.",
		ix.Type, ix.ID, r.Thread, utc(ix.Deadline))
	if r.Replayed {
		s += " (already asked under this client_id)"
	}
	return s
}

func sayInteraction[In any](_ In, r host.InteractionResult) string {
	ix := r.Interaction
	switch {
	case ix.State == chatrelay.Pending && r.TimedOut:
		return fmt.Sprintf("%s is still pending (until %s): call chatrelay_wait_interaction again", ix.ID, utc(ix.Deadline))
	case ix.State == chatrelay.Pending:
		return fmt.Sprintf("%s is pending until %s", ix.ID, utc(ix.Deadline))
	case ix.State == chatrelay.Approved:
		return fmt.Sprintf("%s: approved by %s. You may act.", ix.ID, ix.AnsweredBy)
	case ix.State == chatrelay.Denied:
		return fmt.Sprintf("%s: denied by %s. Do not act.", ix.ID, ix.AnsweredBy)
	case ix.State == chatrelay.Answered && ix.Answer != nil:
		return fmt.Sprintf("%s: answered by %s: %s", ix.ID, ix.AnsweredBy, cut(ix.Answer.Value, textCut))
	case ix.State == chatrelay.Expired:
		return fmt.Sprintf("%s: expired unanswered. Do not act on it.", ix.ID)
	case ix.State == chatrelay.Canceled:
		return fmt.Sprintf("%s: canceled.", ix.ID)
	}
	return fmt.Sprintf("%s: %s", ix.ID, ix.State)
}
