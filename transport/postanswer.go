package transport

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/chatrelay/chatrelay/store"
)

// The answer of a post, assembled without reflection: the one answer of
// every post, its bytes exactly those writeJSON makes of postAnswer.

// writePostAnswer writes the 201 of a post of e to thread.
func writePostAnswer(w http.ResponseWriter, e store.Entry, thread string) {
	bp := pageBufs.Get().(*[]byte)
	b := appendPostAnswer((*bp)[:0], e, thread)
	writeBytes(w, http.StatusCreated, b)
	*bp = b[:0]
	pageBufs.Put(bp)
}

// appendPostAnswer appends postAnswer{Success: true, …} of e as writeJSON
// encodes it (compact, no HTML escaping).
func appendPostAnswer(b []byte, e store.Entry, thread string) []byte {
	b = append(b, `{"success":true,"id":`...)
	b = appendAnswerString(b, e.ID)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, e.Epoch, 10)
	b = append(b, `,"ts":`...)
	b = appendAnswerString(b, e.TS)
	b = append(b, `,"thread":`...)
	b = appendAnswerString(b, thread)
	return append(b, '}')
}

// appendAnswerString appends s as a JSON string the way writeJSON's
// encoder does: a string of printable ASCII that needs no escape (ids,
// times, thread names) as it is, any other through the encoder.
func appendAnswerString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
