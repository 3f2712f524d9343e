package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/mcpserver"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/transport"
)

// The limit walk: every limit of chatrelay.Limits(), at the limit
// accepted and one past refused with the contract's code, on each binding
// that takes the value: the HTTP route, the CLI, and the MCP tool; and the
// bundle's entry for the body or the tool's input accepts the one and
// refuses the other (except the limits it cannot state: bytes). A limit
// added to the table without a walk here fails the test.

// walkEnv is a server, the CLI and the MCP server on one data folder.
type walkEnv struct {
	data, url, token, thread string
	st                       store.Store
	msgID                    string // an operator's message in thread
	closedIx                 string // an interaction already canceled
	cs                       *mcp.ClientSession
}

func newWalkEnv(t *testing.T) *walkEnv {
	t.Helper()
	w := &walkEnv{data: t.TempDir(), token: strings.Repeat("5a", 32)}
	w.thread = chatrelay.ThreadOf(w.token)
	st, err := filestore.OpenFile(w.data, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	w.st = st
	hs := httptest.NewServer(transport.NewServer(transport.Config{Store: st, Log: slog.New(slog.DiscardHandler),
		Windows: chatrelay.Windows{PerThread: 1 << 20, PerIP: 1 << 20}}))
	t.Cleanup(hs.Close)
	w.url = hs.URL
	e, err := st.Append(t.Context(), w.thread, store.NewMessage{Text: "a message to react to"})
	assert.Success(t, err)
	w.msgID = e.ID
	ix := w.ask(t, chatrelay.Approval)
	_, err = st.Change(t.Context(), w.thread, store.Change{Op: store.Cancel, InteractionID: ix, By: chatrelay.Hermes})
	assert.Success(t, err)
	w.closedIx = ix

	ct, stt := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ss, err := mcpserver.New(&host.Verbs{Store: st}, nil).Connect(ctx, stt, nil)
	assert.Success(t, err)
	w.cs, err = mcp.NewClient(&mcp.Implementation{Name: "walk", Version: "1"}, nil).Connect(ctx, ct, nil)
	assert.Success(t, err)
	t.Cleanup(func() {
		w.cs.Close()
		ss.Wait()
		cancel()
	})
	return w
}

// ask stores a pending interaction (an input takes any text) and returns
// its id.
func (w *walkEnv) ask(t *testing.T, typ chatrelay.InteractionType) string {
	t.Helper()
	e, err := w.st.Append(t.Context(), w.thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: typ, Prompt: "Which branch?", AllowText: typ == chatrelay.Input}})
	assert.Success(t, err)
	return e.Interaction.ID
}

// walk is how one limit is reached on each binding; n is the value's size
// in the limit's unit. A nil binding does not take the value.
type walk struct {
	code     chatrelay.Code
	http     func(t *testing.T, w *walkEnv, n int) (path, body string) // POSTed as the thread's owner
	cli      func(w *walkEnv, n int) (args []string, stdin string)
	mcp      func(w *walkEnv, n int) (verb string, args map[string]any)
	noSchema bool // a limit in bytes: JSON Schema cannot state it
	// custom walks a limit that is not a refusal past a size (a name cut
	// to its length, a count of grants or posts, the audit kept).
	custom func(t *testing.T, w *walkEnv, l chatrelay.Limit)
}

// cp is a string of n code points of two bytes each: a limit that counts
// bytes instead of code points would refuse it early.
func cp(n int) string { return strings.Repeat("é", n) }

// ascii is a string of n ASCII letters.
func ascii(n int) string { return strings.Repeat("a", n) }

func cardWith(fields map[string]any) map[string]any {
	c := map[string]any{"fallback_text": "x", "blocks": []any{}}
	for k, v := range fields {
		c[k] = v
	}
	return c
}

func blocks(b ...any) map[string]any { return cardWith(map[string]any{"blocks": b}) }

