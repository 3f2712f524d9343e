package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxLine is the longest line, in bytes without its newline, that
// Stdio reads as a message (the limit mcp.body, as over HTTP): far more
// than the largest call the tools take but files (a card of 32 KiB, even
// with every character escaped), and small enough that a runaway client
// cannot fill the memory.
const DefaultMaxLine = chatrelay.MaxMCPBody

// Stdio is MCP's stdio transport (one JSON-RPC message a line) made to
// outlive a client's mistakes. The SDK's own ends the session on the first
// line it cannot decode, and every call in flight with it. Stdio answers
// such a line itself, as JSON-RPC says, and reads on:
//
//   - a line that is not JSON (or not UTF-8): -32700 "Parse error", id null;
//   - JSON that is no message (a number, a string, an array, a batch, a
//     jsonrpc other than "2.0", an id that is not a string or an integer,
//     params that are not structured, a response with neither result nor
//     error), or a line over MaxLine: -32600 "Invalid Request", with the
//     request's id when it has a usable one, else null;
//   - an initialize request whose params are not MCP's: -32602 "Invalid
//     params", with its id.
//
// A blank line is skipped. Only well-formed messages reach the SDK.
//
// It also keeps MCP's rule for a canceled call: once the client has sent
// notifications/cancelled for a call in flight, the call gets no answer at
// all (the SDK would send an error of code 0).
//
// At the end of In (the client closed its end, as MCP's stdio shutdown
// begins, or a script piped its requests), it reads no more, and every
// call already read is answered before the session ends (the SDK, told of
// the end, would write no answer at all, and end the calls in flight with
// it): a write is carried through and answered, a quick call answered as
// usual, and a wait (wait_messages, wait_interaction) ends at once, as its
// timeout would end it then (timed_out, with its cursor or the
// interaction as it stands), through the same carrier as a wait whose
// HTTP request ended (callTool). A subscriptions/listen, which only ends
// when canceled, is canceled by the server, and answered. A call the
// client canceled still gets no answer.
type Stdio struct {
	// In is read line by line. When the session ends it is closed, if it is
	// an io.Closer, so that a read blocked on it returns.
	In io.Reader
	// Out receives one message a line; it is not closed. One goroutine
	// writes it (the connection's writer), one line at a time: a write
	// that blocks (a client that reads no more, its pipe full) holds no
	// lock and no call's resource, and a session whose Stop is done does
	// not wait for it past StopGrace.
	Out io.Writer
	// Stop, if set, bounds the writes once it is done (the process is
	// told to stop): a write that has not gone out StopGrace after it (or
	// after it began, if later) is abandoned and fails, so that the
	// session can close; the answers that go out meanwhile (a wait's,
	// ended by the same stop) are written, and so are those that come
	// later while the client reads its input.
	// The writer goroutine itself ends when its write returns (or with the
	// process).
	Stop context.Context
	// MaxLine bounds a line, in bytes. Defaults to DefaultMaxLine.
	MaxLine int
}

// Connect implements mcp.Transport. It starts the goroutine that reads In;
// that goroutine ends at the end of In, or once the connection is closed
// and its read in progress returns.
func (s *Stdio) Connect(context.Context) (mcp.Connection, error) {
	maxLine := s.MaxLine
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	c := &stdioConn{
		in:       s.In,
		out:      s.Out,
		incoming: make(chan jsonrpc.Message),
		closed:   make(chan struct{}),
		inFlight: map[jsonrpc.ID]*call{},
		drained:  make(chan struct{}),
	}
	c.input, c.endInput = context.WithCancelCause(context.Background())
	c.extra = &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{Extra: map[string]any{requestField: c.input}}}
	c.lines = make(chan outLine)
	c.abandon = make(chan struct{})
	if s.Stop != nil {
		c.stopAfter = context.AfterFunc(s.Stop, func() {
			t := time.AfterFunc(StopGrace, func() { close(c.abandon) })
			c.mu.Lock()
			c.grace = t
			c.mu.Unlock()
		})
	}
	go c.read(maxLine)
	go c.write()
	return c, nil
}

// StopGrace is how long, once a Stdio's Stop is done, a write may take
// before it is abandoned: half of the 2 s that MCP clients (the
// TypeScript and Python SDKs) leave between SIGTERM and SIGKILL.
const StopGrace = 500 * time.Millisecond

// errStopped is a write abandoned once Stop was done.
var errStopped = errors.New("mcpserver: stopped with an answer not written (the client did not read its input)")

// outLine is a line for the writer goroutine, and where it says how its
// write went.
type outLine struct {
	line []byte
	done chan error // buffered: the writer never waits on it
}

