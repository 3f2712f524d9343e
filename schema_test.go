package chatrelay_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
)

var update = flag.Bool("update", false, "rewrite the committed schema/ files from the code")

// TestCommittedArtifacts: schema/chatrelay.schema.json and
// schema/limits.json are what the code renders (chatrelay schema and
// chatrelay schema --limits print the same bytes). go test -run
// TestCommittedArtifacts -update rewrites them after a change.
func TestCommittedArtifacts(t *testing.T) {
	for _, f := range []struct {
		path string
		want []byte
	}{
		{"schema/chatrelay.schema.json", chatrelay.Schema()},
		{"schema/limits.json", chatrelay.LimitsArtifact(chatrelay.Windows{}, chatrelay.StreamLimits{}, chatrelay.Retention{}, chatrelay.MCPBounds{})},
	} {
		if *update {
			assert.Success(t, os.MkdirAll(filepath.Dir(f.path), 0o755))
			assert.Success(t, os.WriteFile(f.path, f.want, 0o644))
			continue
		}
		got, err := os.ReadFile(f.path)
		assert.Success(t, err)
		if !bytes.Equal(got, f.want) {
			t.Errorf("%s differs from what the code renders: run go test -run TestCommittedArtifacts -update . and commit it", f.path)
		}
	}
}

// TestBundleIsValid: the bundle is a valid draft 2020-12 schema (the
// compiler checks it against the meta-schema) and every $defs entry
// compiles; every verb has its input and result, and each input stands
// alone (an MCP tool's input schema is the entry as it is).
func TestBundleIsValid(t *testing.T) {
	names := chatrelay.SchemaDefNames()
	for _, n := range names {
		_, err := schematest.Schema(n)
		assert.Success(t, err)
	}
	for _, v := range chatrelay.Verbs() {
		in, ok := chatrelay.SchemaDef(v + ".input")
		assert.True(t, ok, "no %s.input", v)
		_, ok = chatrelay.SchemaDef(v + ".result")
		assert.True(t, ok, "no %s.result", v)
		assert.True(t, !bytes.Contains(in, []byte(`"$ref"`)), "%s.input refers to another entry: it must stand alone", v)
		var s struct {
			Type        string `json:"type"`
			Description string `json:"description"`
		}
		assert.Success(t, json.Unmarshal(in, &s))
		assert.Equal(t, v+".input type", s.Type, "object")
		assert.True(t, s.Description != "", "%s.input has no description (the MCP tool's)", v)
		assert.Equal(t, "x-verbs input of "+v, schematest.VerbInput(v), v+".input")
	}
	// Every error code of the domain is in the schema's enum, once.
	codes := chatrelay.Codes()
	seen := map[chatrelay.Code]bool{}
	for _, c := range codes {
		assert.True(t, !seen[c], "code %s listed twice", c)
		seen[c] = true
		schematest.Valid(t, "code", []byte(`"`+string(c)+`"`))
	}
	schematest.Invalid(t, "code", []byte(`"no_such_code"`))
}

// TestLimitsArtifact: every limit of the table is stated with its unit;
// the patterns are the domain's; the windows and retention given are
// stated (zero: the defaults), and the MCP bounds given; the artifact is
// valid against its entry.
func TestLimitsArtifact(t *testing.T) {
	type mcpBounds struct {
		Sessions       int     `json:"sessions"`
		SessionsPerKey int     `json:"sessions_per_key"`
		CallsPerKey    int     `json:"calls_per_key"`
		IdleSeconds    float64 `json:"idle_seconds"`
	}
	b := chatrelay.LimitsArtifact(chatrelay.Windows{PerThread: 7, Window: 90e9}, chatrelay.StreamLimits{}, chatrelay.Retention{Messages: 12},
		chatrelay.MCPBounds{MaxSessionsPerKey: 3, SessionIdle: 45e9})
	schematest.Valid(t, "limits.answer", b)
	var a struct {
		Version string `json:"schema_version"`
		Limits  map[string]struct {
			Min, Max int
			Unit     string
		}
		Patterns   map[string]string
		RateLimits struct {
			PerThread     int     `json:"per_thread"`
			PerIP         int     `json:"per_ip"`
			WindowSeconds float64 `json:"window_seconds"`
		} `json:"rate_limits"`
		Retention struct {
			Messages   int     `json:"messages"`
			AgeSeconds float64 `json:"age_seconds"`
		}
		MCP mcpBounds
	}
	assert.Success(t, json.Unmarshal(b, &a))
	assert.Equal(t, "version", a.Version, chatrelay.SchemaVersion)
	assert.Equal(t, "limits stated", len(a.Limits), len(chatrelay.Limits()))
	for _, l := range chatrelay.Limits() {
		got := a.Limits[l.Name]
		assert.Equal(t, l.Name, [3]any{got.Min, got.Max, got.Unit}, [3]any{l.Min, l.Max, string(l.Unit)})
	}
	assert.Equal(t, "post.text", a.Limits["post.text"].Max, chatrelay.MaxText)
	assert.Equal(t, "post.body unit", a.Limits["post.body"].Unit, "bytes")
	assert.Equal(t, "card unit", a.Limits["card"].Unit, "json_utf8_bytes")
	assert.Equal(t, "client_id pattern", a.Patterns["client_id"], `^[A-Za-z0-9_.:-]{1,160}$`)
	assert.Equal(t, "rate window", a.RateLimits.WindowSeconds, 90.0)
	assert.Equal(t, "per thread", a.RateLimits.PerThread, 7)
	assert.Equal(t, "per ip (default)", a.RateLimits.PerIP, chatrelay.DefaultRatePerIP)
	assert.Equal(t, "retention", a.Retention.Messages, 12)
	assert.Equal(t, "retention age (default)", a.Retention.AgeSeconds, chatrelay.DefaultRetainAge.Seconds())
	assert.Equal(t, "MCP bounds", a.MCP, mcpBounds{chatrelay.DefaultMCPSessions, 3, chatrelay.DefaultMCPCallsPerKey, 45})
}