func times(n int, f func(i int) any) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// cardOfBytes is a card whose compact JSON (as the domain encodes it) is
// exactly n bytes.
func cardOfBytes(n int) json.RawMessage {
	c := chatrelay.Card{FallbackText: "x"}
	size := func() int { b, _ := json.Marshal(c); return len(b) }
	for size() < n {
		c.Blocks = append(c.Blocks, chatrelay.Block{Type: chatrelay.TextBlock, Text: ascii(chatrelay.LimitBlockText.Max)})
	}
	last := &c.Blocks[len(c.Blocks)-1]
	last.Text = last.Text[:len(last.Text)-(size()-n)]
	b, _ := json.Marshal(c)
	if len(b) != n {
		panic(fmt.Sprintf("cardOfBytes(%d): %d", n, len(b)))
	}
	return b
}

// cardCLI and cardMCP send a card built by mk on the CLI and over MCP.
func cardCLI(mk func(n int) map[string]any) func(w *walkEnv, n int) ([]string, string) {
	return func(w *walkEnv, n int) ([]string, string) {
		b, _ := json.Marshal(mk(n))
		return []string{"card", w.thread, "-"}, string(b)
	}
}

func cardMCP(mk func(n int) map[string]any) func(w *walkEnv, n int) (string, map[string]any) {
	return func(w *walkEnv, n int) (string, map[string]any) {
		return "send_card", map[string]any{"thread": w.thread, "card": mk(n)}
	}
}

// askCLI and askMCP ask for input (input true) or approval with extra
// flags or arguments.
func askCLI(input bool, extra func(n int) []string) func(w *walkEnv, n int) ([]string, string) {
	return func(w *walkEnv, n int) ([]string, string) {
		args := []string{"ask", w.thread, "--approval", "Deploy?"}
		if input {
			args = []string{"ask", w.thread, "--input", "Which branch?", "--allow-text"}
		}
		return append(args, extra(n)...), ""
	}
}

func askMCP(input bool, extra func(n int) map[string]any) func(w *walkEnv, n int) (string, map[string]any) {
	return func(w *walkEnv, n int) (string, map[string]any) {
		verb, args := "request_approval", map[string]any{"thread": w.thread, "summary": "Deploy?"}
		if input {
			verb, args = "request_input", map[string]any{"thread": w.thread, "prompt": "Which branch?", "allow_text": true}
		}
		for k, v := range extra(n) {
			args[k] = v
		}
		return verb, args
	}
}