// write is the writer goroutine: it writes the lines on Out one at a time
// until the connection is closed.
func (c *stdioConn) write() {
	for {
		select {
		case l := <-c.lines:
			c.writing.Store(true)
			_, err := c.out.Write(l.line)
			if err != nil {
				c.outFailed()
			}
			c.writing.Store(false) // before done: the next send finds it free
			l.done <- err
		case <-c.closed:
			return
		}
	}
}

// send has the writer goroutine write line, and returns how it went; it
// returns ErrConnectionClosed once the connection is closed, and
// errStopped without waiting more once the write is abandoned: after
// StopGrace past Stop, a write that the writer, still busy with an
// earlier one, cannot take, or one it took that is not out StopGrace
// after (its own grace, when it began after the first); a writer done
// with the line before but not yet back at its receive takes it within
// that own grace. A write that
// did go out is preferred over the grace's end: a client that reads its
// input gets every answer.
func (c *stdioConn) send(line []byte) error {
	l := outLine{line: line, done: make(chan error, 1)}
	var stops []func() bool // the own graces' timers
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	abandon := c.abandon
	var own <-chan time.Time
	ownGrace := func() { // past the grace: this write has its own
		select {
		case <-c.abandon:
			t := time.NewTimer(StopGrace)
			abandon, own = nil, t.C
			stops = append(stops, t.Stop)
		default:
		}
	}
	select {
	case c.lines <- l: // a free writer takes it, even past the grace
	default:
		// A writer busy with an earlier line (an output nobody reads)
		// gives this one up at the grace's end; a free one (back from the
		// line before, not yet at its receive) takes it.
		if !c.writing.Load() {
			ownGrace()
		}
		select {
		case c.lines <- l:
		case <-abandon:
			c.outFailed()
			return errStopped
		case <-own:
			c.outFailed()
			return errStopped
		case <-c.closed:
			return mcp.ErrConnectionClosed
		}
	}
	abandon, own = c.abandon, nil
	ownGrace()
	select {
	case err := <-l.done:
		return err
	case <-abandon:
	case <-own:
	case <-c.closed:
		return mcp.ErrConnectionClosed
	}
	select {
	case err := <-l.done: // out just now
		return err
	default:
		c.outFailed()
		return errStopped
	}
}

type stdioConn struct {
	in       io.Reader
	incoming chan jsonrpc.Message // closed by read when In ends; readErr says how
	readErr  error                // written before incoming is closed

	// input ends, with the cause errInputEnded, at the end of In. Every
	// request read carries it (extra) as the carrier of the call, as over
	// HTTP a request's context: callTool ends a wait with it.
	input    context.Context
	endInput context.CancelCauseFunc
	extra    *mcp.RequestExtra

	out       io.Writer     // written by the writer goroutine (write) only
	lines     chan outLine  // to the writer goroutine
	writing   atomic.Bool   // the writer goroutine has a line it has not written yet
	abandon   chan struct{} // closed StopGrace after Stop is done: a write not done is abandoned
	stopAfter func() bool   // stops the AfterFunc on Stop (nil: no Stop)

	mu       sync.Mutex
	inFlight map[jsonrpc.ID]*call // the calls read and not answered yet
	ended    bool                 // In has ended
	outErr   bool                 // a write on out failed: no answer can be written
	drained  chan struct{}        // closed once In has ended and every call read is answered (or out failed)
	grace    *time.Timer          // StopGrace's, once Stop is done

	closeOnce sync.Once
	closed    chan struct{}
}

// call is a call read and not answered yet.
type call struct {
	method   string
	canceled bool // the client canceled it: its answer is not written
}

// errInputEnded is the cause with which a call's carrier ends over stdio:
// the client closed its input, and reads on.
var errInputEnded = errors.New("mcpserver: the client's input ended")

// listenMethod is the call that lasts until it is canceled.
const listenMethod = "subscriptions/listen"

// read reads In line by line: it answers each malformed line, and hands
// each message to Read.
func (c *stdioConn) read(maxLine int) {
	defer close(c.incoming)
	lines := lineReader{r: bufio.NewReaderSize(c.in, 64<<10), max: maxLine}
	for {
		line, over, err := lines.next()
		if over || len(bytes.TrimSpace(line)) > 0 {
			msg, refused := parseLine(line, over, maxLine)
			if refused != nil {
				c.refuse(refused)
			} else {
				if r, ok := msg.(*jsonrpc.Request); ok {
					r.Extra = c.extra
				}
				c.track(msg)
				select {
				case c.incoming <- msg:
				case <-c.closed:
					return
				}
			}
		}
		if err != nil {
			c.readErr = err
			for _, cancel := range c.inputEnded() {
				select {
				case c.incoming <- cancel:
				case <-c.closed:
					return
				}
			}
			return
		}
	}
}

