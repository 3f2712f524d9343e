package transport

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// FuzzParsePost: the post parser never panics; what it accepts is a text the
// store may keep (valid UTF-8, not blank, at most 4000 code points) and a
// kind a browser may write; what it refuses carries a request code.
func FuzzParsePost(f *testing.F) {
	for _, seed := range []string{
		`{"text":"hi"}`,
		`{"text":"hi","kind":"agent"}`,
		`{"text":"hi","kind":"operator"}`,
		`{"text":"hi","kind":"hermes"}`,
		`{"text":"hi","kind":null}`,
		`{"text":"  "}`,
		`{"text":"\u0000"}`,
		`{"text":"\ud800"}`,
		"{\"text\":\"caf\xe9\"}",
		"{\"text\":\"ok\",\"other\":\"\xff\"}",
		`{"text":5}`,
		`{"text":"a","text":"b"}`,
		`{"Text":"capital key"}`,
		`[]`, `null`, `"str"`, ``, `{`, `{}{}`,
		`{"text":"` + strings.Repeat("é", 4000) + `"}`,
		`{"text":"` + strings.Repeat("é", 4001) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parsePost(data, principal{role: chatrelay.Owner})
		if err != nil {
			switch code := chatrelay.CodeOf(err); code {
			case chatrelay.InvalidJSON, chatrelay.InvalidText, chatrelay.InvalidKind, chatrelay.TextTooLong:
			default:
				t.Fatalf("refused with code %q: %v", code, err)
			}
			return
		}
		if !utf8.ValidString(p.Text) || strings.TrimSpace(p.Text) == "" || utf8.RuneCountInString(p.Text) > chatrelay.MaxText {
			t.Fatalf("accepted text %q", p.Text)
		}
		if p.Kind != chatrelay.Operator && p.Kind != chatrelay.Agent {
			t.Fatalf("accepted kind %q", p.Kind)
		}
		// The text accepted is the text sent, not one with its bad bytes repaired.
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(data, &raw); err != nil || !utf8.Valid(raw["text"]) {
			t.Fatalf("accepted a text sent as %q", raw["text"])
		}
		body := map[string]any{"text": p.Text, "kind": p.Kind}
		if p.Attachments != nil {
			body["attachments"] = p.Attachments
		}
		if p.ClientID != "" {
			body["client_id"] = p.ClientID
		}
		again, err := parsePost([]byte(jsonBody(body)), principal{role: chatrelay.Owner})
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("re-encoded post %+v parses to %+v, %v", p, again, err)
		}
	})
}

// FuzzParseSince: the cursor parser never panics, accepts exactly the
// non-negative decimal integers (and "" as 0), reading one too large for
// int64 as math.MaxInt64 ("nothing newer"), and refuses the rest with
// invalid_since.
func FuzzParseSince(f *testing.F) {
	for _, seed := range []string{"", "0", "00", "1792780800123", "-1", "+1", " 1", "1 ", "1.5", "1e3", "0x10",
		"9223372036854775807", "9223372036854775808", "99999999999999999999", "١٢٣", "abc"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSince(s)
		digits := s != "" && strings.Trim(s, "0123456789") == ""
		want, perr := strconv.ParseInt(s, 10, 64)
		switch {
		case s == "":
			if err != nil || n != 0 {
				t.Fatalf("empty since: %d, %v", n, err)
			}
		case digits && perr == nil:
			if err != nil || n != want {
				t.Fatalf("since %q: %d, %v; want %d", s, n, err, want)
			}
		case digits:
			if err != nil || n != math.MaxInt64 {
				t.Fatalf("since %q (past int64): %d, %v; want math.MaxInt64", s, n, err)
			}
		default:
			if chatrelay.CodeOf(err) != chatrelay.InvalidSince {
				t.Fatalf("since %q: %d, %v; want invalid_since", s, n, err)
			}
		}
	})
}

// FuzzTicketCheck: a ticket is untrusted input. Checking one never panics,
// and whatever it accepts was minted with the key: it names a valid thread,
// and re-signing its body gives the ticket back.
func FuzzTicketCheck(f *testing.F) {
	now := time.UnixMilli(1792778400123)
	tk := tickets{key: []byte("0123456789abcdef0123456789abcdef"), ttl: 15 * time.Minute, now: func() time.Time { return now }}
	good, _ := tk.mint("a1b2c3d4e5f60718", "", "")
	part, _ := tk.mint("a1b2c3d4e5f60718", "p_1a2b3c4d", "")
	file, _ := tk.mint("a1b2c3d4e5f60718", "", "at_0123456789ab")
	partFile, _ := tk.mint("a1b2c3d4e5f60718", "p_1a2b3c4d", "at_0123456789ab")
	for _, s := range []string{good, part, file, partFile, part[:len(part)-2], good + "x", "", ".", "t1...", "t1.a1b2c3d4e5f60718.1792778400123.",
		strings.Replace(good, "t1.", "t2.", 1), strings.Replace(file, "f1.", "t2.", 1), strings.ToUpper(good)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ticket string) {
		thread, pid, file, err := tk.check(ticket)
		if err != nil {
			if chatrelay.CodeOf(err) != chatrelay.InvalidTicket {
				t.Fatalf("check(%q): code %s, want invalid_ticket", ticket, chatrelay.CodeOf(err))
			}
			return
		}
		if !chatrelay.ValidThread(thread) {
			t.Fatalf("check(%q) accepted thread %q", ticket, thread)
		}
		i := strings.LastIndexByte(ticket, '.')
		want := "t1." + thread + "."
		switch {
		case pid != "" && file != "":
			want = "f2." + thread + "." + pid + "." + file + "."
		case file != "":
			want = "f1." + thread + "." + file + "."
		case pid != "":
			want = "t2." + thread + "." + pid + "."
		}
		if body := ticket[:i]; body+"."+tk.sign(body) != ticket || !strings.HasPrefix(body, want) {
			t.Fatalf("check(%q) accepted a ticket the key did not sign", ticket)
		}
	})
}