var walks = map[string]walk{
	"post.text": {code: chatrelay.TextTooLong,
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			return "/api/chat/post", jsonOf(map[string]any{"text": cp(n)})
		},
		cli: func(w *walkEnv, n int) ([]string, string) { return []string{"reply", w.thread, cp(n)}, "" },
		mcp: func(w *walkEnv, n int) (string, map[string]any) {
			return "send", map[string]any{"thread": w.thread, "text": cp(n)}
		}},
	"post.body": {code: chatrelay.BodyTooLarge, noSchema: true,
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			head := `{"text":"x","pad":"`
			return "/api/chat/post", head + ascii(n-len(head)-2) + `"}`
		}},
	"input.title": {code: chatrelay.InvalidInteraction,
		cli: askCLI(true, func(n int) []string { return []string{"--title", cp(n)} }),
		mcp: askMCP(true, func(n int) map[string]any { return map[string]any{"title": cp(n)} })},
	"approval.title": {code: chatrelay.InvalidInteraction,
		cli: askCLI(false, func(n int) []string { return []string{"--title", cp(n)} }),
		mcp: askMCP(false, func(n int) map[string]any { return map[string]any{"title": cp(n)} })},
	"input.prompt": {code: chatrelay.InvalidInteraction,
		cli: func(w *walkEnv, n int) ([]string, string) {
			return []string{"ask", w.thread, "--input", cp(n), "--allow-text"}, ""
		},
		mcp: askMCP(true, func(n int) map[string]any { return map[string]any{"prompt": cp(n)} })},
	"approval.prompt": {code: chatrelay.InvalidInteraction,
		cli: func(w *walkEnv, n int) ([]string, string) { return []string{"ask", w.thread, "--approval", cp(n)}, "" },
		mcp: askMCP(false, func(n int) map[string]any { return map[string]any{"summary": cp(n)} })},
	"input.choices": {code: chatrelay.InvalidInteraction,
		cli: askCLI(true, func(n int) []string {
			var a []string
			for i := range n {
				a = append(a, "--choice", fmt.Sprintf("c%d", i))
			}
			return a
		}),
		mcp: askMCP(true, func(n int) map[string]any {
			return map[string]any{"choices": times(n, func(i int) any { return map[string]any{"value": fmt.Sprintf("c%d", i)} })}
		})},
	"choice.value": {code: chatrelay.InvalidInteraction,
		cli: askCLI(true, func(n int) []string { return []string{"--choice", cp(n)} }),
		mcp: askMCP(true, func(n int) map[string]any { return map[string]any{"choices": []any{map[string]any{"value": cp(n)}}} })},
	"choice.label": {code: chatrelay.InvalidInteraction,
		cli: askCLI(true, func(n int) []string { return []string{"--choice", "v=" + cp(n)} }),
		mcp: askMCP(true, func(n int) map[string]any {
			return map[string]any{"choices": []any{map[string]any{"value": "v", "label": cp(n)}}}
		})},
	"choice.description": {code: chatrelay.InvalidInteraction, // the CLI's --choice takes no description
		mcp: askMCP(true, func(n int) map[string]any {
			return map[string]any{"choices": []any{map[string]any{"value": "v", "description": cp(n)}}}
		})},
	"approval.details": {code: chatrelay.InvalidInteraction,
		cli: askCLI(false, func(n int) []string {
			var a []string
			for i := range n {
				a = append(a, "--detail", fmt.Sprintf("l%d=v", i))
			}
			return a
		}),
		mcp: askMCP(false, func(n int) map[string]any {
			return map[string]any{"details": times(n, func(i int) any { return map[string]any{"label": fmt.Sprintf("l%d", i), "value": "v"} })}
		})},
	"detail.label": {code: chatrelay.InvalidInteraction,
		cli: askCLI(false, func(n int) []string { return []string{"--detail", cp(n) + "=v"} }),
		mcp: askMCP(false, func(n int) map[string]any {
			return map[string]any{"details": []any{map[string]any{"label": cp(n), "value": "v"}}}
		})},
	"detail.value": {code: chatrelay.InvalidInteraction,
		cli: askCLI(false, func(n int) []string { return []string{"--detail", "l=" + cp(n)} }),
		mcp: askMCP(false, func(n int) map[string]any {
			return map[string]any{"details": []any{map[string]any{"label": "l", "value": cp(n)}}}
		})},
	"input.timeout": {code: chatrelay.InvalidInteraction,
		cli: askCLI(true, func(n int) []string { return []string{"--timeout", fmt.Sprintf("%ds", n)} }),
		mcp: askMCP(true, func(n int) map[string]any { return map[string]any{"timeout": n} })},
	"approval.timeout": {code: chatrelay.InvalidInteraction,
		cli: askCLI(false, func(n int) []string { return []string{"--timeout", fmt.Sprintf("%ds", n)} }),
		mcp: askMCP(false, func(n int) map[string]any { return map[string]any{"timeout": n} })},
	"answer.value": {code: chatrelay.InvalidAnswer, // only the owner answers, over HTTP
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			return "/api/chat/respond", jsonOf(map[string]any{"interaction_id": w.ask(t, chatrelay.Input), "value": cp(n)})
		}},
	"reaction.emoji": {code: chatrelay.InvalidEmoji,
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			return "/api/chat/react", jsonOf(map[string]any{"message_id": w.msgID, "emoji": strings.Repeat("👍", n)})
		},
		cli: func(w *walkEnv, n int) ([]string, string) {
			return []string{"react", w.thread, w.msgID, strings.Repeat("🎉", n)}, ""
		},
		mcp: func(w *walkEnv, n int) (string, map[string]any) {
			return "react", map[string]any{"thread": w.thread, "message_id": w.msgID, "emoji": strings.Repeat("👀", n)}
		}},
	"card": {code: chatrelay.InvalidCard, noSchema: true,
		// The CLI's file is indented, as a person writes it: the limit
		// counts the card as compact JSON, not the file's white space.
		cli: func(w *walkEnv, n int) ([]string, string) {
			var b bytes.Buffer
			if err := json.Indent(&b, cardOfBytes(n), "", "  "); err != nil {
				panic(err)
			}
			return []string{"card", w.thread, "-"}, b.String()
		},
		mcp: func(w *walkEnv, n int) (string, map[string]any) {
			return "send_card", map[string]any{"thread": w.thread, "card": cardOfBytes(n)}
		}},
	"card.title": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any { return cardWith(map[string]any{"title": cp(n)}) }),
		mcp: cardMCP(func(n int) map[string]any { return cardWith(map[string]any{"title": cp(n)}) })},
	"card.fallback_text": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any { return cardWith(map[string]any{"fallback_text": cp(n)}) }),
		mcp: cardMCP(func(n int) map[string]any { return cardWith(map[string]any{"fallback_text": cp(n)}) })},
	"card.blocks": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any {
			return blocks(times(n, func(int) any { return map[string]any{"type": "text", "text": "x"} })...)
		}),
		mcp: cardMCP(func(n int) map[string]any {
			return blocks(times(n, func(int) any { return map[string]any{"type": "text", "text": "x"} })...)
		})},
	"block.text": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any { return blocks(map[string]any{"type": "text", "text": cp(n)}) }),
		mcp: cardMCP(func(n int) map[string]any { return blocks(map[string]any{"type": "text", "text": cp(n)}) })},
	"block.fields": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any {
			return blocks(map[string]any{"type": "fields", "fields": times(n, func(int) any { return map[string]any{"label": "l", "value": "v"} })})
		}),
		mcp: cardMCP(func(n int) map[string]any {
			return blocks(map[string]any{"type": "fields", "fields": times(n, func(int) any { return map[string]any{"label": "l", "value": "v"} })})
		})},
	"field.label": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any {
			return blocks(map[string]any{"type": "fields", "fields": []any{map[string]any{"label": cp(n), "value": "v"}}})
		}),
		mcp: cardMCP(func(n int) map[string]any {
			return blocks(map[string]any{"type": "fields", "fields": []any{map[string]any{"label": cp(n), "value": "v"}}})
		})},
	"field.value": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any {
			return blocks(map[string]any{"type": "fields", "fields": []any{map[string]any{"label": "l", "value": cp(n)}}})
		}),
		mcp: cardMCP(func(n int) map[string]any {
			return blocks(map[string]any{"type": "fields", "fields": []any{map[string]any{"label": "l", "value": cp(n)}}})
		})},
	"link.url": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any {
			return blocks(map[string]any{"type": "link", "url": "https://example.com/" + ascii(n-len("https://example.com/"))})
		}),
		mcp: cardMCP(func(n int) map[string]any {
			return blocks(map[string]any{"type": "link", "url": "https://example.com/" + ascii(n-len("https://example.com/"))})
		})},
	"link.label": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any {
			return blocks(map[string]any{"type": "link", "url": "https://example.com/", "label": cp(n)})
		}),
		mcp: cardMCP(func(n int) map[string]any {
			return blocks(map[string]any{"type": "link", "url": "https://example.com/", "label": cp(n)})
		})},
	"code.text": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any { return blocks(map[string]any{"type": "code", "text": cp(n)}) }),
		mcp: cardMCP(func(n int) map[string]any { return blocks(map[string]any{"type": "code", "text": cp(n)}) })},
	"code.language": {code: chatrelay.InvalidCard,
		cli: cardCLI(func(n int) map[string]any {
			return blocks(map[string]any{"type": "code", "text": "x", "language": cp(n)})
		}),
		mcp: cardMCP(func(n int) map[string]any {
			return blocks(map[string]any{"type": "code", "text": "x", "language": cp(n)})
		})},
	"thread.title": {code: chatrelay.TextTooLong,
		cli: func(w *walkEnv, n int) ([]string, string) { return []string{"open", "--title", cp(n)}, "" },
		mcp: func(w *walkEnv, n int) (string, map[string]any) {
			return "open_thread", map[string]any{"title": cp(n), "text": "x"}
		}},
	"client_id": {code: chatrelay.InvalidClientID, // a prefix per binding: one client_id names one message
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			return "/api/chat/post", jsonOf(map[string]any{"text": "x", "client_id": "h" + ascii(n-1)})
		},
		cli: func(w *walkEnv, n int) ([]string, string) {
			return []string{"reply", w.thread, "x", "--client-id", "c" + ascii(n-1)}, ""
		},
		mcp: func(w *walkEnv, n int) (string, map[string]any) {
			return "send", map[string]any{"thread": w.thread, "text": "x", "client_id": "m" + ascii(n-1)}
		}},
	"wait.timeout": {code: chatrelay.InvalidJSON, // the CLI's waits are in rounds of the most
		mcp: func(w *walkEnv, n int) (string, map[string]any) {
			return "wait_interaction", map[string]any{"thread": w.thread, "interaction_id": w.closedIx, "timeout": n}
		}},
	"participant.expires_in": {code: chatrelay.InvalidExpiry,
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			return "/api/chat/participants", jsonOf(map[string]any{"name": "e", "role": "viewer", "expires_in": n})
		},
		cli: func(w *walkEnv, n int) ([]string, string) {
			return []string{"share", w.thread, "--name", "e", "--role", "viewer", "--expires", fmt.Sprintf("%ds", n)}, ""
		}},
	"device.expires_in": {code: chatrelay.InvalidExpiry,
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			return "/api/chat/devices", jsonOf(map[string]any{"name": "e", "expires_in": n})
		},
		cli: func(w *walkEnv, n int) ([]string, string) {
			return []string{"device", w.thread, "--name", "e", "--expires-in", fmt.Sprintf("%ds", n)}, ""
		}},
	"device.active": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// A thread of its own: l.Max active devices (over HTTP and by the
		// CLI), then one more is refused by both, and its share links are
		// not counted among them.
		other := newWalkEnv(t)
		status, b := other.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": "a guest", "role": "viewer"}))
		assert.True(t, status == 201, "a share link: %d %s", status, b)
		for i := range l.Max {
			if i%2 == 0 {
				status, b := other.post(t, "/api/chat/devices", jsonOf(map[string]any{"name": fmt.Sprint("d", i)}))
				assert.True(t, status == 201, "device %d: %d %s", i+1, status, b)
				continue
			}
			r := runCLI(t, nil, "", "device", other.thread, "--name", fmt.Sprint("d", i), "--data", other.data, "--fsync", "never")
			assert.Success(t, r.err)
		}
		status, b = other.post(t, "/api/chat/devices", jsonOf(map[string]any{"name": "one more"}))
		assert.True(t, status == 409 && strings.Contains(string(b), `"device_limit"`), "HTTP past %d: %d %s", l.Max, status, b)
		r := runCLI(t, nil, "", "device", other.thread, "--name", "one more", "--data", other.data, "--fsync", "never")
		assert.Equal(t, "CLI past the limit", chatrelay.CodeOf(r.err), chatrelay.DeviceLimit)
	}},
	"participant.cap": {code: chatrelay.InvalidCap,
		http: func(t *testing.T, w *walkEnv, n int) (string, string) {
			return "/api/chat/participants", jsonOf(map[string]any{"name": "c", "cap": n})
		},
		cli: func(w *walkEnv, n int) ([]string, string) {
			return []string{"share", w.thread, "--name", "c", "--cap", fmt.Sprint(n)}, ""
		}},
	"participant.name": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// Never refused for its length: cleaned, then cut to it.
		for _, n := range []int{l.Max, l.Max + 1} {
			status, b := w.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": cp(n), "role": "viewer"}))
			var in struct{ Participant chatrelay.Participant }
			json.Unmarshal(b, &in)
			assert.True(t, status == 201 && in.Participant.Name == cp(l.Max), "HTTP name of %d: %d %s", n, status, b)
			r := runCLI(t, nil, "", "share", w.thread, "--name", cp(n), "--role", "viewer", "--json", "--data", w.data, "--fsync", "never")
			assert.True(t, r.err == nil && strings.Contains(r.stdout, `"name":"`+cp(l.Max)+`"`), "CLI name of %d: %v %s", n, r.err, r.stdout)
		}
	}},
	"participant.grants": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// A thread of its own: l.Max active grants, then one more is refused.
		other := newWalkEnv(t)
		for i := range l.Max {
			status, b := other.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": fmt.Sprint("g", i), "role": "viewer"}))
			assert.True(t, status == 201, "grant %d: %d %s", i+1, status, b)
		}
		status, b := other.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": "one more"}))
		assert.True(t, status == 409 && strings.Contains(string(b), `"participant_limit"`), "HTTP past %d: %d %s", l.Max, status, b)
		r := runCLI(t, nil, "", "share", other.thread, "--name", "one more", "--data", other.data)
		assert.Equal(t, "CLI past the limit", chatrelay.CodeOf(r.err), chatrelay.ParticipantLimit)
	}},
	"participant.pending": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		status, b := w.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": "p", "role": "commenter"}))
		assert.Equal(t, "invite", status, 201)
		var in struct{ Token string }
		json.Unmarshal(b, &in)
		_, err := w.st.Append(t.Context(), w.thread, store.NewMessage{Author: chatrelay.Hermes, Text: "answered", MustExist: true})
		assert.Success(t, err)
		for i := range l.Max + 1 {
			req, _ := http.NewRequest("POST", w.url+"/api/chat/post", strings.NewReader(jsonOf(map[string]any{"text": fmt.Sprint("p", i)})))
			req.Header.Set("Authorization", "Bearer "+in.Token)
			res, err := http.DefaultClient.Do(req)
			assert.Success(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if i < l.Max {
				assert.True(t, res.StatusCode == 201, "post %d waiting for hermes: %d %s", i+1, res.StatusCode, body)
			} else {
				assert.True(t, res.StatusCode == 429 && strings.Contains(string(body), `"too_many_messages"`), "post %d: %d %s", i+1, res.StatusCode, body)
			}
		}
	}},
	"message.reactions": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// l.Max distinct emoji on a message (from the owner, hermes's CLI
		// and MCP tool), then a new one is refused by each; one it has is taken.
		e, err := w.st.Append(t.Context(), w.thread, store.NewMessage{Text: "react to me", MustExist: true})
		assert.Success(t, err)
		for i := range l.Max {
			status, b := w.post(t, "/api/chat/react", jsonOf(map[string]any{"message_id": e.ID, "emoji": fmt.Sprint("e", i)}))
			assert.True(t, status == 200, "reaction %d: %d %s", i+1, status, b)
		}
		status, b := w.post(t, "/api/chat/react", jsonOf(map[string]any{"message_id": e.ID, "emoji": "one-more"}))
		assert.True(t, status == 409 && strings.Contains(string(b), `"too_many_reactions"`), "HTTP past %d: %d %s", l.Max, status, b)
		r := runCLI(t, nil, "", "react", w.thread, e.ID, "one-more", "--data", w.data, "--fsync", "never")
		assert.Equal(t, "CLI past the limit", chatrelay.CodeOf(r.err), chatrelay.TooManyReactions)
		res, err := w.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName("react"), Arguments: map[string]any{"thread": w.thread, "message_id": e.ID, "emoji": "one-more"}})
		assert.Success(t, err)
		var te mcpserver.ToolError
		sc, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(sc, &te)
		assert.True(t, res.IsError && te.Code == chatrelay.TooManyReactions, "MCP past the limit: %s", sc)
		r = runCLI(t, nil, "", "react", w.thread, e.ID, "e0", "--data", w.data, "--fsync", "never")
		assert.Success(t, r.err) // hermes joins a reaction the message has
	}},
	"participant.invites_per_hour": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// A thread of its own: l.Max invites in the hour (over HTTP and by
		// the CLI; revoking some to stay under the active grants' limit),
		// then one more is refused by both, revoked ones counted.
		other := newWalkEnv(t)
		parts := other.st.(store.Participants)
		var ids []string
		for i := range l.Max {
			if i == chatrelay.LimitActiveGrants.Max {
				for _, id := range ids[:l.Max-chatrelay.LimitActiveGrants.Max+1] {
					_, err := parts.Revoke(t.Context(), other.thread, id)
					assert.Success(t, err)
				}
			}
			if i%2 == 0 {
				status, b := other.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": fmt.Sprint("i", i), "role": "viewer"}))
				assert.True(t, status == 201, "invite %d: %d %s", i+1, status, b)
				var in struct{ Participant chatrelay.Participant }
				json.Unmarshal(b, &in)
				ids = append(ids, in.Participant.ID)
				continue
			}
			r := runCLI(t, nil, "", "share", other.thread, "--name", fmt.Sprint("i", i), "--role", "viewer", "--json", "--data", other.data, "--fsync", "never")
			assert.Success(t, r.err)
			var in struct{ Participant chatrelay.Participant }
			json.Unmarshal([]byte(r.stdout), &in)
			ids = append(ids, in.Participant.ID)
		}
		status, b := other.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": "one more"}))
		assert.True(t, status == 429 && strings.Contains(string(b), `"rate_limited"`), "HTTP past %d: %d %s", l.Max, status, b)
		r := runCLI(t, nil, "", "share", other.thread, "--name", "one more", "--data", other.data, "--fsync", "never")
		assert.Equal(t, "CLI past the limit", chatrelay.CodeOf(r.err), chatrelay.RateLimited)
	}},
	"participant.ended_listed": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// On a clock of its own: a revoked grant is listed l.Max seconds
		// after its revoke, and not a second later.
		c := newClockedEnv(t)
		status, b := c.do(t, "POST", "/api/chat/participants", jsonOf(map[string]any{"name": "gone", "role": "viewer"}))
		assert.Equal(t, "invite", status, 201)
		var in struct{ Participant chatrelay.Participant }
		json.Unmarshal(b, &in)
		status, _ = c.do(t, "DELETE", "/api/chat/participants/"+in.Participant.ID, "")
		assert.Equal(t, "revoke", status, 200)
		c.clk.Advance(time.Duration(l.Max) * time.Second)
		assert.Equal(t, "listed at the limit", c.listed(t), 1)
		c.clk.Advance(time.Second)
		assert.Equal(t, "listed past the limit", c.listed(t), 0)
	}},
	"participant.ended_kept": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// On a clock of its own: l.Max+1 grants that expired, an hour
		// apart in batches; l.Max are listed.
		c := newClockedEnv(t)
		for made := 0; made <= l.Max; {
			for range min(chatrelay.LimitActiveGrants.Max, l.Max+1-made) {
				status, b := c.do(t, "POST", "/api/chat/participants", jsonOf(map[string]any{"name": "e", "role": "viewer", "expires_in": 3600}))
				assert.True(t, status == 201, "invite %d: %d %s", made+1, status, b)
				made++
			}
			c.clk.Advance(time.Hour + time.Minute)
		}
		assert.Equal(t, "ended grants listed", c.listed(t), l.Max)
	}},
	"audit.events": {custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		parts := w.st.(store.Participants)
		for i := range l.Max + 1 {
			assert.Success(t, parts.Audit(t.Context(), w.thread, chatrelay.AuditEvent{At: int64(i + 1), Event: chatrelay.AuditFirstUse, Participant: "p_00000000"}))
		}
		req, _ := http.NewRequest("GET", w.url+"/api/chat/participants/audit", nil)
		req.Header.Set("X-Chat-Token", w.token)
		res, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		var a struct{ Events []chatrelay.AuditEvent }
		assert.Success(t, json.NewDecoder(res.Body).Decode(&a))
		res.Body.Close()
		assert.True(t, len(a.Events) == l.Max && a.Events[0].At == 2, "the audit keeps the newest %d: %d from %d", l.Max, len(a.Events), a.Events[0].At)
	}},
}

