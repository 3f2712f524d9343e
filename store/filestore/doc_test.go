package filestore

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// goldenMessages are the v1 thread pinned by testdata/thread_v1.golden:
// every author, and texts that need escaping.
func goldenMessages() []chatrelay.Message {
	return []chatrelay.Message{
		{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792780800123, TS: "2026-10-23T18:40:00+00:00", Author: chatrelay.Operator, Text: "Is the build green?"},
		{ID: "MSG-20261023-184000-0f9e8d", Epoch: 1792780800124, TS: "2026-10-23T18:40:00+00:00", Author: chatrelay.Agent, Text: "Checking <main> & \"release\"…\nline two\ttabbed \\ done"},
		{ID: "MSG-20261023-184105-ffffff", Epoch: 1792780865000, TS: "2026-10-23T18:41:05+00:00", Author: chatrelay.Hermes, Text: "Green. 🟢 Ünïcödé stays as it is; control \u0001 is escaped."},
	}
}

// goldenV2 is the v2 thread pinned by testdata/thread.golden: the v1
// messages, one changed by reactions, an answered approval, a card and a
// participant's idempotent post.
func goldenV2() threadDoc {
	msgs := goldenMessages()
	msgs[0].Reactions = chatrelay.Reactions{"👍": {chatrelay.Hermes, "p:p_1a2b3c4d"}}
	msgs[0].Rev = 1792780900000
	msgs = append(msgs,
		chatrelay.Message{ID: "MSG-20261023-184200-aaaaaa", Epoch: 1792780920000, TS: "2026-10-23T18:42:00+00:00", Author: chatrelay.Hermes,
			Text: "Approval requested: deploy\nDeploy build 412?", Rev: 1792780930000,
			Interaction: &chatrelay.Interaction{ID: "ix_3f9a0c7e21b4", Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy build 412?",
				Details: []chatrelay.Detail{{Label: "build", Value: "412"}}, Deadline: 1792784520000, State: chatrelay.Approved,
				Answer: &chatrelay.Answer{Decision: chatrelay.Approve}, AnsweredBy: chatrelay.Operator, AnsweredAt: 1792780930000}},
		chatrelay.Message{ID: "MSG-20261023-184300-bbbbbb", Epoch: 1792780980000, TS: "2026-10-23T18:43:00+00:00", Author: chatrelay.Hermes,
			Text: "Build 412 is out.", Card: &chatrelay.Card{Title: "Deployed", FallbackText: "Build 412 is out.",
				Blocks: []chatrelay.Block{{Type: chatrelay.LinkBlock, URL: "https://ci.example.com/412", Label: "the log"}}}},
		chatrelay.Message{ID: "MSG-20261023-184400-cccccc", Epoch: 1792781040000, TS: "2026-10-23T18:44:00+00:00", Author: "p:p_1a2b3c4d",
			AuthorName: "Alex", ClientID: "tab-1:42", Text: "Looks good."},
	)
	d := threadDoc{trimmed: 1792780799000, trimmedRev: 1792780799500, rev: 1792781040000}
	for _, m := range msgs {
		d.msgs = append(d.msgs, store.NewEntry(m))
	}
	return d
}