// FuzzParseBearer: the Authorization header is untrusted. The parser never
// panics, and accepts exactly "Bearer" (any case), spaces, and a share
// or device token, which it returns as it is.
func FuzzParseBearer(f *testing.F) {
	tok := "chp_" + strings.Repeat("A", 43)
	for _, s := range []string{"Bearer " + tok, "bearer  " + tok, "Bearer", "Bearer ", "Basic " + tok, tok, "Bearer " + tok + " x",
		"Bearer chp_" + strings.Repeat("=", 43), "Bearer " + strings.Repeat("a", 64), "Bearer\t" + tok} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got, ok := parseBearer(h)
		if !ok {
			if got != "" {
				t.Fatalf("parseBearer(%q) refused but returned %q", h, got)
			}
			return
		}
		if !chatrelay.ValidShareToken(got) && !chatrelay.ValidDeviceToken(got) || !strings.HasSuffix(h, got) || !strings.EqualFold(h[:6], "Bearer") {
			t.Fatalf("parseBearer(%q) accepted %q", h, got)
		}
	})
}

// FuzzRespondBody: a respond body is untrusted. Reading it never panics
// and never answers a foreign error: every refusal has the contract's
// code, and nothing past the checks reaches the store but a well-formed
// interaction id with exactly one of decision or value.
func FuzzRespondBody(f *testing.F) {
	for _, s := range []string{`{"interaction_id":"ix_3f9a0c7e21b4","decision":"approve"}`, `{"interaction_id":"ix_3f9a0c7e21b4","value":"main"}`,
		`{"interaction_id":5}`, `{}`, `[]`, `null`, `{"interaction_id":"ix_3f9a0c7e21b4","decision":"approve","value":"x"}`, "\xff", `{"value":"\ud800"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/api/chat/respond", strings.NewReader(body))
		w := httptest.NewRecorder()
		var b respondBody
		err := readJSON(w, r, &b)
		if err != nil {
			if c := chatrelay.CodeOf(err); c != chatrelay.InvalidJSON && c != chatrelay.BodyTooLarge {
				t.Fatalf("body %q: code %s", body, c)
			}
			return
		}
		ans, id, err := b.answer()
		if err != nil {
			if c := chatrelay.CodeOf(err); c != chatrelay.InvalidJSON && c != chatrelay.InvalidAnswer && c != chatrelay.NotFound {
				t.Fatalf("body %q: code %s", body, c)
			}
			return
		}
		if !chatrelay.InteractionIDPattern.MatchString(id) || (b.Decision != nil) == (b.Value != nil) {
			t.Fatalf("body %q reaches the store as %q %+v", body, id, ans)
		}
	})
}

// FuzzRouteBodies: the bodies of the owner's write routes (post, respond,
// react, invite) are untrusted. Whatever the body, the route answers
// with a status below 500 (or 503, the store's own refusal) and, when it
// refuses, the contract's JSON error with a known code; it never panics.
func FuzzRouteBodies(f *testing.F) {
	st, err := filestore.OpenFile(f.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	srv := NewServer(Config{Store: st, Log: slog.New(slog.DiscardHandler), Windows: chatrelay.Windows{PerThread: 1 << 30, PerIP: 1 << 30}})
	token := strings.Repeat("ab", 32)
	e, err := st.Append(context.Background(), chatrelay.ThreadOf(token), store.NewMessage{Text: "hello"})
	if err != nil {
		f.Fatal(err)
	}
	routes := []string{"/api/chat/post", "/api/chat/respond", "/api/chat/react", "/api/chat/participants"}
	for _, s := range []string{`{"text":"hi"}`, `{"text":"hi","client_id":"c-1"}`, `{"interaction_id":"ix_3f9a0c7e21b4","decision":"approve"}`,
		`{"message_id":"` + e.ID + `","emoji":"👍"}`, `{"message_id":"` + e.ID + `","emoji":"👍","remove":true}`,
		`{"name":"Alex","role":"commenter","expires_in":3600,"cap":5}`, `{"name":"\u202eAlex"}`, `{"expires_in":1e400}`, `[]`, `null`, "\xff"} {
		for i := range routes {
			f.Add(uint8(i), s)
		}
	}
	known := knownCodes()
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		path := routes[int(route)%len(routes)]
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("X-Chat-Token", token)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body)
		}
		if w.Code < 400 {
			return
		}
		var a struct {
			Success *bool          `json:"success"`
			Code    chatrelay.Code `json:"code"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || a.Success == nil || *a.Success || !known[a.Code] {
			t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body)
		}
	})
}

// knownCodes is the set of the code table's codes: an error answer's code
// is one of them.
func knownCodes() map[chatrelay.Code]bool {
	known := map[chatrelay.Code]bool{}
	for _, c := range chatrelay.Codes() {
		known[c] = true
	}
	return known
}