// TestDomainFixtures: the domain's objects, written from the contract,
// decode into their Go types and encode back the same, and are valid
// against their entries; objects that break the contract are refused by
// the schema.
func TestDomainFixtures(t *testing.T) {
	msg := schematest.Decode[chatrelay.Message](t, "message",
		[]byte(`{"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"hello"}`))
	assert.Equal(t, "v1 author", msg.Author, chatrelay.Operator)
	approval := `{"id":"ix_3f9a0c7e21b4","type":"approval","title":"deploy","prompt":"Deploy build 412 to production?","allow_text":false,` +
		`"details":[{"label":"build","value":"412"}],"deadline":1792781400123,"state":"approved","answer":{"decision":"approve"},"answered_by":"operator","answered_at":1792780900123}`
	ix := schematest.Decode[chatrelay.Interaction](t, "interaction", []byte(approval))
	assert.Equal(t, "state", ix.State, chatrelay.Approved)
	input := `{"id":"ix_3f9a0c7e21b5","type":"input","prompt":"Which branch?","choices":[{"value":"main","label":"Main branch","description":"the default"},{"value":"release"}],` +
		`"allow_text":true,"deadline":1792781400123,"state":"answered","answer":{"value":"a branch of my own"},"answered_by":"operator","answered_at":1792780900123}`
	schematest.Decode[chatrelay.Interaction](t, "interaction", []byte(input))
	card := `{"title":"Build 412","fallback_text":"Build 412 is green.","blocks":[{"type":"text","text":"All checks passed."},` +
		`{"type":"fields","fields":[{"label":"build","value":"412"},{"label":"branch","value":"main"}]},` +
		`{"type":"link","url":"https://ci.example.com/412","label":"log"},{"type":"code","text":"make deploy","language":"sh"}]}`
	schematest.Decode[chatrelay.Card](t, "card", []byte(card))
	v2 := `{"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","author":"hermes","text":"Approval requested: deploy",` +
		`"rev":1792780900123,"client_id":"ask-412","interaction":` + approval + `,"reactions":{"👍":["operator","hermes","p:p_1a2b3c4d"]}}`
	m := schematest.Decode[chatrelay.Message](t, "message.v2", []byte(v2))
	assert.Equal(t, "reactors", len(m.Reactions["👍"]), 3)
	schematest.Decode[chatrelay.Message](t, "message.v2", []byte(`{"id":"MSG-20261023-184000-a1b2c4","epoch":1792780800124,"ts":"2026-10-23T18:40:00+00:00",`+
		`"author":"p:p_1a2b3c4d","text":"looks good","rev":1792780800124,"author_name":"Alex"}`))
	schematest.Decode[chatrelay.Message](t, "message.v2", []byte(`{"id":"MSG-20261023-184000-a1b2c5","epoch":1792780800125,"ts":"2026-10-23T18:40:00+00:00",`+
		`"author":"hermes","text":"Build 412 is green.","rev":1792780800125,"card":`+card+`}`))

	for _, bad := range []struct{ def, json string }{
		{"message", `{"id":"MSG-20261023-184000-a1b2c3","epoch":1,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"hi","rev":1}`}, // a v2 field on v1
		{"message", `{"id":"MSG-20261023-184000-a1b2c3","epoch":1,"ts":"2026-10-23T18:40:00Z","author":"operator","text":"hi"}`},              // ts not +00:00
		{"message", `{"id":"MSG-20261023-184000-a1b2c3","epoch":1,"ts":"2026-10-23T18:40:00+00:00","author":"root","text":"hi"}`},             // no such author
		{"message", `{"id":"MSG-20261023-184000-a1b2c3","epoch":1,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"  "}`},         // blank
		{"message", `{"id":"MSG-20261023-184000-a1b2c3","epoch":1,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"` + strings.Repeat("é", chatrelay.MaxText+1) + `"}`},
		{"interaction", strings.Replace(approval, `"allow_text":false`, `"allow_text":true`, 1)},                                                   // an approval takes no text
		{"interaction", strings.Replace(approval, `{"decision":"approve"}`, `{"value":"main"}`, 1)},                                                // a value on an approval
		{"interaction", strings.Replace(input, `"state":"answered"`, `"state":"approved"`, 1)},                                                     // an input is not approved
		{"interaction", strings.Replace(approval, `"title":"deploy"`, `"title":"`+strings.Repeat("x", chatrelay.LimitApprovalTitle.Max+1)+`"`, 1)}, // approval title ≤ 128
		{"card", strings.Replace(card, `https://ci.example.com/412`, `javascript:alert(1)`, 1)},
		{"card", strings.Replace(card, `"language":"sh"`, `"language":"sh","url":"https://x"`, 1)}, // a field its type does not take
		{"card", `{"fallback_text":"x"}`},                      // blocks are required
		{"message.v2", strings.Replace(v2, `"👍"`, `"a b"`, 1)}, // an emoji with white space
		{"reactions", `{}`},
		{"ticket.body", `{"attachments":["at_3f9a0c7e21b4"]}`}, // the server refuses any member but attachment (400 invalid_json): a misspelled one would ask for no file
	} {
		schematest.Invalid(t, bad.def, []byte(bad.json))
	}
}

