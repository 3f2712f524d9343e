package transport

import (
	"net/http/httptest"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestPostAnswerIsWriteJSONs: the post's answer, assembled by hand, is
// byte for byte (body and headers) what writeJSON makes of postAnswer,
// for the ids, times and threads the store makes and for strings that
// need escapes.
func TestPostAnswerIsWriteJSONs(t *testing.T) {
	cases := []struct{ id, ts, thread string }{
		{"MSG-20261201-204957-47a7d3", "2026-12-01T20:49:57+00:00", "a1b2c3d4e5f60718"},
		{"", "", ""},
		{`a"quote\and<html>&`, "tab\there\x7f", "é🪐\u2028"},
		{"ctl\x01\x1f", "line\nbreak", "plain text, with spaces"},
	}
	for _, c := range cases {
		for _, epoch := range []int64{0, 1796158197949, -1} {
			e := store.Entry{Message: chatrelay.Message{ID: c.id, Epoch: epoch, TS: c.ts}}
			want := httptest.NewRecorder()
			writeJSON(want, 201, postAnswer{Success: true, ID: e.ID, Epoch: e.Epoch, TS: e.TS, Thread: c.thread})
			got := httptest.NewRecorder()
			writePostAnswer(got, e, c.thread)
			assert.Equal(t, "status", got.Code, want.Code)
			assert.Equal(t, "body", got.Body.String(), want.Body.String())
			assert.Equal(t, "headers", got.Header(), want.Header())
		}
	}
}
