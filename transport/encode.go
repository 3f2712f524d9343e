package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	segjson "github.com/segmentio/encoding/json"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// writeJSON encodes v compactly, without HTML escaping and without a
// trailing newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		b.Reset()
		b.WriteString(`{"success":false,"error":"internal error","code":"` + string(chatrelay.Internal) + `","retryable":false}`)
		status = http.StatusInternalServerError
	}
	writeBytes(w, status, bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// answer writes ok, 200, when err is nil, else err's answer (writeError).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, ok any, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ok)
}

func writeBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	// The constant values are shared, capped slices: Header.Set would
	// allocate a slice for each, per answer; an append to one (Add)
	// copies it, and net/http sends a copy of the map.
	h["Content-Type"] = hdrJSON[:1:1]
	h["X-Content-Type-Options"] = hdrNosniff[:1:1] // never read as a script or a page
	h["Cache-Control"] = hdrNoStore[:1:1]
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

var (
	hdrJSON    = []string{"application/json"}
	hdrNosniff = []string{"nosniff"}
	hdrNoStore = []string{"no-store"}
)

// postBody is the body of a post: {"text": "…", "kind": "operator"|"agent",
// "client_id": "…"}.
type postBody struct {
	Text        string
	Kind        chatrelay.Author
	ClientID    string
	Attachments []string // uploads of the thread (Part 5): the text may then be empty
}

// parsePost decodes and checks a post body of who. It is the one parser
// of posts, shared by POST /api/chat/post and the WebSocket's post frames.
// A participant's post takes no kind (its author is the participant).
func parsePost(data []byte, who principal) (postBody, error) {
	var raw postFields
	if !raw.decode(data) {
		return postBody{}, chatrelay.Errorf(chatrelay.InvalidJSON, "the body is not a JSON object")
	}
	var p postBody
	if a := raw.Attachments; a != nil && string(a) != "null" {
		if json.Unmarshal(a, &p.Attachments) != nil {
			return postBody{}, chatrelay.Errorf(chatrelay.InvalidAttachment, "attachments must be an array of attachment ids")
		}
		if err := chatrelay.CheckAttachmentIDs(p.Attachments); err != nil {
			return postBody{}, err
		}
	}
	t, ok := raw.Text, raw.Text != nil
	if !ok && len(p.Attachments) > 0 {
		t = []byte(`""`) // the attachments are the message
	}
	if !ok && len(p.Attachments) == 0 || len(t) == 0 || t[0] != '"' || segjson.Unmarshal(t, &p.Text) != nil {
		return postBody{}, chatrelay.Errorf(chatrelay.InvalidText, "text must be a non-empty string")
	}
	if !chatrelay.ValidJSONText(t) { // json.Unmarshal would quietly turn them into U+FFFD
		return postBody{}, chatrelay.Errorf(chatrelay.InvalidText, "text is not valid UTF-8")
	}
	if len(p.Attachments) > 0 && strings.TrimSpace(p.Text) == "" {
		p.Text = ""
	} else if err := chatrelay.CheckText(p.Text); err != nil {
		return postBody{}, err
	}
	p.Kind = chatrelay.Operator
	if k := raw.Kind; k != nil && string(k) != "null" && who.participant() {
		return postBody{}, chatrelay.Errorf(chatrelay.InvalidKind, "a participant's post takes no kind: its author is the participant")
	}
	if k := raw.Kind; k != nil && string(k) != "null" {
		var kind string
		if json.Unmarshal(k, &kind) != nil || (kind != string(chatrelay.Operator) && kind != string(chatrelay.Agent)) {
			return postBody{}, chatrelay.Errorf(chatrelay.InvalidKind, `kind must be "operator" or "agent"`)
		}
		p.Kind = chatrelay.Author(kind)
	}
	if c := raw.ClientID; c != nil && string(c) != "null" {
		if json.Unmarshal(c, &p.ClientID) != nil {
			return postBody{}, chatrelay.Errorf(chatrelay.InvalidClientID, "client_id must be a string matching %s", chatrelay.ClientIDPattern)
		}
		if err := chatrelay.CheckClientID(p.ClientID); err != nil {
			return postBody{}, err
		}
		if p.ClientID == "" {
			return postBody{}, chatrelay.Errorf(chatrelay.InvalidClientID, "client_id must match %s", chatrelay.ClientIDPattern)
		}
	}
	return p, nil
}

// postFields are the members of a post body parsePost reads, each as
// its JSON text (nil when absent); other members are passed over.
type postFields struct {
	Text        json.RawMessage `json:"text"`
	Kind        json.RawMessage `json:"kind"`
	ClientID    json.RawMessage `json:"client_id"`
	Attachments json.RawMessage `json:"attachments"`
}

// postFieldsDepth is how deep a body may nest to be decoded by segmentio's
// decoder: its work grows with the depth times the length (a 32 KiB body
// nested 10 000 deep took it 100 ms, encoding/json 0.3 ms), so a deeper
// body is decoded by encoding/json. A post's own members nest two deep.
const postFieldsDepth = 32

