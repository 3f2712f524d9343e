package transport

// Contract Part 1, row by row, through a real HTTP server on each real
// store backend (storetest.Run: subtests "file", the file store in a temp
// folder, and "redis", the Redis store on the test binary's private
// redis-server with the Redis rate windows). Clocks are injected: nothing
// here sleeps. A few tests are about files and run on the file store only;
// each says why.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// manualClock is a clock the test sets; it feeds both the store and the
// rate limiter.

// countingStore counts the calls that reach the store.
type countingStore struct {
	store.Store
	calls atomic.Int64
}

func (s *countingStore) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	s.calls.Add(1)
	return s.Store.Append(ctx, thread, m)
}

func (s *countingStore) Since(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	s.calls.Add(1)
	return s.Store.Since(ctx, thread, since, limit)
}

// contractEnv is one server on its own store: a data folder of its own, or
// a key prefix of its own on the shared Redis.
type contractEnv struct {
	url     string
	backend *storetest.Backend
	data    string // file store: the data folder; documents are in data/chat
	clock   *testclock.Clock
	store   *countingStore
	// redisWindows: the rate windows are Redis's, on Redis's own clock
	// (not the test's: they do not move with clock).
	redisWindows bool
}

type envOptions struct {
	Prefix     string
	Trusted    []netip.Prefix
	Windows    chatrelay.Windows // zero: windows too wide to matter
	MaxThreads int
	Log        *slog.Logger // the server's; nil: discarded
}

// at is 2026-10-23T18:40:00.123Z, the contract's example instant.
var at = time.Date(2026, 10, 23, 18, 40, 0, 123e6, time.UTC)

// newContractEnv starts a server on a new store of the backend. The store
// and the rate windows run on the test's clock; on Redis the windows are
// Redis's, on its own clock, as on a node of several.
func newContractEnv(t *testing.T, backend string, o envOptions) *contractEnv {
	t.Helper()
	clk := testclock.New(at)
	quiet := slog.New(slog.DiscardHandler)
	be := storetest.Open(t, backend, storetest.Options{MaxThreads: o.MaxThreads, Now: clk.Now, Log: quiet})
	if o.Windows == (chatrelay.Windows{}) {
		o.Windows = chatrelay.Windows{PerThread: 1000, PerIP: 1000}
	}
	var limiter chatrelay.RateLimiter = NewMemoryLimiter(o.Windows, clk.Now)
	shared, _, redisWindows := be.SharedLimiters(o.Windows.PerThread, o.Windows.PerIP, o.Windows.Window, 0, 0)
	if redisWindows {
		limiter = shared
	}
	st := &countingStore{Store: be.Store}
	log := o.Log
	if log == nil {
		log = quiet
	}
	srv := httptest.NewServer(NewServer(Config{
		Store:   st,
		Limiter: limiter,
		Prefix:  o.Prefix,
		Trusted: o.Trusted,
		Log:     log,
	}))
	t.Cleanup(srv.Close)
	return &contractEnv{url: srv.URL, backend: be, data: be.Dir, clock: clk, store: st, redisWindows: redisWindows}
}

// answer is a response, read whole.
type answer struct {
	status int
	header http.Header
	body   string
}

// request sends a request; hdr is name, value pairs.
func (e *contractEnv) request(t *testing.T, method, path string, body io.Reader, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	assert.Success(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1]) // a name given twice is sent twice
	}
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	schematest.Answer(t, method, path, res.StatusCode, res.Header, b)
	return answer{status: res.StatusCode, header: res.Header, body: string(b)}
}

func (e *contractEnv) post(t *testing.T, token, body string, hdr ...string) answer {
	t.Helper()
	return e.request(t, "POST", "/api/chat/post", strings.NewReader(body),
		append([]string{"X-Chat-Token", token, "Content-Type", "application/json"}, hdr...)...)
}

// say posts text as an operator and expects 201.
func (e *contractEnv) say(t *testing.T, token, text string) postResult {
	t.Helper()
	a := e.post(t, token, jsonBody(map[string]string{"text": text}))
	assert.Equal(t, "status of post "+a.body, a.status, http.StatusCreated)
	var r postResult
	assert.Success(t, json.Unmarshal([]byte(a.body), &r))
	return r
}

func (e *contractEnv) poll(t *testing.T, token, query string) answer {
	t.Helper()
	return e.request(t, "GET", "/api/chat/poll"+query, nil, "X-Chat-Token", token)
}

// nothingStored checks that the store holds no thread at all: for the file
// store, not even a file in the chat folder.
func (e *contractEnv) nothingStored(t *testing.T) {
	t.Helper()
	assert.Equal(t, "stored threads", e.backend.Threads(t), []string(nil))
	if e.backend.Name == storetest.File {
		assert.Equal(t, "files in the chat folder", e.chatFiles(t), []string(nil))
	} else {
		// No key but the deployment's generation, which every read and
		// write creates (redisstore/gen.go).
		keys := slices.DeleteFunc(append([]string{}, e.backend.Keys(t)...), func(k string) bool { return k == "generation" })
		assert.Equal(t, "Redis keys", keys, []string{})
	}
}

// chatFiles lists what is in the data folder's chat directory (file store).
func (e *contractEnv) chatFiles(t *testing.T) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(e.data, "chat"))
	assert.Success(t, err)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

type postResult struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
	Epoch   int64  `json:"epoch"`
	TS      string `json:"ts"`
	Thread  string `json:"thread"`
}

