package transport

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// get sends method to url with headers (name, value pairs) and reads the
// whole answer.
func get(t *testing.T, method, url string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	assert.Success(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	schematest.Answer(t, method, url, res.StatusCode, res.Header, b)
	return answer{status: res.StatusCode, header: res.Header, body: string(b)}
}

// TestSchemaAndLimitsRoutes: GET /api/schema.json is the bundle, GET
// /api/limits.json the limits with this server's windows, stream limits
// and retention; no token is needed, they are cacheable with an ETag
// (If-None-Match: 304), served under the prefix, and GET only.
func TestSchemaAndLimitsRoutes(t *testing.T) {
	t.Parallel()
	be := storetest.Open(t, storetest.File, storetest.Options{})
	srv := httptest.NewServer(NewServer(Config{
		Store: be.Store, Prefix: "/spaces/newos4", Log: slog.New(slog.DiscardHandler),
		Windows:      chatrelay.Windows{PerThread: 5, PerIP: 9, Window: time.Minute},
		StreamLimits: chatrelay.StreamLimits{PerThread: 3},
		Retention:    chatrelay.Retention{Messages: 40, Age: 48 * time.Hour},
	}))
	t.Cleanup(srv.Close)
	base := srv.URL + "/spaces/newos4"

	a := get(t, "GET", base+"/api/schema.json")
	assert.Equal(t, "status", a.status, http.StatusOK)
	assert.Equal(t, "the bundle", a.body, string(chatrelay.Schema()))
	assert.Equal(t, "content type", a.header.Get("Content-Type"), "application/schema+json")
	assert.Equal(t, "cache control", a.header.Get("Cache-Control"), "public, max-age=300")
	etag := a.header.Get("ETag")
	assert.True(t, len(etag) > 2 && etag[0] == '"', "ETag %q", etag)

	again := get(t, "GET", base+"/api/schema.json", "If-None-Match", etag)
	assert.Equal(t, "revalidated", again.status, http.StatusNotModified)
	assert.Equal(t, "no body on 304", again.body, "")
	assert.Equal(t, "another ETag", get(t, "GET", base+"/api/schema.json", "If-None-Match", `"stale"`).status, http.StatusOK)
	head := get(t, "HEAD", base+"/api/schema.json")
	assert.Equal(t, "HEAD", [2]any{head.status, head.body}, [2]any{http.StatusOK, ""})
	post := get(t, "POST", base+"/api/schema.json")
	assert.Equal(t, "POST", [2]any{post.status, post.header.Get("Allow")}, [2]any{http.StatusMethodNotAllowed, "GET"})
	res, err := http.Get(srv.URL + "/api/schema.json") // outside the mount: not the API's answer
	assert.Success(t, err)
	res.Body.Close()
	assert.Equal(t, "not at the root under a prefix", res.StatusCode, http.StatusNotFound)

	l := get(t, "GET", base+"/api/limits.json")
	assert.Equal(t, "limits status", l.status, http.StatusOK)
	assert.Equal(t, "limits content type", l.header.Get("Content-Type"), "application/json")
	assert.True(t, l.header.Get("ETag") != "" && l.header.Get("ETag") != etag, "limits ETag %q", l.header.Get("ETag"))
	var lim struct {
		Limits     map[string]struct{ Max int }
		RateLimits map[string]float64 `json:"rate_limits"`
		Streams    map[string]int
		Retention  map[string]float64
	}
	assert.Success(t, json.Unmarshal([]byte(l.body), &lim))
	assert.Equal(t, "post.text", lim.Limits["post.text"].Max, chatrelay.MaxText)
	assert.Equal(t, "rate windows", lim.RateLimits, map[string]float64{"per_thread": 5, "per_ip": 9, "window_seconds": 60})
	assert.Equal(t, "streams", lim.Streams, map[string]int{"per_thread": 3, "participants_per_thread": 2, "per_ip": chatrelay.DefaultStreamsPerIP})
	assert.Equal(t, "retention", lim.Retention, map[string]float64{"messages": 40, "age_seconds": 48 * 3600})
	assert.Equal(t, "limits revalidated", get(t, "GET", base+"/api/limits.json", "If-None-Match", l.header.Get("ETag")).status, http.StatusNotModified)
}

// TestTransportFixtures: the transport's answers and frames, written
// from the contract, decode into the transport's Go types and encode back
// the same, and are valid against their entries.
func TestTransportFixtures(t *testing.T) {
	msgV2 := `{"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"hello","rev":1792780800999,"reactions":{"👍":["hermes"]}}`
	schematest.Decode[postAnswer](t, "post.answer", []byte(`{"success":true,"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","thread":"a1b2c3d4e5f60718"}`))
	schematest.Decode[ticketAnswer](t, "ticket.answer", []byte(`{"success":true,"ticket":"t1.a1b2c3d4e5f60718.1792781700123.c2lnbmF0dXJl","thread":"a1b2c3d4e5f60718","expires_at":1792781700123}`))
	schematest.Decode[messageAnswer](t, "respond.answer", []byte(`{"success":true,"message":`+msgV2+`}`))
	schematest.Decode[messageAnswer](t, "react.answer", []byte(`{"success":true,"message":`+msgV2+`}`))
	for _, e := range []string{
		`{"success":false,"error":"text too long (max 4000 chars)","code":"text_too_long","retryable":false}`,
		`{"success":false,"error":"rate limit: 20 posts per thread per 10m0s","code":"rate_limited","retryable":true,"retry_after_ms":1500}`,
		`{"success":false,"error":"this route is retired; post with /api/chat/post","code":"gone","retryable":false,"see":"/api/chat/post"}`,
		`{"success":false,"error":"this interaction is approved: the first answer won","code":"interaction_closed","retryable":false,"message":` + msgV2 + `}`,
		`{"success":false,"error":"too many streams","code":"too_many_streams","retryable":true}`,
	} {
		schematest.Decode[errorBody](t, "error", []byte(e))
	}
	schematest.Invalid(t, "error", []byte(`{"success":false,"error":"x","code":"text_too_long","retryable":true}`)) // only three codes are retryable
	schematest.Invalid(t, "error", []byte(`{"success":false,"error":"x","code":"text_too_long","retryable":false,"stack":"…"}`))

	schematest.Decode[readyFrame](t, "sse.ready", []byte(`{"thread":"a1b2c3d4e5f60718","cursor":1792780800123,"awaiting":true}`))
	schematest.Decode[readyFrame](t, "ws.ready", []byte(`{"type":"ready","thread":"a1b2c3d4e5f60718","cursor":0,"awaiting":false}`))
	schematest.Valid(t, "sse.reset", []byte(`{}`))
	for _, f := range []string{
		`{"type":"ready","thread":"a1b2c3d4e5f60718","cursor":1792780800123,"awaiting":true}`,
		`{"type":"reset"}`,
		`{"type":"message","message":{"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"hello"}}`,
		`{"type":"posted","success":true,"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","thread":"a1b2c3d4e5f60718","replayed":true}`,
		`{"type":"error","success":false,"error":"kind must be \"operator\" or \"agent\"","code":"invalid_kind","retryable":false}`,
	} {
		schematest.Valid(t, "ws.frame", []byte(f))
	}
	schematest.Valid(t, "ws.v2.frame", []byte(`{"type":"update","message":`+msgV2+`}`))
	schematest.Invalid(t, "ws.frame", []byte(`{"type":"update","message":`+msgV2+`}`))  // no update on v1
	schematest.Invalid(t, "ws.frame", []byte(`{"type":"message","message":`+msgV2+`}`)) // no v2 object on v1
	schematest.Valid(t, "ws.post", []byte(`{"type":"post","text":"hello","kind":"agent","client_id":"tab-7f3:41"}`))

	// Request bodies, as the server takes them.
	schematest.Valid(t, "post.body", []byte(`{"text":"hello","kind":null,"client_id":"tab-7f3:41"}`))
	schematest.Invalid(t, "post.body", []byte(`{"text":"hello","kind":"hermes"}`))
	schematest.Invalid(t, "post.body", []byte(`{"text":" \n"}`))
	schematest.Valid(t, "respond.body", []byte(`{"interaction_id":"ix_3f9a0c7e21b4","decision":"approve"}`))
	schematest.Valid(t, "respond.body", []byte(`{"interaction_id":"ix_3f9a0c7e21b4","value":"main"}`))
	schematest.Invalid(t, "respond.body", []byte(`{"interaction_id":"ix_3f9a0c7e21b4","decision":"approve","value":"main"}`))
	schematest.Invalid(t, "respond.body", []byte(`{"interaction_id":"ix_3f9a0c7e21b4"}`))
	schematest.Valid(t, "react.body", []byte(`{"message_id":"MSG-20261023-184000-a1b2c3","emoji":"🎉","remove":true}`))
	schematest.Invalid(t, "react.body", []byte(`{"message_id":"MSG-20261023-184000-a1b2c3","emoji":"👍 👍"}`))
}

// TestPart3Fixtures: participants (contract Part 3), written from the
// contract: each decodes into the transport's Go type and encodes back the
// same, and is valid against its entry; what the contract forbids is
// refused.
func TestPart3Fixtures(t *testing.T) {
	p := `{"id":"p_1a2b3c4d","name":"Alex","kind":"human","role":"commenter","created_at":1792780800123,"expires_at":1793385600123,"state":"active","cap":50,"sent":0}`
	token := "chp_" + strings.Repeat("A", 43)
	schematest.Decode[chatrelay.Participant](t, "participant", []byte(p))
	schematest.Valid(t, "participant.invite.body", []byte(`{"name":"Alex","role":"commenter","kind":"human","expires_in":604800,"cap":50}`))
	schematest.Valid(t, "participant.invite.body", []byte(`{"name":"Alex"}`))
	schematest.Decode[inviteAnswer](t, "participant.invite.answer", []byte(`{"success":true,"participant":`+p+`,"token":"`+token+`","link":"https://chat.example.com/p#`+token+`","qr":"data:image/png;base64,iVBORw0KGgo="}`))
	schematest.Decode[participantsAnswer](t, "participants.answer", []byte(`{"success":true,"participants":[`+p+`]}`))
	schematest.Decode[participantAnswer](t, "participant.revoke.answer", []byte(`{"success":true,"participant":`+strings.Replace(p, `"active"`, `"revoked"`, 1)+`}`))
	schematest.Decode[auditAnswer](t, "audit.answer", []byte(`{"success":true,"events":[{"at":1792780800123,"event":"issued","participant":"p_1a2b3c4d"},`+
		`{"at":1792780900123,"event":"refused","participant":"p_1a2b3c4d","code":"token_revoked","ip":"203.0.113.7"}]}`))
	schematest.Decode[whoamiAnswer](t, "whoami.answer", []byte(`{"success":true,"thread":"a1b2c3d4e5f60718","role":"owner","participant":null,"participants":[{"id":"p_1a2b3c4d","name":"Alex","kind":"human","role":"commenter"}]}`))
	schematest.Decode[whoamiAnswer](t, "whoami.answer", []byte(`{"success":true,"thread":"a1b2c3d4e5f60718","role":"commenter","participant":`+p+`,"participants":[]}`))
	schematest.Valid(t, "sse.revoked", []byte(`{"code":"token_revoked"}`))
	schematest.Decode[errorBody](t, "error", []byte(`{"success":false,"error":"the grant's cap is spent","code":"cap_reached","retryable":false}`))
	for _, f := range []struct{ def, json string }{
		{"participant", strings.Replace(p, `"role":"commenter"`, `"role":"owner"`, 1)},
		{"participant", strings.Replace(p, `"cap":50`, `"cap":1001`, 1)},
		{"participant", strings.Replace(p, `}`, `,"token":"`+token+`"}`, 1)}, // never its token
		{"participant.invite.body", `{"name":"Alex","expires_in":3599}`},
		{"participant.invite.body", `{"name":"Alex","cap":0}`},
		{"participant.invite.body", `{"name":"Alex","role":"owner"}`},
		{"sse.revoked", `{"code":"unauthorized"}`},
	} {
		schematest.Invalid(t, f.def, []byte(f.json))
	}
}

// TestEveryCodeHasAStatus: the codes of the schema's enum are the codes
// the transport maps to a status.
func TestEveryCodeHasAStatus(t *testing.T) {
	codes := map[chatrelay.Code]bool{}
	for _, c := range chatrelay.Codes() {
		codes[c] = true
		if _, ok := statusOf[c]; !ok {
			t.Errorf("code %s has no HTTP status", c)
		}
	}
	for c := range statusOf {
		if !codes[c] {
			t.Errorf("code %s is not in chatrelay.Codes(), the schema's enum", c)
		}
	}
}