// decode reads data as encoding/json reads it into a map of its members
// (an object, each key in its own case, the last of a repeated key; what
// encoding/json refuses, refused) and keeps the members of a post. It
// reports whether data is a JSON object. segmentio's decoder, as the MCP
// bodies are read (chatrelay.UnmarshalExactCase), reads a post in one
// pass into the fields, where encoding/json's map took a map, its keys
// and a copy of every member.
func (f *postFields) decode(data []byte) bool {
	if chatrelay.NestsDeeper(data, postFieldsDepth) {
		var raw map[string]json.RawMessage
		if json.Unmarshal(data, &raw) != nil || raw == nil {
			return false
		}
		f.Text, f.Kind, f.ClientID, f.Attachments = raw["text"], raw["kind"], raw["client_id"], raw["attachments"]
		return true
	}
	// A null body decodes to no field without an error: not an object
	// (isObject, ws.go). Parse takes the white space after the value too:
	// anything left is data after it, refused as encoding/json does.
	if !isObject(data) {
		return false
	}
	rest, err := segjson.Parse(data, f, segjson.DontMatchCaseInsensitiveStructFields)
	return err == nil && len(rest) == 0
}

// timeoutAnswerTime is how long the 408 request_timeout answer to a
// body that did not arrive in time may take to be written.
const timeoutAnswerTime = 5 * time.Second

// readBody reads at most chatrelay.MaxBody bytes of the request body; a
// body that does not arrive within the read deadline is 408
// request_timeout (retryable).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > chatrelay.MaxBody {
		return nil, chatrelay.Errorf(chatrelay.BodyTooLarge, "request body over %d bytes", chatrelay.MaxBody)
	}
	data, err := readAll(http.MaxBytesReader(w, r.Body, chatrelay.MaxBody), r.ContentLength)
	if err == nil {
		return data, nil
	}
	var tooBig *http.MaxBytesError // escapes (errors.As): only on a failed read
	if errors.As(err, &tooBig) {
		return nil, chatrelay.Errorf(chatrelay.BodyTooLarge, "request body over %d bytes", chatrelay.MaxBody)
	}
	if errors.Is(err, errShuttingDown) { // cut by Shutdown's abort (cutAtAbort)
		return nil, errShuttingDown
	}
	if errors.Is(err, os.ErrDeadlineExceeded) { // the server's ReadTimeout: a link that stalled
		// The WriteTimeout runs out about when the ReadTimeout does:
		// the answer gets its own time.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeoutAnswerTime))
		return nil, &chatrelay.Error{Code: chatrelay.RequestTimeout, Retry: time.Second, Err: err,
			Message: "the request body did not arrive in time: nothing was stored; send it again"}
	}
	return nil, chatrelay.Errorf(chatrelay.InvalidJSON, "the body could not be read")
}

// readAll is io.ReadAll, into one buffer of the body's declared length
// (Content-Length, n) when it has one: io.ReadAll starts at 512 bytes and
// keeps a list of its chunks, two allocations for a post's small body.
// The first buffer holds at most readAllFirst bytes, so that a client
// that declares a length and sends nothing holds no more than that.
func readAll(r io.Reader, n int64) ([]byte, error) {
	if n <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, min(n, readAllFirst)+1) // the read that meets the end has room
	for {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) { // longer than the first buffer: grow as io.ReadAll would
			b = slices.Grow(b, 512)
		}
	}
}

// readAllFirst bounds readAll's first buffer: a post's body fits.
const readAllFirst = 4 << 10

// parseSince reads a cursor: empty is 0; otherwise a non-negative integer
// of milliseconds, digits only. An integer too large for 64 bits is past
// every epoch there can be: it reads as math.MaxInt64, "nothing newer".
func parseSince(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, chatrelay.Errorf(chatrelay.InvalidSince, "since must be a non-negative integer of epoch milliseconds")
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil { // only a range error is left: digits were checked
		return math.MaxInt64, nil
	}
	return n, nil
}

// appendPage appends the poll answer for p in view v to b, from the
// messages' pre-encoded JSON: nothing is encoded per poll. The v2 answer
// adds "reset" (true when retention dropped a change after the cursor),
// and "title" when the thread has one (open_thread; redacted as a text is
// for a participant).
func appendPage(b []byte, p store.Page, v view) []byte {
	b = append(b, `{"success":true,"thread":"`...)
	b = append(b, p.Thread...)
	b = append(b, `","messages":[`...)
	for i, m := range p.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, v.json(m)...) // redacted for a participant
	}
	if v.v2 {
		if p.Title != "" {
			title := p.Title
			if v.redact {
				title = chatrelay.RedactTo(title, chatrelay.LimitThreadTitle)
			}
			b = append(b, `],"title":`...)
			b = appendJSONString(b, title)
			b = append(b, `,"reset":`...)
		} else {
			b = append(b, `],"reset":`...)
		}
		b = strconv.AppendBool(b, p.Reset)
		b = append(b, `,"awaiting":`...)
	} else {
		b = append(b, `],"awaiting":`...)
	}
	b = strconv.AppendBool(b, p.Awaiting)
	b = append(b, `,"cursor":`...)
	b = strconv.AppendInt(b, p.Cursor, 10)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