// inputEnded notes the end of In, ends the calls' carrier, and returns
// the cancels of the calls that last until they are canceled (a
// subscriptions/listen), which are then answered as on a cancel of the
// server's (the client sent none: it reads the answer).
func (c *stdioConn) inputEnded() (cancels []jsonrpc.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	c.endInput(errInputEnded)
	for id, call := range c.inFlight {
		if call.method == listenMethod && !call.canceled {
			params, _ := json.Marshal(map[string]any{"requestId": id.Raw(), "reason": "the client's input ended"}) // cannot fail
			cancels = append(cancels, &jsonrpc.Request{Method: "notifications/cancelled", Params: params})
		}
	}
	c.checkDrained()
	return cancels
}

// checkDrained closes drained once In has ended and no call waits for its
// answer (or none can be written). c.mu is held.
func (c *stdioConn) checkDrained() {
	if !c.ended || len(c.inFlight) > 0 && !c.outErr {
		return
	}
	select {
	case <-c.drained:
	default:
		close(c.drained)
	}
}

// outFailed notes that a write on out failed.
func (c *stdioConn) outFailed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outErr = true
	c.checkDrained()
}

// Read implements mcp.Connection. The end of In is told only once every
// call read is answered: once told, the SDK writes no more answers.
func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case msg, ok := <-c.incoming:
		if ok {
			return msg, nil
		}
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF // read stopped because the connection closed
	case <-c.drained:
	}
	if c.readErr != nil {
		return nil, c.readErr
	}
	return nil, io.EOF
}

// Write implements mcp.Connection. An answer to a call the client
// canceled is not written.
func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.closed:
		return mcp.ErrConnectionClosed
	default:
	}
	var line []byte
	if r, ok := msg.(*jsonrpc.Response); ok {
		switch {
		case !r.ID.IsValid() && r.Error != nil: // the SDK leaves the id out; JSON-RPC says null
			line = errorLine(nil, errorCode(r.Error), r.Error.Error())
		case r.ID.IsValid() && c.answered(r.ID):
			return nil
		}
	}
	if line == nil {
		b, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			return err
		}
		line = append(b, '\n')
	}
	return c.send(line)
}

// Close implements mcp.Connection.
func (c *stdioConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		if c.stopAfter != nil {
			c.stopAfter()
		}
		c.mu.Lock()
		if c.grace != nil {
			c.grace.Stop()
		}
		c.mu.Unlock()
		if cl, ok := c.in.(io.Closer); ok {
			err = cl.Close()
		}
	})
	return err
}

// SessionID implements mcp.Connection: stdio has one session.
func (c *stdioConn) SessionID() string { return "" }

// track notes a call in flight, and a cancel of one.
func (c *stdioConn) track(msg jsonrpc.Message) {
	r, ok := msg.(*jsonrpc.Request)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.IsCall() {
		if _, dup := c.inFlight[r.ID]; !dup { // a duplicate is refused by the SDK under no id
			c.inFlight[r.ID] = &call{method: r.Method}
		}
		return
	}
	if r.Method != "notifications/cancelled" {
		return
	}
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(r.Params, &p) != nil {
		return
	}
	if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
		if call := c.inFlight[id]; call != nil {
			call.canceled = true
		}
	}
}

// answered notes that the call id is answered, and says whether the
// client canceled it (its answer is then not sent).
func (c *stdioConn) answered(id jsonrpc.ID) (canceled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if call := c.inFlight[id]; call != nil {
		canceled = call.canceled
	}
	delete(c.inFlight, id)
	c.checkDrained()
	return canceled
}

// refuse writes the error answer of a malformed line. A write that fails
// is left to the SDK's next write to find (and noted by send: no answer
// can be written).
func (c *stdioConn) refuse(r *refusal) {
	c.send(errorLine(r.id, r.code, r.message))
}

// refusal is the error answer due to a malformed line.
type refusal struct {
	id      json.RawMessage // nil: null
	code    int64
	message string
}

func parseError(format string, args ...any) *refusal {
	return &refusal{code: jsonrpc.CodeParseError, message: "Parse error: " + fmt.Sprintf(format, args...)}
}

func invalidRequest(id json.RawMessage, format string, args ...any) *refusal {
	return &refusal{id: id, code: jsonrpc.CodeInvalidRequest, message: "Invalid Request: " + fmt.Sprintf(format, args...)}
}

// errorLine is a JSON-RPC error answer, as a line.
func errorLine(id json.RawMessage, code int64, message string) []byte {
	var answer struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}
	answer.JSONRPC, answer.ID = "2.0", id
	answer.Error = jsonrpc.Error{Code: code, Message: message}
	b, _ := json.Marshal(answer) // cannot fail: plain strings and numbers
	return append(b, '\n')
}

func errorCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return jsonrpc.CodeInternalError
}

