package store

import (
	"github.com/chatrelay/chatrelay"

	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// goldenEntries is the thread pinned by testdata/thread.golden: every author,
// and texts that need escaping.
func goldenEntries() []Entry {
	msgs := []chatrelay.Message{
		{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792780800123, TS: "2026-10-23T18:40:00+00:00", Author: chatrelay.Operator, Text: "Is the build green?"},
		{ID: "MSG-20261023-184000-0f9e8d", Epoch: 1792780800124, TS: "2026-10-23T18:40:00+00:00", Author: chatrelay.Agent, Text: "Checking <main> & \"release\"…\nline two\ttabbed \\ done"},
		{ID: "MSG-20261023-184105-ffffff", Epoch: 1792780865000, TS: "2026-10-23T18:41:05+00:00", Author: chatrelay.Hermes, Text: "Green. 🟢 Ünïcödé stays as it is; control \u0001 is escaped."},
	}
	es := make([]Entry, len(msgs))
	for i, m := range msgs {
		es[i] = Entry{Message: m, JSON: chatrelay.MarshalMessage(m)}
	}
	return es
}

// The thread document's format is what the host CLI, older and newer
// binaries and operators read: any change to it must be deliberate.
func TestDocumentGolden(t *testing.T) {
	const thread = "a1b2c3d4e5f60718"
	const trimmed = 1792780799000
	golden := filepath.Join("testdata", "thread.golden")
	got := encodeDocument(thread, goldenEntries(), trimmed)
	if *update {
		assert.Success(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	assert.Success(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("the document format changed (run go test ./store -run Golden -update if on purpose)\n got: %s\nwant: %s", got, want)
	}

	msgs, tr, err := parseDocument(want, thread)
	assert.Success(t, err)
	assert.Equal(t, "trimmed", tr, int64(trimmed))
	assert.Equal(t, "messages", msgs, goldenEntries())
}

func TestParseDocumentRefuses(t *testing.T) {
	const thread = "a1b2c3d4e5f60718"
	msg := func(id string, epoch string, author string) string {
		return `{"id":"` + id + `","epoch":` + epoch + `,"ts":"2026-10-23T18:40:00+00:00","author":"` + author + `","text":"hi"}`
	}
	doc := func(version, th, trimmed string, msgs ...string) string {
		s := `{"version":` + version + `,"thread":"` + th + `","trimmed":` + trimmed + `,"messages":[`
		for i, m := range msgs {
			if i > 0 {
				s += ","
			}
			s += m
		}
		return s + "]}"
	}
	tests := []struct {
		name string
		data string
	}{
		{"empty file", ""},
		{"not JSON", "hello"},
		{"truncated", doc("1", thread, "0", msg("MSG-a", "5", "operator"))[:40]},
		{"null", "null"},
		{"array", "[]"},
		{"two documents", doc("1", thread, "0") + doc("1", thread, "0")},
		{"no version", `{"thread":"` + thread + `","trimmed":0,"messages":[]}`},
		{"newer version", doc("2", thread, "0")},
		{"another thread", doc("1", "0123456789abcdef", "0")},
		{"negative trimmed", doc("1", thread, "-1")},
		{"epochs out of order", doc("1", thread, "0", msg("MSG-a", "6", "operator"), msg("MSG-b", "5", "operator"))},
		{"repeated epoch", doc("1", thread, "0", msg("MSG-a", "5", "operator"), msg("MSG-b", "5", "operator"))},
		{"message not newer than trimmed", doc("1", thread, "5", msg("MSG-a", "5", "operator"))},
		{"message without id", doc("1", thread, "0", msg("", "5", "operator"))},
		{"message without author", doc("1", thread, "0", msg("MSG-a", "5", ""))},
		{"fractional epoch", doc("1", thread, "0", msg("MSG-a", "5.5", "operator"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseDocument([]byte(tt.data), thread)
			assert.ErrorIs(t, err, errBadDocument)
		})
	}
}

// FuzzParseDocument: the loader never panics, and whatever it accepts
// encodes to a document that parses back to the same messages.
func FuzzParseDocument(f *testing.F) {
	const thread = "a1b2c3d4e5f60718"
	golden, err := os.ReadFile(filepath.Join("testdata", "thread.golden"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add(encodeDocument(thread, nil, 0))
	f.Add([]byte(`{"version":1,"thread":"a1b2c3d4e5f60718","trimmed":0,"messages":[{"id":"x","epoch":1,"ts":"","author":"a","text":"\ud800 \xff"}]}`))
	f.Add([]byte(`{"VERSION":1,"Thread":"a1b2c3d4e5f60718","messages":null,"extra":{"a":[1,2]}}`))
	f.Add([]byte(`{"version":1,"thread":"a1b2c3d4e5f60718","trimmed":9223372036854775806,"messages":[{"id":"x","epoch":9223372036854775807,"author":"hermes"}]}`))
	f.Add([]byte("null"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, trimmed, err := parseDocument(data, thread)
		if err != nil {
			return
		}
		again, trimmed2, err := parseDocument(encodeDocument(thread, msgs, trimmed), thread)
		if err != nil {
			t.Fatalf("an accepted document re-encodes to one that does not parse: %v", err)
		}
		if trimmed2 != trimmed {
			t.Fatalf("trimmed %d became %d", trimmed, trimmed2)
		}
		if len(again) != len(msgs) {
			t.Fatalf("%d messages became %d", len(msgs), len(again))
		}
		for i := range msgs {
			if again[i].Message != msgs[i].Message {
				t.Fatalf("message %d changed:\n%+v\n%+v", i, msgs[i].Message, again[i].Message)
			}
			if !bytes.Equal(again[i].JSON, msgs[i].JSON) {
				t.Fatalf("message %d JSON changed:\n%s\n%s", i, msgs[i].JSON, again[i].JSON)
			}
		}
	})
}
