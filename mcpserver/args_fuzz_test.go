package mcpserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// FuzzToolArguments: a tool's arguments are an agent's, untrusted (over
// stdio, or over HTTP from anywhere). Whatever JSON value they are, a
// tool (the waits aside: they block) never panics, and refuses with a
// contract code, never internal; what it takes it answers with a result
// that encodes; a send stores the text it was given, and open_thread
// answers a claim link whose token is the new thread's.
func FuzzToolArguments(f *testing.F) {
	st, err := filestore.OpenFile(f.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	const thread = "a1b2c3d4e5f60718"
	first, err := st.Append(context.Background(), thread, store.NewMessage{Text: "can you deploy build 412?"})
	if err != nil {
		f.Fatal(err)
	}
	v := &host.Verbs{Store: st, PublicURL: "https://chat.example.com"}
	var verbs []string
	for verb, b := range bindings {
		if b.waiting == "" {
			verbs = append(verbs, verb)
		}
	}
	slices.Sort(verbs)
	known := map[chatrelay.Code]bool{}
	for _, c := range chatrelay.Codes() {
		known[c] = true
	}
	seeds := map[string][]string{
		chatrelay.VerbListThreads: {`{}`, `null`, `{"x":1}`},
		chatrelay.VerbReadThread:  {`{"thread":"` + thread + `"}`, `{"thread":"` + thread + `","since":1,"limit":5}`, `{"thread":"` + thread + `","limit":-1}`, `{"thread":"../x"}`},
		chatrelay.VerbSend: {`{"thread":"` + thread + `","text":"deployed \u2705"}`, `{"thread":"` + thread + `","text":"x","client_id":"run-1"}`,
			`{"thread":"` + thread + `","text":"\ud83d"}`, `{"thread":"` + thread + `","text":"log","attachments":[{"name":"build.log","type":"text/plain","data":"aGVsbG8K"}]}`,
			`{"thread":"` + thread + `","text":"","attachments":[{"name":"x.png","data":"not base64!"}]}`, `{"thread":"` + thread + `","text":5}`},
		chatrelay.VerbRequestInput: {`{"thread":"` + thread + `","prompt":"Which branch?","choices":[{"value":"main","label":"Main"}],"timeout":60}`,
			`{"thread":"` + thread + `","prompt":"x","choices":[{"value":"a"},{"value":"a"}]}`, `{"thread":"` + thread + `","prompt":"x","timeout":-5}`},
		chatrelay.VerbRequestApproval: {`{"thread":"` + thread + `","summary":"Deploy 412?","title":"deploy","details":[{"label":"API_TOKEN","value":"s3cr3t"}]}`,
			`{"thread":"` + thread + `","summary":"x","timeout":1e9}`},
		chatrelay.VerbCheckInteraction:  {`{"thread":"` + thread + `","interaction_id":"ix_3f9a0c7e21b4"}`, `{"thread":"` + thread + `","interaction_id":"nope"}`},
		chatrelay.VerbCancelInteraction: {`{"thread":"` + thread + `","interaction_id":"ix_3f9a0c7e21b4"}`},
		chatrelay.VerbReact:             {`{"thread":"` + thread + `","message_id":"` + first.ID + `","emoji":"👍"}`, `{"thread":"` + thread + `","message_id":"` + first.ID + `","emoji":"a b","remove":true}`},
		chatrelay.VerbSendCard: {`{"thread":"` + thread + `","card":{"title":"Build 412","fallback_text":"Build 412 passed","blocks":[{"type":"link","url":"https://ci.example.com/412","label":"CI"}]}}`,
			`{"thread":"` + thread + `","card":{"title":"x","fallback_text":"x","blocks":[{"type":"link","url":"javascript:alert(1)","label":"x"}]}}`, `{"thread":"` + thread + `","card":null}`},
		chatrelay.VerbOpenThread: {`{"title":"Release 1.4","text":"Shall I tag it?"}`, `{}`, `{"title":"` + strings.Repeat("t", 161) + `"}`},
	}
	for i, verb := range verbs {
		for _, s := range seeds[verb] {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, pick uint8, args []byte) {
		if !json.Valid(args) { // MCP hands a tool a JSON value, never bytes that are none
			return
		}
		verb := verbs[int(pick)%len(verbs)]
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		out, _, err := bindings[verb].call(ctx, v, args)
		if err != nil {
			if c := chatrelay.CodeOf(err); !known[c] || c == chatrelay.Internal {
				t.Fatalf("%s %s: refused with code %q: %v", verb, args, c, err)
			}
			return
		}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("%s %s: the result does not encode: %v", verb, args, err)
		}
		switch verb {
		case chatrelay.VerbSend:
			in, _ := decode[host.SendInput](args)
			var r struct{ Message struct{ Text string } }
			if json.Unmarshal(b, &r) != nil || (len(in.Attachments) == 0 && r.Message.Text != in.Text) {
				t.Fatalf("send %s: stored %s", args, b)
			}
		case chatrelay.VerbOpenThread:
			r := out.(host.OpenThreadResult)
			_, tok, ok := strings.Cut(r.Link, "#t=")
			if !ok || !chatrelay.ValidToken(tok) || chatrelay.ThreadOf(tok) != r.Thread {
				t.Fatalf("open_thread %s: %+v", args, r)
			}
		}
	})
}