type pollResult struct {
	Success  bool                `json:"success"`
	Thread   string              `json:"thread"`
	Messages []chatrelay.Message `json:"messages"`
	Awaiting bool                `json:"awaiting"`
	Cursor   int64               `json:"cursor"`
}

func decodePoll(t *testing.T, a answer) pollResult {
	t.Helper()
	assert.Equal(t, "poll status of "+a.body, a.status, http.StatusOK)
	var p pollResult
	assert.Success(t, json.Unmarshal([]byte(a.body), &p))
	return p
}

func jsonBody(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// token returns a well-formed token, different for each n.
func token(n int) string { return fmt.Sprintf("%064x", n) }

// threadOfToken is the contract's thread: the first 16 hex characters of
// sha256 of the token's 64 ASCII characters.
func threadOfToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])[:16]
}

// topKeys returns the keys of a JSON object in the order they are written.
func topKeys(t *testing.T, body string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	tok, err := dec.Token()
	assert.Success(t, err)
	assert.Equal(t, "opening token of "+body, tok, json.Token(json.Delim('{')))
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		assert.Success(t, err)
		keys = append(keys, k.(string))
		var skip json.RawMessage
		assert.Success(t, dec.Decode(&skip))
	}
	return keys
}

// errorAnswer is the contract's error body.
type errorAnswer struct {
	Success      bool   `json:"success"`
	Error        string `json:"error"`
	Code         string `json:"code"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMS *int64 `json:"retry_after_ms"`
	See          string `json:"see"`
}

// checkError checks the shape every error shares and returns the body.
func checkError(t *testing.T, a answer, status int, code chatrelay.Code) errorAnswer {
	t.Helper()
	assert.Equal(t, "status of "+a.body, a.status, status)
	assert.Equal(t, "Content-Type", a.header.Get("Content-Type"), "application/json")
	var e errorAnswer
	assert.Success(t, json.Unmarshal([]byte(a.body), &e))
	assert.Equal(t, "code", e.Code, string(code))
	assert.Equal(t, "success", e.Success, false)
	assert.Equal(t, "retryable", e.Retryable, code == chatrelay.RateLimited)
	assert.True(t, strings.TrimSpace(e.Error) != "", "no words for a person in %s", a.body)
	assert.Equal(t, "first keys", topKeys(t, a.body)[:4], []string{"success", "error", "code", "retryable"})
	for _, leak := range []string{"goroutine", "panic", "/tmp", os.TempDir(), ".json"} {
		assert.True(t, !strings.Contains(a.body, leak), "error body leaks %q: %s", leak, a.body)
	}
	return e
}

func TestPostAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		now       time.Time
		wantEpoch int64
		wantTS    string
		wantIDAt  string // the id's date and time
	}{
		{"the contract's instant", at, 1792780800123, "2026-10-23T18:40:00+00:00", "20261023-184000"},
		{"ts truncates, never rounds", time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC), 1798761599999, "2026-12-31T23:59:59+00:00", "20261231-235959"},
		{"a whole second", time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC), 1798859045000, "2027-01-02T03:04:05+00:00", "20270102-030405"},
		{"a host clock in another zone", at.In(time.FixedZone("CEST", 2*3600)), 1792780800123, "2026-10-23T18:40:00+00:00", "20261023-184000"},
	}
	storetest.Run(t, func(t *testing.T, backend string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				e := newContractEnv(t, backend, envOptions{})
				e.clock.Set(tt.now)
				tok := token(7)
				a := e.post(t, tok, `{"text": "message body", "kind": "operator"}`)
				assert.Equal(t, "status", a.status, http.StatusCreated)
				assert.Equal(t, "Content-Type", a.header.Get("Content-Type"), "application/json")
				want := regexp.MustCompile(`^\{"success":true,"id":"MSG-` + tt.wantIDAt + `-[0-9a-f]{6}","epoch":` +
					fmt.Sprint(tt.wantEpoch) + `,"ts":"` + regexp.QuoteMeta(tt.wantTS) + `","thread":"` + threadOfToken(tok) + `"\}$`)
				assert.True(t, want.MatchString(a.body), "201 body\n got: %s\nwant: %s", a.body, want)
			})
		}
	})
}

func TestEpochsStrictlyIncreaseWithinAMillisecond(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := newContractEnv(t, backend, envOptions{})
		tok := token(1)
		var posts []postResult
		for i := range 4 {
			posts = append(posts, e.say(t, tok, fmt.Sprint("same millisecond ", i)))
		}
		e.clock.Advance(-time.Hour) // the host clock steps back
		posts = append(posts, e.say(t, tok, "after the clock stepped back"))

		ids := map[string]bool{}
		for i, p := range posts {
			assert.Equal(t, "epoch", p.Epoch, at.UnixMilli()+int64(i))
			assert.Equal(t, "ts", p.TS, "2026-10-23T18:40:00+00:00")
			assert.True(t, !ids[p.ID], "id %s repeats", p.ID)
			ids[p.ID] = true
		}
		// A strict > cursor drops nothing.
		p := decodePoll(t, e.poll(t, tok, fmt.Sprintf("?since=%d", posts[1].Epoch)))
		assert.Equal(t, "messages after the second", len(p.Messages), 3)
		assert.Equal(t, "first after the cursor", p.Messages[0].ID, posts[2].ID)
	})
}

func TestPoll(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		t.Run("a thread with no file answers empty and creates nothing", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{})
			tok := token(3)
			for _, q := range []string{"", "?since=", "?since=0", "?since=1792780800123"} {
				a := e.poll(t, tok, q)
				assert.Equal(t, "status", a.status, http.StatusOK)
				assert.Equal(t, "body", a.body, `{"success":true,"thread":"`+threadOfToken(tok)+`","messages":[],"awaiting":false,"cursor":0}`)
			}
			e.nothingStored(t)
		})

		t.Run("byte for byte", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{})
			tok := token(4)
			first := e.say(t, tok, "hello")
			e.clock.Advance(1500 * time.Millisecond)
			a := e.post(t, tok, `{"text":"<b>\"hi\"</b>","kind":"agent"}`)
			assert.Equal(t, "status", a.status, http.StatusCreated)
			var second postResult
			assert.Success(t, json.Unmarshal([]byte(a.body), &second))

			want := `{"success":true,"thread":"` + threadOfToken(tok) + `","messages":[` +
				`{"id":"` + first.ID + `","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"hello"},` +
				`{"id":"` + second.ID + `","epoch":1792780801623,"ts":"2026-10-23T18:40:01+00:00","author":"agent","text":"<b>\"hi\"</b>"}` +
				`],"awaiting":true,"cursor":1792780801623}`
			got := e.poll(t, tok, "")
			assert.Equal(t, "status", got.status, http.StatusOK)
			assert.Equal(t, "Content-Type", got.header.Get("Content-Type"), "application/json")
			assert.Equal(t, "body", got.body, want)
		})

		t.Run("pages and cursor", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{})
			tok := token(5)
			var epochs []int64
			for i := range 60 {
				epochs = append(epochs, e.say(t, tok, fmt.Sprint("m", i)).Epoch)
				e.clock.Advance(time.Second)
			}
			newest := epochs[59]
			tests := []struct {
				name        string
				query       string
				first, last int // indexes of the messages expected, oldest first
			}{
				{"no since: newest 50", "", 10, 59},
				{"empty since: newest 50", "?since=", 10, 59},
				{"since 0: newest 50", "?since=0", 10, 59},
				{"since 1: every message after it, no page limit", "?since=1", 0, 59},
				{"since an epoch: strictly after it", fmt.Sprintf("?since=%d", epochs[54]), 55, 59},
				{"since between two epochs", fmt.Sprintf("?since=%d", epochs[54]+1), 55, 59},
				{"since the cursor: nothing", fmt.Sprintf("?since=%d", newest), 60, 59},
				{"since the future: nothing", fmt.Sprintf("?since=%d", newest+1e9), 60, 59},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					p := decodePoll(t, e.poll(t, tok, tt.query))
					var got []string
					for _, m := range p.Messages {
						got = append(got, m.Text)
					}
					var want []string
					for i := tt.first; i <= tt.last; i++ {
						want = append(want, fmt.Sprint("m", i))
					}
					assert.Equal(t, "messages", got, want)
					assert.Equal(t, "cursor", p.Cursor, newest)
					assert.Equal(t, "awaiting", p.Awaiting, true)
					assert.Equal(t, "thread", p.Thread, threadOfToken(tok))
				})
			}
		})

		t.Run("awaiting follows the last author", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{})
			tok := token(6)
			thread := threadOfToken(tok)
			e.say(t, tok, "question")
			reply, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, Text: "answer", MustExist: true})
			assert.Success(t, err)
			p := decodePoll(t, e.poll(t, tok, ""))
			assert.Equal(t, "awaiting after hermes", p.Awaiting, false)
			assert.Equal(t, "cursor", p.Cursor, reply.Epoch)
			assert.Equal(t, "last author", p.Messages[len(p.Messages)-1].Author, chatrelay.Hermes)

			a := e.post(t, tok, `{"text":"thanks","kind":"agent"}`)
			assert.Equal(t, "status", a.status, http.StatusCreated)
			p = decodePoll(t, e.poll(t, tok, ""))
			assert.Equal(t, "awaiting after agent", p.Awaiting, true)
			assert.Equal(t, "last author", p.Messages[len(p.Messages)-1].Author, chatrelay.Agent)
		})

		if backend != storetest.File {
			return // the rest is about the thread's file
		}
		t.Run("a poll never writes", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{})
			tok := token(8)
			e.say(t, tok, "hello")
			path := filepath.Join(e.data, "chat", threadOfToken(tok)+".json")
			before, err := os.ReadFile(path)
			assert.Success(t, err)
			files := e.chatFiles(t)
			e.clock.Advance(time.Hour)
			decodePoll(t, e.poll(t, tok, ""))
			after, err := os.ReadFile(path)
			assert.Success(t, err)
			assert.Equal(t, "document", string(after), string(before))
			assert.Equal(t, "files", e.chatFiles(t), files)
		})
	})
}