// maxSafeID is the largest integer id answered as it came: a float64, as
// the SDK keeps an id, holds every integer up to 2^53 exactly.
const maxSafeID = 1 << 53

// parseLine reads a line (without its newline) as one JSON-RPC message,
// or says the error answer it is due. over says the line was longer than
// maxLine (line is then not read).
func parseLine(line []byte, over bool, maxLine int) (jsonrpc.Message, *refusal) {
	if over {
		return nil, invalidRequest(nil, "the line is over %d bytes", maxLine)
	}
	if !utf8.Valid(line) {
		return nil, parseError("the line is not UTF-8")
	}
	var v json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(line), &v); err != nil {
		return nil, parseError("the line is not one JSON value (%s)", trimJSONError(err))
	}
	switch v[0] {
	case '{':
	case '[':
		return nil, invalidRequest(nil, "a batch (a JSON array) is not supported: send one message a line")
	default:
		return nil, invalidRequest(nil, "a message is a JSON object")
	}
	var fields map[string]json.RawMessage // keys as they are: JSON-RPC's are case-sensitive
	if err := json.Unmarshal(v, &fields); err != nil {
		return nil, invalidRequest(nil, "%s", trimJSONError(err))
	}
	rawID, hasID := fields["id"]
	rawMethod, hasMethod := fields["method"]
	var id jsonrpc.ID
	var answerID json.RawMessage // the id an error answer carries: a request's usable id, else null
	if hasID {
		var ok bool
		if id, ok = parseID(rawID); !ok {
			return nil, invalidRequest(nil, "id must be a string or an integer (of at most 2^53)")
		}
		if hasMethod {
			answerID, _ = json.Marshal(id.Raw())
		}
	}
	var version string
	if json.Unmarshal(fields["jsonrpc"], &version) != nil || version != "2.0" {
		return nil, invalidRequest(answerID, `jsonrpc must be "2.0"`)
	}
	if hasMethod {
		var method string
		if json.Unmarshal(rawMethod, &method) != nil {
			return nil, invalidRequest(answerID, "method must be a string")
		}
		params := fields["params"]
		if string(params) == "null" {
			params = nil
		}
		if len(params) > 0 && params[0] != '{' { // MCP's params are an object: never by position (an array)
			return nil, invalidRequest(answerID, "params must be an object")
		}
		if method == "initialize" && !initializeParamsOK(params) { // else the SDK's code 0, echoing them
			return nil, &refusal{id: answerID, code: jsonrpc.CodeInvalidParams, message: "Invalid params: initialize's params are " + initializeParamsWant}
		}
		return &jsonrpc.Request{ID: id, Method: method, Params: params}, nil
	}
	// No method: a response to a request of the server's. An error answer
	// never carries its id, which is the server's, not the client's.
	rawErr, hasErr := fields["error"]
	result, hasResult := fields["result"]
	switch {
	case !hasID:
		return nil, invalidRequest(nil, "a message has a method (a request or notification) or an id (a response)")
	case hasErr == hasResult:
		return nil, invalidRequest(nil, "a response has either a result or an error")
	case hasErr:
		var we jsonrpc.Error
		if rawErr[0] != '{' || json.Unmarshal(rawErr, &we) != nil {
			return nil, invalidRequest(nil, "a response's error is an object with an integer code and a message")
		}
		return &jsonrpc.Response{ID: id, Error: &we}, nil
	}
	return &jsonrpc.Response{ID: id, Result: result}, nil
}

// parseID reads a request id: a string, or an integer the SDK keeps
// exactly. null is none (MCP: "the ID MUST NOT be null").
func parseID(raw json.RawMessage) (jsonrpc.ID, bool) {
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return jsonrpc.ID{}, false
		}
		id, err := jsonrpc.MakeID(s)
		return id, err == nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n > maxSafeID || n < -maxSafeID {
			return jsonrpc.ID{}, false
		}
		id, err := jsonrpc.MakeID(float64(n))
		return id, err == nil
	}
	return jsonrpc.ID{}, false
}

// trimJSONError is the words of a decoding error, without its package.
func trimJSONError(err error) string { return strings.TrimPrefix(err.Error(), "json: ") }

// lineReader reads lines of at most max bytes: past that it keeps only
// the first max bytes and skips to the end of the line.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// next returns the next line without its "\n" (or "\r\n"); over says it
// was longer than max. At the end of the input it returns the last,
// unterminated line (possibly empty) with io.EOF, or a read error.
func (l *lineReader) next() (line []byte, over bool, err error) {
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if !over {
			if len(l.buf)+len(chunk) > l.max+2 { // room for "\r\n"
				over = true
				l.buf = l.buf[:0]
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(l.buf, []byte("\n")), []byte("\r"))
		if !over && len(line) > l.max {
			over = true
		}
		if over {
			line = nil
		}
		return line, over, err
	}
}