// TestVerbNamesAreTheHosts: the bundle's verbs are the contract's table,
// in its order.
func TestVerbNames(t *testing.T) {
	want := []string{"list_threads", "read_thread", "wait_messages", "send", "request_input", "request_approval",
		"check_interaction", "wait_interaction", "cancel_interaction", "react", "send_card", "open_thread"}
	assert.Equal(t, "verbs", chatrelay.Verbs(), want)
	for _, v := range want {
		assert.Equal(t, "tool of "+v, schematest.MCPName(v), "chatrelay_"+v)
	}
	assert.True(t, slices.IsSorted(chatrelay.SchemaDefNames()), "SchemaDefNames is sorted")
}

// TestPushEndpointBounds: a subscription's endpoint in the schema is
// bounded as the server bounds it (LimitPushEndpoint): the empty one,
// which no subscribe takes and no store keeps, is refused, as is one
// past the limit.
func TestPushEndpointBounds(t *testing.T) {
	push := func(endpoint string) []byte {
		b, err := json.Marshal(map[string]any{"id": "w_0011aabb", "events": []string{"reply"}, "created_at": 1792780800123, "endpoint": endpoint})
		assert.Success(t, err)
		return b
	}
	schematest.Valid(t, "push", push("https://push.example/send/1"))
	schematest.Invalid(t, "push", push(""))
	schematest.Invalid(t, "push", push("https://push.example/"+strings.Repeat("a", chatrelay.LimitPushEndpoint.Max)))
	body := func(endpoint string) []byte {
		return []byte(`{"subscription":{"endpoint":"` + endpoint + `","keys":{"p256dh":"` + strings.Repeat("A", 87) + `","auth":"` + strings.Repeat("A", 22) + `"}}}`)
	}
	schematest.Valid(t, "push.subscribe.body", body("https://push.example/send/1"))
	schematest.Invalid(t, "push.subscribe.body", body(""))
}

// TestBundleDescriptionNamesItsParts: the bundle's description names the
// contract's Parts its routes come from, so that a reader of the bundle
// (GET /api/schema.json) does not take Part 5's routes (attachments,
// devices, push) for ones it leaves out.
func TestBundleDescriptionNamesItsParts(t *testing.T) {
	var b struct {
		Description string                     `json:"description"`
		Routes      map[string]json.RawMessage `json:"x-routes"`
	}
	assert.Success(t, json.Unmarshal(chatrelay.Schema(), &b))
	for _, r := range []string{"POST /api/chat/attachments", "POST /api/chat/devices", "POST /api/chat/push"} {
		_, ok := b.Routes[r]
		assert.True(t, ok, "no x-routes entry for %s", r)
	}
	assert.True(t, strings.Contains(b.Description, "(Parts 1-5)"), "the description %q does not name Part 5, whose routes the bundle holds", b.Description)
}

// TestInviteBodyStatesTheDefaults: the bundle's participant.invite.body
// says the defaults an invite without them gets (Invite.Check), so that a
// client reading the normative bundle is not told another role than the
// one its link is made with.
func TestInviteBodyStatesTheDefaults(t *testing.T) {
	in := chatrelay.Invite{Name: "Alex"}
	assert.Success(t, in.Check())
	var b struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	assert.Success(t, json.Unmarshal(chatrelay.Schema(), &b))
	props := b.Defs["participant.invite.body"].Properties
	for field, want := range map[string]string{
		"role":       "default " + string(in.Role),
		"kind":       "default " + string(in.Kind),
		"expires_in": fmt.Sprintf("default %d", int(in.ExpiresIn/time.Second)),
		"cap":        fmt.Sprintf("default %d", in.Cap),
	} {
		assert.True(t, strings.Contains(props[field].Description, want), "participant.invite.body's %s says %q, but an invite without it gets %q", field, props[field].Description, want)
	}
}