func TestTextLimits(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		tests := []struct {
			name string
			text string
			want int
		}{
			{"4000 ASCII", strings.Repeat("a", 4000), http.StatusCreated},
			{"4000 two-byte code points", strings.Repeat("é", 4000), http.StatusCreated},
			{"4000 four-byte code points (16000 bytes)", strings.Repeat("😀", 4000), http.StatusCreated},
			{"4001 ASCII", strings.Repeat("a", 4001), http.StatusRequestEntityTooLarge},
			{"4001 two-byte code points", strings.Repeat("é", 4001), http.StatusRequestEntityTooLarge},
			{"4001 four-byte code points", strings.Repeat("😀", 4001), http.StatusRequestEntityTooLarge},
			{"surrounding blanks count", " " + strings.Repeat("a", 4000), http.StatusRequestEntityTooLarge},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				e := newContractEnv(t, backend, envOptions{})
				tok := token(9)
				a := e.post(t, tok, jsonBody(map[string]string{"text": tt.text}))
				if tt.want != http.StatusCreated {
					ea := checkError(t, a, tt.want, chatrelay.TextTooLong)
					assert.Equal(t, "error", ea.Error, "text too long (max 4000 chars)")
					e.nothingStored(t)
					return
				}
				assert.Equal(t, "status", a.status, http.StatusCreated)
				p := decodePoll(t, e.poll(t, tok, ""))
				assert.Equal(t, "stored text is the posted text, whole", p.Messages[0].Text, tt.text)
			})
		}
	})
}