// clockedEnv is a server on a file store of its own whose clock the test
// sets, with one message in its owner's thread.
type clockedEnv struct {
	clk        *testclock.Clock
	url, token string
}

func newClockedEnv(t *testing.T) *clockedEnv {
	t.Helper()
	c := &clockedEnv{clk: testclock.New(time.Now()), token: strings.Repeat("6b", 32)}
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Now: c.clk.Now, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	hs := httptest.NewServer(transport.NewServer(transport.Config{Store: st, Now: c.clk.Now, Log: slog.New(slog.DiscardHandler)}))
	t.Cleanup(hs.Close)
	c.url = hs.URL
	_, err = st.Append(t.Context(), chatrelay.ThreadOf(c.token), store.NewMessage{Text: "hello"})
	assert.Success(t, err)
	return c
}

// do sends a request as the thread's owner.
func (c *clockedEnv) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", c.token)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	return res.StatusCode, b
}

// listed is how many grants GET /api/chat/participants lists.
func (c *clockedEnv) listed(t *testing.T) int {
	t.Helper()
	status, b := c.do(t, "GET", "/api/chat/participants", "")
	assert.Equal(t, "list "+string(b), status, 200)
	var list struct{ Participants []chatrelay.Participant }
	assert.Success(t, json.Unmarshal(b, &list))
	return len(list.Participants)
}