// The thread document's format is what the host CLI, older and newer
// binaries and operators read: any change to it must be deliberate.
func TestDocumentGolden(t *testing.T) {
	const thread = "a1b2c3d4e5f60718"
	golden := filepath.Join("testdata", "thread.golden")
	got := appendDocument(nil, thread, goldenV2())
	if *update {
		assert.Success(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	assert.Success(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("the document format changed (run go test ./store -run Golden -update if on purpose)\n got: %s\nwant: %s", got, want)
	}
	d, err := parseDocument(want, thread)
	assert.Success(t, err)
	assert.Equal(t, "marks", [3]int64{d.trimmed, d.trimmedRev, d.rev}, [3]int64{1792780799000, 1792780799500, 1792781040000})
	assert.Equal(t, "messages", d.msgs, goldenV2().msgs)
}

// A titled thread (open_thread) is a version 3 document, pinned by
// testdata/thread_v3.golden: the version 2 document with "title"; an
// older binary refuses it rather than drop the title. A thread without a
// title is still written as version 2 (TestDocumentGolden).
func TestTitledDocumentGolden(t *testing.T) {
	const thread = "a1b2c3d4e5f60718"
	golden := filepath.Join("testdata", "thread_v3.golden")
	d := goldenV2()
	d.title = `Deploy "412" <ok> ✓`
	got := appendDocument(nil, thread, d)
	if *update {
		assert.Success(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	assert.Success(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("the document format changed (run go test ./store/filestore -run Golden -update if on purpose)\n got: %s\nwant: %s", got, want)
	}
	assert.True(t, bytes.HasPrefix(want, []byte(`{"version":3,`)), "a titled document is version 3: %s", want[:40])
	back, err := parseDocument(want, thread)
	assert.Success(t, err)
	assert.Equal(t, "title", back.title, d.title)
	assert.Equal(t, "messages", back.msgs, d.msgs)
}

// A version 1 document (written by the previous chatrelay) is read as it
// is: each message is a v2 message that never changed, and the v1 JSON a
// poll answers is byte for byte what the previous version answered.
func TestVersion1DocumentIsRead(t *testing.T) {
	const thread = "a1b2c3d4e5f60718"
	v1, err := os.ReadFile(filepath.Join("testdata", "thread_v1.golden"))
	assert.Success(t, err)
	d, err := parseDocument(v1, thread)
	assert.Success(t, err)
	assert.Equal(t, "trimmed", d.trimmed, int64(1792780799000))
	assert.Equal(t, "rev: the newest epoch", d.rev, int64(1792780865000))
	for i, m := range goldenMessages() {
		e := d.msgs[i]
		assert.Equal(t, "rev of a v1 message", e.Rev, m.Epoch)
		assert.Equal(t, "v1 JSON", string(e.JSON), string(chatrelay.MarshalMessage(m)))
		assert.True(t, bytes.Contains(v1, e.JSON), "v1 JSON %s is not what the v1 document held", e.JSON)
	}
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
		{"newer version", doc("6", thread, "0")},
		{"attachments in a version 3 document", `{"version":3,"thread":"` + thread + `","trimmed":0,"messages":[{"id":"MSG-20261023-184000-a1b2c3","epoch":1,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"","attachments":[{"id":"at_000000000001","name":"a","type":"text/plain","size":1,"sha256":"` + strings.Repeat("0", 64) + `"}]}]}`},
		{"a title in a version 2 document", `{"version":2,"thread":"` + thread + `","title":"T","trimmed":0,"messages":[]}`},
		{"a title too long", `{"version":3,"thread":"` + thread + `","title":"` + strings.Repeat("x", 161) + `","trimmed":0,"messages":[]}`},
		{"unknown field (a newer writer's)", `{"version":2,"thread":"` + thread + `","trimmed":0,"messages":[],"grants":[]}`},
		{"another thread", doc("1", "0123456789abcdef", "0")},
		{"negative trimmed", doc("1", thread, "-1")},
		{"epochs out of order", doc("1", thread, "0", msg("MSG-a", "6", "operator"), msg("MSG-b", "5", "operator"))},
		{"repeated epoch", doc("1", thread, "0", msg("MSG-a", "5", "operator"), msg("MSG-b", "5", "operator"))},
		{"message not newer than trimmed", doc("1", thread, "5", msg("MSG-a", "5", "operator"))},
		{"message without id", doc("1", thread, "0", msg("", "5", "operator"))},
		{"message without author", doc("1", thread, "0", msg("MSG-a", "5", ""))},
		{"fractional epoch", doc("1", thread, "0", msg("MSG-a", "5.5", "operator"))},
		{"v2 fields in a version 1 document", doc("1", thread, "0", `{"id":"MSG-a","epoch":5,"ts":"","author":"hermes","text":"hi","rev":7}`)},
		{"rev before epoch", doc("2", thread, "0", `{"id":"MSG-a","epoch":5,"ts":"","author":"hermes","text":"hi","rev":4}`)},
		{"interaction without id", doc("2", thread, "0", `{"id":"MSG-a","epoch":5,"ts":"","author":"hermes","text":"hi","rev":5,"interaction":{"type":"input","prompt":"?","deadline":9,"state":"pending"}}`)},
		{"interaction of an unknown state", doc("2", thread, "0", `{"id":"MSG-a","epoch":5,"ts":"","author":"hermes","text":"hi","rev":5,"interaction":{"id":"ix_000000000000","type":"input","prompt":"?","deadline":9,"state":"maybe"}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseDocument([]byte(tt.data), thread)
			assert.ErrorIs(t, err, errBadDocument)
		})
	}
}

// FuzzParseDocument: the loader never panics, and whatever it accepts
// encodes to a document that parses back to the same messages.
func FuzzParseDocument(f *testing.F) {
	const thread = "a1b2c3d4e5f60718"
	for _, name := range []string{"thread.golden", "thread_v1.golden"} {
		golden, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(golden)
	}
	f.Add(appendDocument(nil, thread, threadDoc{}))
	f.Add([]byte(`{"version":1,"thread":"a1b2c3d4e5f60718","trimmed":0,"messages":[{"id":"x","epoch":1,"ts":"","author":"a","text":"\ud800 \xff"}]}`))
	f.Add([]byte(`{"VERSION":1,"Thread":"a1b2c3d4e5f60718","messages":null,"extra":{"a":[1,2]}}`))
	f.Add([]byte(`{"version":1,"thread":"a1b2c3d4e5f60718","trimmed":9223372036854775806,"messages":[{"id":"x","epoch":9223372036854775807,"author":"hermes"}]}`))
	f.Add([]byte(`{"version":2,"thread":"a1b2c3d4e5f60718","trimmed":0,"rev":9,"messages":[{"id":"x","epoch":1,"author":"hermes","rev":3,"reactions":{"👍":["hermes"]},"interaction":{"id":"ix_000000000000","type":"approval","prompt":"?","deadline":9,"state":"pending"}}]}`))
	f.Add([]byte("null"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := parseDocument(data, thread)
		if err != nil {
			return
		}
		again, err := parseDocument(appendDocument(nil, thread, d), thread)
		if err != nil {
			t.Fatalf("an accepted document re-encodes to one that does not parse: %v", err)
		}
		if again.trimmed != d.trimmed || again.trimmedRev != d.trimmedRev || again.rev != d.rev {
			t.Fatalf("marks %d/%d/%d became %d/%d/%d", d.trimmed, d.trimmedRev, d.rev, again.trimmed, again.trimmedRev, again.rev)
		}
		if len(again.msgs) != len(d.msgs) {
			t.Fatalf("%d messages became %d", len(d.msgs), len(again.msgs))
		}
		for i := range d.msgs {
			if !bytes.Equal(again.msgs[i].JSON2, d.msgs[i].JSON2) || !bytes.Equal(again.msgs[i].JSON, d.msgs[i].JSON) {
				t.Fatalf("message %d changed:\n%s\n%s", i, d.msgs[i].JSON2, again.msgs[i].JSON2)
			}
		}
	})
}