// Escapes are decoded, and the text is stored exactly as the client meant it.
func TestEscapedText(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := newContractEnv(t, backend, envOptions{})
		tok := token(12)
		a := e.post(t, tok, `{"text":"\ud83d\ude00 \"q\" \\ \u00e9\n\t\/ <b>&amp;</b>"}`)
		assert.Equal(t, "status of "+a.body, a.status, http.StatusCreated)
		p := decodePoll(t, e.poll(t, tok, ""))
		assert.Equal(t, "text", p.Messages[0].Text, "😀 \"q\" \\ é\n\t/ <b>&amp;</b>")
	})
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		// body returns a valid post of exactly n bytes.
		body := func(n int) string {
			const head, tail = `{"text":"hi","pad":"`, `"}`
			return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
		}
		tests := []struct {
			name    string
			size    int
			chunked bool // no Content-Length: the limit is met while reading
			want    int
		}{
			{"32768 bytes", 32768, false, http.StatusCreated},
			{"32769 bytes", 32769, false, http.StatusRequestEntityTooLarge},
			{"32768 bytes, chunked", 32768, true, http.StatusCreated},
			{"32769 bytes, chunked", 32769, true, http.StatusRequestEntityTooLarge},
			{"1 MiB", 1 << 20, false, http.StatusRequestEntityTooLarge},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				e := newContractEnv(t, backend, envOptions{})
				var r io.Reader = strings.NewReader(body(tt.size))
				if tt.chunked {
					r = io.MultiReader(r) // hides the length from net/http
				}
				a := e.request(t, "POST", "/api/chat/post", r, "X-Chat-Token", token(1), "Content-Type", "application/json")
				if tt.want == http.StatusCreated {
					assert.Equal(t, "status of "+a.body, a.status, tt.want)
					return
				}
				checkError(t, a, tt.want, chatrelay.BodyTooLarge)
				e.nothingStored(t)
			})
		}
	})
}