// post POSTs body to path as the thread's owner.
func (w *walkEnv) post(t *testing.T, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", w.url+path, strings.NewReader(body))
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", w.token)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	return res.StatusCode, b
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestLimitWalk(t *testing.T) {
	t.Parallel()
	w := newWalkEnv(t)
	for _, l := range chatrelay.Limits() {
		t.Run(l.Name, func(t *testing.T) {
			wk, ok := walks[l.Name]
			if !ok {
				t.Fatalf("the limit %s has no walk: add one to walks", l.Name)
			}
			if wk.custom != nil {
				wk.custom(t, w, l)
				return
			}
			assert.True(t, wk.http != nil || wk.cli != nil || wk.mcp != nil, "%s: the walk takes no binding", l.Name)
			// One past first: it is refused and stores nothing, so the
			// value at the limit is new when it is accepted.
			for _, n := range []int{l.Max + 1, l.Max} {
				over := n > l.Max
				if wk.http != nil {
					path, body := wk.http(t, w, n)
					w.checkHTTP(t, l, wk, n, over, path, body)
				}
				if wk.cli != nil {
					args, stdin := wk.cli(w, n)
					r := runCLI(t, nil, stdin, append(args, "--data", w.data, "--fsync", "never")...)
					if over {
						assert.Equal(t, fmt.Sprintf("CLI %s at %d: code (%v)", l.Name, n, r.err), chatrelay.CodeOf(r.err), wk.code)
					} else {
						assert.True(t, r.err == nil, "CLI %s at its limit %d: %v", l.Name, n, r.err)
					}
				}
				if wk.mcp != nil {
					verb, args := wk.mcp(w, n)
					w.checkMCP(t, l, wk, n, over, verb, args)
				}
			}
		})
	}
	for name := range walks {
		found := false
		for _, l := range chatrelay.Limits() {
			found = found || l.Name == name
		}
		assert.True(t, found, "a walk for %s, which is not a limit", name)
	}
}

func (w *walkEnv) checkHTTP(t *testing.T, l chatrelay.Limit, wk walk, n int, over bool, path, body string) {
	t.Helper()
	if !wk.noSchema {
		def, err := schematest.BodyDef("POST", path)
		assert.Success(t, err)
		w.checkSchema(t, fmt.Sprintf("HTTP %s at %d", l.Name, n), def, []byte(body), over)
	}
	req, err := http.NewRequest("POST", w.url+path, strings.NewReader(body))
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", w.token)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	schematest.Answer(t, "POST", path, res.StatusCode, res.Header, b)
	if !over {
		assert.True(t, res.StatusCode < 300, "HTTP %s at its limit %d: %d %s", l.Name, n, res.StatusCode, b)
		return
	}
	var e struct{ Code chatrelay.Code }
	json.Unmarshal(b, &e)
	assert.Equal(t, fmt.Sprintf("HTTP %s at %d: code (%d %s)", l.Name, n, res.StatusCode, b), e.Code, wk.code)
}

func (w *walkEnv) checkMCP(t *testing.T, l chatrelay.Limit, wk walk, n int, over bool, verb string, args map[string]any) {
	t.Helper()
	if !wk.noSchema {
		b, _ := json.Marshal(args)
		w.checkSchema(t, fmt.Sprintf("MCP %s at %d", l.Name, n), verb+".input", b, over)
	}
	r, err := w.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName(verb), Arguments: args})
	assert.Success(t, err)
	var e mcpserver.ToolError
	b, _ := json.Marshal(r.StructuredContent)
	json.Unmarshal(b, &e)
	if !over {
		assert.True(t, !r.IsError, "MCP %s at its limit %d: %s", l.Name, n, b)
		return
	}
	assert.True(t, r.IsError, "MCP %s at %d: accepted", l.Name, n)
	assert.Equal(t, fmt.Sprintf("MCP %s at %d: code", l.Name, n), e.Code, wk.code)
}

// checkSchema: the bundle's entry accepts a value at the limit and
// refuses one past it.
func (w *walkEnv) checkSchema(t *testing.T, what, def string, data []byte, over bool) {
	t.Helper()
	err := schematest.Check(def, data)
	if over && err == nil {
		t.Errorf("schema: %s accepts %s one past the limit", def, what)
	}
	if !over && err != nil {
		t.Errorf("schema: %s refuses %s at the limit: %v", def, what, err)
	}
}
