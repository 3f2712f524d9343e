package chatrelay_test

import (
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// A title being written is one line that reads as written: a bidi control
// would draw the words after it reversed in the page's header and the
// browser's tab ("Deploy ‮live.exe" as "Deploy exe.evil"), and a line or
// paragraph separator would break it. Emoji sequences keep their joiner.
// A title stored before is still read (CheckTitle).
func TestCheckNewTitle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		title string
		ok    bool
	}{
		{"Deploy build 412", true},
		{"family 👨\u200d👩\u200d👧 and 🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F", true},
		{"עברית and English", true},
		{"Deploy \u202eexe.live", false},
		{"a \u2066isolated\u2069", false},
		{"marks \u200e\u200f", false},
		{"arabic mark \u061c", false},
		{"two\u2028lines", false},
		{"two\u2029paragraphs", false},
		{"tab\there", false},
	} {
		err := chatrelay.CheckNewTitle(tc.title)
		assert.Equal(t, "accepted "+tc.title, err == nil, tc.ok)
		if err != nil {
			assert.Equal(t, "code of "+tc.title, chatrelay.CodeOf(err), chatrelay.InvalidText)
		}
	}
	assert.Success(t, chatrelay.CheckTitle("stored \u202ebefore"))
	m := chatrelay.NewMessage{Author: chatrelay.Hermes, Text: "hi", Title: "Deploy \u202eexe.live"}
	_, err := m.Prepare(time.Now())
	assert.Equal(t, "a new message's title with a bidi control", chatrelay.CodeOf(err), chatrelay.InvalidText)
}