// Every refusal that one request can earn: status, code, words, retryable,
// and nothing touched the store (auth and checks come before disk).
func TestErrors(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		tok := token(2)
		post := func(body string) func(e *contractEnv, t *testing.T) answer {
			return func(e *contractEnv, t *testing.T) answer { return e.post(t, tok, body) }
		}
		poll := func(query string) func(e *contractEnv, t *testing.T) answer {
			return func(e *contractEnv, t *testing.T) answer { return e.poll(t, tok, query) }
		}
		req := func(method, path string, hdr ...string) func(e *contractEnv, t *testing.T) answer {
			return func(e *contractEnv, t *testing.T) answer {
				return e.request(t, method, path, strings.NewReader(`{"text":"hi"}`), hdr...)
			}
		}
		const unauthorized = "missing or malformed X-Chat-Token"
		tests := []struct {
			name   string
			do     func(e *contractEnv, t *testing.T) answer
			status int
			code   chatrelay.Code
			words  string // the frozen words, if any
			allow  string // the Allow header of a 405
			see    string // the "see" of a 410
		}{
			{name: "not JSON", do: post("hello"), status: 400, code: chatrelay.InvalidJSON},
			{name: "empty body", do: post(""), status: 400, code: chatrelay.InvalidJSON},
			{name: "JSON array", do: post(`[{"text":"hi"}]`), status: 400, code: chatrelay.InvalidJSON},
			{name: "JSON string", do: post(`"hi"`), status: 400, code: chatrelay.InvalidJSON},
			{name: "JSON null", do: post(`null`), status: 400, code: chatrelay.InvalidJSON},
			{name: "truncated object", do: post(`{"text":"hi"`), status: 400, code: chatrelay.InvalidJSON},
			{name: "two objects", do: post(`{"text":"hi"}{"text":"again"}`), status: 400, code: chatrelay.InvalidJSON},

			{name: "no text", do: post(`{"kind":"agent"}`), status: 400, code: chatrelay.InvalidText},
			{name: "text is a number", do: post(`{"text":5}`), status: 400, code: chatrelay.InvalidText},
			{name: "text is null", do: post(`{"text":null}`), status: 400, code: chatrelay.InvalidText},
			{name: "text is an array", do: post(`{"text":["hi"]}`), status: 400, code: chatrelay.InvalidText},
			{name: "empty text", do: post(`{"text":""}`), status: 400, code: chatrelay.InvalidText},
			{name: "white space only", do: post(`{"text":" \n\t\r "}`), status: 400, code: chatrelay.InvalidText},
			{name: "escaped white space only", do: post(`{"text":"\u00a0\u3000\n"}`), status: 400, code: chatrelay.InvalidText},
			{name: "invalid UTF-8 bytes", do: post("{\"text\":\"caf\xe9 au lait\"}"), status: 400, code: chatrelay.InvalidText},
			{name: "a lone continuation byte", do: post("{\"text\":\"\x80\"}"), status: 400, code: chatrelay.InvalidText},
			{name: "an overlong encoding", do: post("{\"text\":\"\xc0\xaf\"}"), status: 400, code: chatrelay.InvalidText},
			{name: "a lone high surrogate (a sliced emoji)", do: post(`{"text":"smile \ud83d"}`), status: 400, code: chatrelay.InvalidText},
			{name: "a lone low surrogate", do: post(`{"text":"\ude00 tail"}`), status: 400, code: chatrelay.InvalidText},
			{name: "a high surrogate before a letter", do: post(`{"text":"\ud83d\u0041"}`), status: 400, code: chatrelay.InvalidText},

			{name: "kind hermes", do: post(`{"text":"hi","kind":"hermes"}`), status: 400, code: chatrelay.InvalidKind},
			{name: "kind in capitals", do: post(`{"text":"hi","kind":"Operator"}`), status: 400, code: chatrelay.InvalidKind},
			{name: "kind empty", do: post(`{"text":"hi","kind":""}`), status: 400, code: chatrelay.InvalidKind},
			{name: "kind a number", do: post(`{"text":"hi","kind":1}`), status: 400, code: chatrelay.InvalidKind},
			{name: "kind unknown", do: post(`{"text":"hi","kind":"admin"}`), status: 400, code: chatrelay.InvalidKind},

			{name: "since negative", do: poll("?since=-1"), status: 400, code: chatrelay.InvalidSince},
			{name: "since words", do: poll("?since=yesterday"), status: 400, code: chatrelay.InvalidSince},
			{name: "since fraction", do: poll("?since=1.5"), status: 400, code: chatrelay.InvalidSince},
			{name: "since exponent", do: poll("?since=1e3"), status: 400, code: chatrelay.InvalidSince},
			{name: "since plus sign", do: poll("?since=%2B5"), status: 400, code: chatrelay.InvalidSince},
			{name: "since with a space", do: poll("?since=%205"), status: 400, code: chatrelay.InvalidSince},
			{name: "since hex", do: poll("?since=0x10"), status: 400, code: chatrelay.InvalidSince},
			{name: "since an ISO time", do: poll("?since=2026-10-23T18:40:00%2B00:00"), status: 400, code: chatrelay.InvalidSince},
			// A query that does not decode is not dropped as if the cursor
			// were absent (the newest 50 again: repeats for a resuming client).
			{name: "since with a bad escape", do: poll("?since=%zz"), status: 400, code: chatrelay.InvalidSince},
			{name: "since with a trailing %", do: poll("?since=5%"), status: 400, code: chatrelay.InvalidSince},
			{name: "since and a semicolon", do: poll("?since=5;"), status: 400, code: chatrelay.InvalidSince},
			{name: "v and a semicolon", do: poll("?v=3;"), status: 400, code: chatrelay.InvalidVersion},

			{name: "post without token", do: req("POST", "/api/chat/post"), status: 401, code: chatrelay.Unauthorized, words: unauthorized},
			{name: "poll without token", do: req("GET", "/api/chat/poll"), status: 401, code: chatrelay.Unauthorized, words: unauthorized},
			{name: "token in capitals", do: req("POST", "/api/chat/post", "X-Chat-Token", strings.ToUpper(token(0xabc))), status: 401, code: chatrelay.Unauthorized, words: unauthorized},
			{name: "token of 63 hex", do: req("POST", "/api/chat/post", "X-Chat-Token", token(1)[1:]), status: 401, code: chatrelay.Unauthorized, words: unauthorized},
			{name: "token of 65 hex", do: req("GET", "/api/chat/poll", "X-Chat-Token", token(1)+"0"), status: 401, code: chatrelay.Unauthorized, words: unauthorized},
			{name: "token not hex", do: req("POST", "/api/chat/post", "X-Chat-Token", strings.Repeat("g", 64)), status: 401, code: chatrelay.Unauthorized, words: unauthorized},
			// Two tokens name two threads: which one is meant is a guess.
			{name: "two tokens", do: req("GET", "/api/chat/poll", "X-Chat-Token", tok, "X-Chat-Token", token(3)), status: 401, code: chatrelay.Unauthorized, words: unauthorized},
			{name: "token with a bad body", do: func(e *contractEnv, t *testing.T) answer {
				return e.request(t, "POST", "/api/chat/post", strings.NewReader("not json"), "X-Chat-Token", "nope")
			}, status: 401, code: chatrelay.Unauthorized, words: unauthorized},

			{name: "GET post", do: req("GET", "/api/chat/post", "X-Chat-Token", tok), status: 405, code: chatrelay.MethodNotAllowed, words: "Method not allowed", allow: "POST"},
			{name: "PUT post", do: req("PUT", "/api/chat/post", "X-Chat-Token", tok), status: 405, code: chatrelay.MethodNotAllowed, words: "Method not allowed", allow: "POST"},
			{name: "POST poll", do: req("POST", "/api/chat/poll", "X-Chat-Token", tok), status: 405, code: chatrelay.MethodNotAllowed, words: "Method not allowed", allow: "GET"},
			{name: "DELETE poll.php", do: req("DELETE", "/api/chat/poll.php"), status: 405, code: chatrelay.MethodNotAllowed, words: "Method not allowed", allow: "GET"},
			{name: "GET post.php", do: req("GET", "/api/chat/post.php"), status: 405, code: chatrelay.MethodNotAllowed, words: "Method not allowed", allow: "POST"},

			{name: "retired route, no headers", do: req("POST", "/api/debug/agent-replies.php"), status: 410, code: chatrelay.Gone, see: "/api/chat/post"},
			{name: "retired route, with a token", do: req("POST", "/api/debug/agent-replies.php", "X-Chat-Token", tok, "Content-Type", "application/json"), status: 410, code: chatrelay.Gone, see: "/api/chat/post"},
			{name: "retired route, malformed token", do: req("POST", "/api/debug/agent-replies.php", "X-Chat-Token", "x"), status: 410, code: chatrelay.Gone, see: "/api/chat/post"},
			{name: "retired route without .php", do: req("POST", "/api/debug/agent-replies"), status: 410, code: chatrelay.Gone, see: "/api/chat/post"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				e := newContractEnv(t, backend, envOptions{})
				a := tt.do(e, t)
				ea := checkError(t, a, tt.status, tt.code)
				if tt.words != "" {
					assert.Equal(t, "error words", ea.Error, tt.words)
				}
				assert.Equal(t, "Allow", a.header.Get("Allow"), tt.allow)
				assert.Equal(t, "see", ea.See, tt.see)
				assert.Equal(t, "Retry-After", a.header.Get("Retry-After"), "")
				assert.True(t, ea.RetryAfterMS == nil, "retry_after_ms on a %d", a.status)
				e.nothingStored(t)
				assert.Equal(t, "calls that reached the store", e.store.calls.Load(), int64(0))
			})
		}
	})
}

