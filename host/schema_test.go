package host_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

const thread = "00000000000000bb"

// TestVerbNames: the host's verbs are the bundle's.
func TestVerbNames(t *testing.T) {
	assert.Equal(t, "verbs", host.Names(), chatrelay.Verbs())
}

// TestInputFixtures: an input of every verb, written from the contract,
// decodes into the verb's Go input and encodes back the same, and is valid
// against <verb>.input.
func TestInputFixtures(t *testing.T) {
	ix := `"interaction_id":"ix_3f9a0c7e21b4"`
	th := `"thread":"` + thread + `"`
	schematest.Decode[host.ListThreadsInput](t, "list_threads.input", []byte(`{}`))
	schematest.Decode[host.ReadThreadInput](t, "read_thread.input", []byte(`{`+th+`,"since":1792780800123,"limit":20}`))
	schematest.Decode[host.WaitMessagesInput](t, "wait_messages.input", []byte(`{`+th+`,"since":1792780800123,"timeout":60}`))
	schematest.Decode[host.WaitMessagesInput](t, "wait_messages.input", []byte(`{}`))
	schematest.Decode[host.SendInput](t, "send.input", []byte(`{`+th+`,"text":"deployed","client_id":"reply-412"}`))
	schematest.Decode[host.RequestInputInput](t, "request_input.input", []byte(`{`+th+`,"prompt":"Which branch?","title":"branch",`+
		`"choices":[{"value":"main","label":"Main branch","description":"the default"},{"value":"release"}],"allow_text":true,"timeout":600,"client_id":"ask-1"}`))
	schematest.Decode[host.RequestApprovalInput](t, "request_approval.input", []byte(`{`+th+`,"summary":"Deploy build 412 to production?","title":"deploy",`+
		`"details":[{"label":"build","value":"412"}],"timeout":3600,"client_id":"ask-2"}`))
	schematest.Decode[host.InteractionInput](t, "check_interaction.input", []byte(`{`+th+`,`+ix+`}`))
	schematest.Decode[host.WaitInteractionInput](t, "wait_interaction.input", []byte(`{`+th+`,`+ix+`,"timeout":300}`))
	schematest.Decode[host.InteractionInput](t, "cancel_interaction.input", []byte(`{`+th+`,`+ix+`}`))
	schematest.Decode[host.ReactInput](t, "react.input", []byte(`{`+th+`,"message_id":"MSG-20261023-184000-a1b2c3","emoji":"👍","remove":true}`))
	schematest.Decode[host.SendCardInput](t, "send_card.input", []byte(`{`+th+`,"card":{"title":"Build 412","fallback_text":"Build 412 is green.",`+
		`"blocks":[{"type":"fields","fields":[{"label":"build","value":"412"}]},{"type":"link","url":"https://ci.example.com/412"}]},"client_id":"card-1"}`))

	for _, bad := range []struct{ def, json string }{
		{"send.input", `{` + th + `}`},                                                     // no text
		{"send.input", `{` + th + `,"text":"hi","kind":"operator"}`},                       // hermes's only
		{"send.input", `{"thread":"ABC","text":"hi"}`},                                     // not a thread id
		{"request_approval.input", `{` + th + `,"summary":"x","choices":[{"value":"a"}]}`}, // an approval has no choices
		{"request_input.input", `{` + th + `,"prompt":"x","timeout":1801}`},
		{"wait_messages.input", `{"timeout":301}`},
		{"react.input", `{` + th + `,"message_id":"MSG-20261023-184000-a1b2c3","emoji":""}`},
	} {
		schematest.Invalid(t, bad.def, []byte(bad.json))
	}
}

// TestResultsMatchTheSchema: every verb, run on a store, answers a result
// valid against <verb>.result.
func TestResultsMatchTheSchema(t *testing.T) {
	ctx := t.Context()
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	v := &host.Verbs{Store: st}
	first, err := st.Append(ctx, thread, store.NewMessage{Text: "can you deploy?"})
	assert.Success(t, err)

	valid := func(verb string, r any, err error) {
		t.Helper()
		assert.Success(t, err)
		b, err := json.Marshal(r)
		assert.Success(t, err)
		schematest.Valid(t, verb+".result", b)
	}
	r1, err := v.ListThreads(ctx, host.ListThreadsInput{})
	valid("list_threads", r1, err)
	r2, err := v.Send(ctx, host.SendInput{Thread: thread, Text: "on it", ClientID: "reply-1"})
	valid("send", r2, err)
	r2, err = v.Send(ctx, host.SendInput{Thread: thread, Text: "on it", ClientID: "reply-1"})
	valid("send", r2, err)
	assert.True(t, r2.Replayed, "the repeat was not a replay")
	in, err := v.RequestInput(ctx, host.RequestInputInput{Thread: thread, Prompt: "Which branch?", Choices: []chatrelay.Choice{{Value: "main"}}, AllowText: true})
	valid("request_input", in, err)
	ap, err := v.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Title: "deploy", Details: []chatrelay.Detail{{Label: "build", Value: "412"}}})
	valid("request_approval", ap, err)
	_, err = st.Change(ctx, thread, store.Change{Op: store.Respond, InteractionID: ap.Interaction.ID, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
	assert.Success(t, err)
	ck, err := v.CheckInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: ap.Interaction.ID})
	valid("check_interaction", ck, err)
	w, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: ap.Interaction.ID, Timeout: 1})
	valid("wait_interaction", w, err)
	assert.Equal(t, "approved", w.Interaction.State, chatrelay.Approved)
	cn, err := v.CancelInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: in.Interaction.ID})
	valid("cancel_interaction", cn, err)
	rx, err := v.React(ctx, host.ReactInput{Thread: thread, MessageID: first.ID, Emoji: "👍"})
	valid("react", rx, err)
	cd, err := v.SendCard(ctx, host.SendCardInput{Thread: thread, Card: &chatrelay.Card{FallbackText: "Build 412 is green.", Blocks: []chatrelay.Block{{Type: chatrelay.TextBlock, Text: "ok"}}}})
	valid("send_card", cd, err)
	rd, err := v.ReadThread(ctx, host.ReadThreadInput{Thread: thread})
	valid("read_thread", rd, err)
	wm, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: thread, Since: 1})
	valid("wait_messages", wm, err)
	assert.Equal(t, "operator messages", len(wm.Messages), 1)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	wt, err := v.WaitMessages(wctx, host.WaitMessagesInput{Thread: thread, Timeout: 1})
	valid("wait_messages", wt, err)
	assert.True(t, wt.TimedOut, "a wait from now on with nothing new did not time out")
}