// TestRateLimits: the windows slide, per thread and per client address,
// over accepted posts only, and a refusal says the wait in ms and in whole
// seconds rounded up. The in-memory windows run on the test's clock, so
// the waits are exact; Redis's run on Redis's own clock, so the waits are
// bounded: at most what the test's clock would give, less at most the
// time the posts took.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		// expectLimited checks a refusal whose wait is wantMS on the
		// test's clock, the first post it waits on sent at sent (Redis's
		// windows: the wait is between wantMS less the time since and
		// wantMS).
		expectLimited := func(t *testing.T, e *contractEnv, a answer, wantMS int64, wantHeader string, sent time.Time) {
			t.Helper()
			ea := checkError(t, a, http.StatusTooManyRequests, chatrelay.RateLimited)
			assert.True(t, strings.HasPrefix(ea.Error, "rate limit"), "error %q does not start with \"rate limit\"", ea.Error)
			assert.True(t, ea.RetryAfterMS != nil, "no retry_after_ms in %s", a.body)
			if e.redisWindows {
				got, took := *ea.RetryAfterMS, time.Since(sent).Milliseconds()+1
				assert.True(t, got <= wantMS && got >= wantMS-took, "retry_after_ms %d, want between %d (less the %d ms since the post it waits on) and %d", got, wantMS-took, took, wantMS)
				wantMS, wantHeader = got, strconv.FormatInt((got+999)/1000, 10)
			}
			assert.Equal(t, "retry_after_ms", *ea.RetryAfterMS, wantMS)
			assert.Equal(t, "Retry-After", a.header.Get("Retry-After"), wantHeader)
			assert.Equal(t, "keys", topKeys(t, a.body), []string{"success", "error", "code", "retryable", "retry_after_ms"})
		}

		t.Run("per thread, sliding", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{Windows: chatrelay.Windows{PerThread: 2, PerIP: 100, Window: 10 * time.Minute}})
			if e.redisWindows {
				t.Skip("on Redis's clock: per thread, sliding on Redis's clock")
			}
			e.say(t, token(1), "one")
			e.clock.Advance(1500 * time.Millisecond)
			e.say(t, token(1), "two")
			e.clock.Advance(time.Second) // 2.5s after the first post
			expectLimited(t, e, e.post(t, token(1), `{"text":"three"}`), 597500, "598", time.Time{})
			e.say(t, token(2), "another thread is not limited")
			e.clock.Advance(597500*time.Millisecond - 1)
			expectLimited(t, e, e.post(t, token(1), `{"text":"three"}`), 1, "1", time.Time{})
			e.clock.Advance(1) // the first post leaves the window
			e.say(t, token(1), "three")
			expectLimited(t, e, e.post(t, token(1), `{"text":"four"}`), 1500, "2", time.Time{})
		})

		t.Run("per thread, sliding on Redis's clock", func(t *testing.T) {
			t.Parallel()
			const win = 1500 * time.Millisecond
			e := newContractEnv(t, backend, envOptions{Windows: chatrelay.Windows{PerThread: 2, PerIP: 100, Window: win}})
			if !e.redisWindows {
				t.Skip("the in-memory windows: per thread, sliding")
			}
			e.clock.Advance(time.Hour) // the node's clock does not move Redis's windows
			sent := time.Now()
			e.say(t, token(1), "one")
			second := time.Now()
			e.say(t, token(1), "two")
			expectLimited(t, e, e.post(t, token(1), `{"text":"three"}`), win.Milliseconds(), "", sent)
			e.say(t, token(2), "another thread is not limited")
			assert.Eventually(t, 10*time.Second, "the first post to leave the window", func() bool {
				a := e.post(t, token(1), `{"text":"three"}`)
				if a.status != http.StatusCreated {
					expectLimited(t, e, a, win.Milliseconds(), "", sent)
				}
				return a.status == http.StatusCreated
			})
			assert.True(t, time.Since(sent) >= win-time.Millisecond, "a post passed %s after the first, before the window (%s) was over", time.Since(sent), win)
			// The second post may have left the window too (it was sent
			// about as long after the first as this one after the third);
			// if not, the wait is until it does.
			if a := e.post(t, token(1), `{"text":"four"}`); a.status != http.StatusCreated {
				expectLimited(t, e, a, win.Milliseconds(), "", second)
			}
		})

		t.Run("per client IP, across tokens", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{Windows: chatrelay.Windows{PerThread: 100, PerIP: 3, Window: time.Minute}})
			sent := time.Now()
			for i := range 3 {
				e.say(t, token(i), "hi")
			}
			expectLimited(t, e, e.post(t, token(99), `{"text":"hi"}`), 60000, "60", sent)
		})

		t.Run("refused posts do not count", func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, backend, envOptions{Windows: chatrelay.Windows{PerThread: 2, PerIP: 2}, MaxThreads: 1})
			sent := time.Now()
			e.say(t, token(1), "one")
			for range 3 {
				checkError(t, e.post(t, token(1), `{"text":"  "}`), 400, chatrelay.InvalidText)
				checkError(t, e.post(t, token(2), `{"text":"new thread"}`), 507, chatrelay.ThreadLimit)
			}
			e.say(t, token(1), "two")
			expectLimited(t, e, e.post(t, token(1), `{"text":"three"}`), 600000, "600", sent)
		})
	})
}

func TestThreadLimitAnswer(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		var logged syncBuffer
		e := newContractEnv(t, backend, envOptions{MaxThreads: 2, Log: slog.New(slog.NewTextHandler(&logged, nil))})
		e.say(t, token(1), "one")
		e.say(t, token(2), "two")
		ea := checkError(t, e.post(t, token(3), `{"text":"three"}`), http.StatusInsufficientStorage, chatrelay.ThreadLimit)
		assert.Equal(t, "error words", ea.Error, "thread limit reached")
		// The server is full, not failing: a warning, never an error line per refused client.
		assert.True(t, !strings.Contains(logged.String(), "level=ERROR") && strings.Contains(logged.String(), "level=WARN msg=\"thread limit reached"),
			"the log of a refused creation:\n%s", logged.String())
		// Existing threads keep working; the refused one is not stored and polls empty.
		e.say(t, token(1), "one again")
		e.say(t, token(2), "two again")
		p := decodePoll(t, e.poll(t, token(3), ""))
		assert.Equal(t, "messages of the refused thread", len(p.Messages), 0)
		assert.True(t, !slices.Contains(e.backend.Threads(t), threadOfToken(token(3))), "the refused thread is stored")
		if backend == storetest.File {
			_, err := os.Stat(filepath.Join(e.data, "chat", threadOfToken(token(3))+".json"))
			assert.True(t, os.IsNotExist(err), "the refused thread has a file: %v", err)
		}
	})
}

func TestPHPAliasesAndPrefix(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		tests := []struct {
			name   string
			prefix string // Config.Prefix
			mount  string // where the routes are
			post   string
			poll   string
		}{
			{"plain", "", "", "/api/chat/post", "/api/chat/poll"},
			{".php", "", "", "/api/chat/post.php", "/api/chat/poll.php"},
			{"post plain, poll .php", "", "", "/api/chat/post", "/api/chat/poll.php"},
			{"prefix", "/spaces/newos4", "/spaces/newos4", "/api/chat/post", "/api/chat/poll"},
			{"prefix with a trailing slash, .php", "/spaces/newos4/", "/spaces/newos4", "/api/chat/post.php", "/api/chat/poll.php"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				e := newContractEnv(t, backend, envOptions{Prefix: tt.prefix})
				tok := token(11)
				a := e.request(t, "POST", tt.mount+tt.post, strings.NewReader(`{"text":"hi"}`), "X-Chat-Token", tok)
				assert.Equal(t, "post status of "+a.body, a.status, http.StatusCreated)
				p := decodePoll(t, e.request(t, "GET", tt.mount+tt.poll+"?since=0", nil, "X-Chat-Token", tok))
				assert.Equal(t, "messages", len(p.Messages), 1)
				checkError(t, e.request(t, "GET", tt.mount+tt.post, nil, "X-Chat-Token", tok), 405, chatrelay.MethodNotAllowed)
				gone := checkError(t, e.request(t, "POST", tt.mount+"/api/debug/agent-replies.php", nil), 410, chatrelay.Gone)
				assert.Equal(t, "see (frozen, whatever the prefix)", gone.See, "/api/chat/post")
				assert.True(t, strings.Contains(gone.Error, tt.mount+"/api/chat/post"), "error words %q name the mounted route", gone.Error)
				if tt.mount != "" { // nothing is served outside the prefix
					a := e.request(t, "POST", tt.post, strings.NewReader(`{"text":"hi"}`), "X-Chat-Token", tok)
					assert.Equal(t, "status outside the prefix", a.status, http.StatusNotFound)
					p := decodePoll(t, e.request(t, "GET", tt.mount+tt.poll, nil, "X-Chat-Token", tok))
					assert.Equal(t, "messages", len(p.Messages), 1)
				}
			})
		}
	})
}

// The client IP is the TCP peer (here always 127.0.0.1); X-Forwarded-For
// counts only when that peer is a trusted proxy. With one post per IP, the
// rate window shows which IP the server saw.
func TestClientIPAndTrustedProxies(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		type step struct {
			xff  string
			want int
		}
		tests := []struct {
			name    string
			trusted []netip.Prefix
			steps   []step
		}{
			{"no trusted proxy: X-Forwarded-For is ignored", nil, []step{
				{"203.0.113.1", 201},
				{"203.0.113.2", 429}, // same peer
				{"", 429},
			}},
			{"a trusted proxy: X-Forwarded-For names the client", loopback, []step{
				{"203.0.113.1", 201},
				{"203.0.113.2", 201},
				{"203.0.113.1", 429},
				{"198.51.100.7, 203.0.113.2", 429}, // the nearest hop is the client; the rest is the client's to forge
				{"203.0.113.3, 127.0.0.2", 201},    // a chain of trusted proxies is skipped
				{"", 201},                          // no header: the proxy itself
				{"not-an-address", 429},            // a malformed hop trusts nothing beyond the proxy
			}},
			{"a proxy that is not trusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, []step{
				{"203.0.113.1", 201},
				{"203.0.113.2", 429},
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				e := newContractEnv(t, backend, envOptions{Trusted: tt.trusted, Windows: chatrelay.Windows{PerThread: 100, PerIP: 1}})
				for i, s := range tt.steps {
					hdr := []string{"X-Chat-Token", token(100 + i)} // a new thread each time
					if s.xff != "" {
						hdr = append(hdr, "X-Forwarded-For", s.xff)
					}
					a := e.request(t, "POST", "/api/chat/post", strings.NewReader(`{"text":"hi"}`), hdr...)
					assert.Equal(t, fmt.Sprintf("step %d (X-Forwarded-For %q) status", i, s.xff), a.status, s.want)
				}
			})
		}
	})
}

// TestUnreadableThread: a thread whose stored messages do not parse (a
// file store document cut short; on Redis an entry of the log written by
// hand) answers 503 thread_unreadable, without Retry-After or a host
// path, to a poll, a v2 poll and a post, the same on every store; the
// refused post stores nothing (before the fix a post on Redis answered
// 201, a write that could never be read), and other threads keep
// working.
func TestUnreadableThread(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := newContractEnv(t, backend, envOptions{})
		bad, good := token(21), token(22)
		e.say(t, good, "before")
		e.say(t, bad, "before")
		raw := e.backend.CorruptThread(t, threadOfToken(bad))
		checkError(t, e.poll(t, bad, ""), http.StatusServiceUnavailable, chatrelay.ThreadUnreadable)
		stored := raw()
		e.clock.Advance(time.Second) // a post's epoch is past the broken entry's

		for _, a := range []answer{e.post(t, bad, `{"text":"hi"}`), e.poll(t, bad, ""), e.poll(t, bad, "?since=5"), e.poll(t, bad, "?v=2"),
			e.post(t, bad, `{"text":"hi","client_id":"c-1"}`)} {
			checkError(t, a, http.StatusServiceUnavailable, chatrelay.ThreadUnreadable)
			assert.Equal(t, "Retry-After", a.header.Get("Retry-After"), "")
			assert.True(t, e.data == "" || !strings.Contains(a.body, e.data), "the answer names a host path: %s", a.body)
		}
		assert.Equal(t, "the thread's stored data", raw(), stored)

		e.say(t, good, "after")
		p := decodePoll(t, e.poll(t, good, ""))
		assert.Equal(t, "other thread", len(p.Messages), 2)
	})
}

// TestNothingServedFromTheDataFolder is about files: no path serves the
// data folder's documents or lock files. File store only (Redis data has
// no path to guess).
func TestNothingServedFromTheDataFolder(t *testing.T) {
	t.Parallel()
	e := newContractEnv(t, storetest.File, envOptions{})
	tok := token(31)
	thread := threadOfToken(tok)
	const marker = "only-in-the-thread-file-7f3a"
	e.say(t, tok, marker)
	paths := []string{
		"/chat/" + thread + ".json",
		"/data/chat/" + thread + ".json",
		"/" + thread + ".json",
		"/chat/",
		"/chat",
		"/api/chat/" + thread + ".json",
		"/api/chat/" + thread,
		"/api/chat/",
		"/api/chat/threads",
		"/api/chat/list",
		"/api/chat/poll/" + thread,
		"/..%2fchat%2f" + thread + ".json",
		"/%2e%2e/chat/" + thread + ".json",
		"/chat/." + thread + ".json.lock",
		"/" + filepath.Base(e.data) + "/chat/" + thread + ".json",
	}
	for _, p := range paths {
		for _, hdr := range [][]string{nil, {"X-Chat-Token", tok}} {
			a := e.request(t, "GET", p, nil, hdr...)
			assert.True(t, !strings.Contains(a.body, marker) && !strings.Contains(a.body, thread),
				"GET %s (headers %q) answered %d with the thread:\n%s", p, hdr, a.status, a.body)
		}
	}
}

func TestUnknownAPIRoute(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := newContractEnv(t, backend, envOptions{})
		a := e.request(t, "GET", "/api/chat/nothing-here", nil, "X-Chat-Token", token(1))
		assert.Equal(t, "status", a.status, http.StatusNotFound)
		var ea errorAnswer
		assert.Success(t, json.Unmarshal([]byte(a.body), &ea))
		assert.Equal(t, "code", ea.Code, string(chatrelay.NotFound))
		assert.True(t, !bytes.Contains([]byte(a.body), []byte("<html")), "a JSON API answers JSON: %s", a.body)
	})
}

// syncBuffer is a bytes.Buffer that a server's goroutines may write to
// while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
