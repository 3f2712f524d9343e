// Package schematest checks what the tests see against the JSON Schema
// bundle (chatrelay.Schema), the normative form of the contract: every
// answer a test receives, every SSE event and WebSocket frame, and every
// fixture, which is also decoded into its Go type (the Go types are
// checked against the schema, not the other way round).
//
// Which $defs entry describes an answer or an event is read from the
// bundle itself (its x-routes, x-sse and x-ws annotations), so a new
// route without an entry fails the tests that call it.
package schematest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/chatrelay/chatrelay"
)

// bundleURL is where the bundle is registered with the compiler (never
// fetched).
const bundleURL = "https://chatrelay.invalid/chatrelay.schema.json"

// annotations are the bundle's x- annotations.
type annotations struct {
	Routes map[string]struct {
		Body    string            `json:"body"`
		Answers map[string]string `json:"answers"`
		Stream  string            `json:"stream"`
		View    string            `json:"view"`
	} `json:"x-routes"`
	SSE   map[string]map[string]string `json:"x-sse"`
	WS    map[string]string            `json:"x-ws"`
	Verbs map[string]struct {
		Input  string `json:"input"`
		Result string `json:"result"`
		MCP    string `json:"mcp"`
	} `json:"x-verbs"`
}

var (
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled = map[string]*jsonschema.Schema{}
	ann      = sync.OnceValue(func() annotations {
		var a annotations
		if err := json.Unmarshal(chatrelay.Schema(), &a); err != nil {
			panic("schematest: the bundle's annotations: " + err.Error())
		}
		return a
	})
)

// Schema returns the compiled $defs entry def. The bundle is compiled
// once, and checked against the draft 2020-12 meta-schema on the way.
func Schema(def string) (*jsonschema.Schema, error) {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := compiled[def]; ok {
		return s, nil
	}
	if compiler == nil {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(chatrelay.Schema()))
		if err != nil {
			return nil, err
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource(bundleURL, doc); err != nil {
			return nil, err
		}
		if _, err := c.Compile(bundleURL); err != nil {
			return nil, fmt.Errorf("the bundle is not a valid schema: %w", err)
		}
		compiler = c
	}
	if _, ok := chatrelay.SchemaDef(def); !ok {
		return nil, fmt.Errorf("the bundle has no $defs entry %q", def)
	}
	s, err := compiler.Compile(bundleURL + "#/$defs/" + def)
	if err != nil {
		return nil, err
	}
	compiled[def] = s
	return s, nil
}

// Check returns an error unless data is one JSON value valid against the
// $defs entry def.
func Check(def string, data []byte) error {
	s, err := Schema(def)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w: %s", def, err, clip(data))
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("%s: %v\nin %s", def, err, clip(data))
	}
	return nil
}

// Valid fails t unless data is valid against def.
func Valid(t testing.TB, def string, data []byte) {
	t.Helper()
	if err := Check(def, data); err != nil {
		t.Errorf("schema: %v", err)
	}
}

// Invalid fails t if data is valid against def.
func Invalid(t testing.TB, def string, data []byte) {
	t.Helper()
	if err := Check(def, data); err == nil {
		t.Errorf("schema: %s accepts %s", def, clip(data))
	}
}

// Decode is a fixture: data is validated against def, decoded into a T
// refusing unknown fields, and the T encoded again must be the same JSON
// (so a field the Go type lacks, names otherwise or drops is caught).
func Decode[T any](t testing.TB, def string, data []byte) T {
	t.Helper()
	Valid(t, def, data)
	var v T
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("fixture %s does not decode into %T: %v", def, v, err)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("fixture %s: encode %T: %v", def, v, err)
	}
	if !SameJSON(data, again) {
		t.Errorf("fixture %s: %T encodes it otherwise:\n got: %s\nwant: %s", def, v, again, data)
	}
	Valid(t, def, again)
	return v
}

// SameJSON reports whether a and b are the same JSON value.
func SameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// AnswerDef names the $defs entry of an answer to method on target (a
// path with its query, under any prefix) with status, from the bundle's
// x-routes: "error" for every 4xx and 5xx. It returns "" for what is not
// a JSON answer of the API (a stream, a page, /healthz, a 204 or 304).
func AnswerDef(method, target string, status int) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	i := strings.Index(u.Path, "/api/")
	if i < 0 || status == http.StatusNoContent || status == http.StatusNotModified || method == http.MethodOptions {
		return "", nil
	}
	if status >= 400 {
		return "error", nil
	}
	if method == http.MethodHead {
		method = http.MethodGet
	}
	key, ok := routeKey(method, strings.TrimSuffix(u.Path[i:], ".php"), u.Query().Get("v") == "2")
	if !ok {
		return "", fmt.Errorf("x-routes has no %s %s", method, u.Path[i:])
	}
	r := ann().Routes[key]
	if r.Stream != "" {
		return "", nil
	}
	def, ok := r.Answers[fmt.Sprint(status)]
	if !ok {
		return "", fmt.Errorf("x-routes has no %d answer for %s", status, key)
	}
	return def, nil
}

// routeKey finds the x-routes key of a request: its v=2 entry if it has
// one and v2, matching {name} segments to any one segment.
func routeKey(method, path string, v2 bool) (string, bool) {
	want := strings.Split(path, "/")
	found := ""
	for key := range ann().Routes {
		m, p, _ := strings.Cut(key, " ")
		p, q, _ := strings.Cut(p, "?")
		if m != method || !matches(strings.Split(p, "/"), want) {
			continue
		}
		if q == "v=2" && v2 {
			return key, true
		}
		if q == "" {
			found = key
		}
	}
	return found, found != ""
}

func matches(pattern, path []string) bool {
	if len(pattern) != len(path) {
		return false
	}
	for i := range pattern {
		if pattern[i] != path[i] && !(strings.HasPrefix(pattern[i], "{") && path[i] != "") {
			return false
		}
	}
	return true
}

// CheckAnswer checks an answer against its $defs entry (AnswerDef). An
// answer that is not JSON passes only where the API answers no JSON.
func CheckAnswer(method, target string, status int, header http.Header, body []byte) error {
	def, err := AnswerDef(method, target, status)
	if err != nil || def == "" {
		return err
	}
	if method == http.MethodHead && len(body) == 0 {
		return nil
	}
	if ct := header.Get("Content-Type"); !strings.Contains(ct, "json") {
		if status == http.StatusNotFound {
			return nil // a path outside the mounted API (under --prefix): the mux's own 404
		}
		return fmt.Errorf("%s %s: %d answered %q, not JSON", method, target, status, ct)
	}
	if err := Check(def, body); err != nil {
		return fmt.Errorf("%s %s → %d: %w", method, target, status, err)
	}
	return nil
}

// Answer fails t unless an answer is valid against its $defs entry.
func Answer(t testing.TB, method, target string, status int, header http.Header, body []byte) {
	t.Helper()
	if err := CheckAnswer(method, target, status, header, body); err != nil {
		t.Errorf("schema: %v", err)
	}
}

// CheckSSE checks an SSE event's data, on a stream opened at target,
// against its $defs entry (x-sse of the stream's view).
func CheckSSE(target, event, data string) error {
	view := "v1"
	if u, err := url.Parse(target); err == nil && u.Query().Get("v") == "2" {
		view = "v2"
	}
	def, ok := ann().SSE[view][event]
	if !ok {
		return fmt.Errorf("x-sse has no %s event %q", view, event)
	}
	return Check(def, []byte(data))
}

// CheckWS checks a frame the server sent on a WebSocket of view v2 (or
// v1) against x-ws.
func CheckWS(v2 bool, frame []byte) error {
	view := "v1"
	if v2 {
		view = "v2"
	}
	return Check(ann().WS[view], frame)
}

// IsV2 reports whether a stream target asks for the v2 view.
func IsV2(target string) bool {
	u, err := url.Parse(target)
	return err == nil && u.Query().Get("v") == "2"
}

// VerbInput and VerbResult name a verb's $defs entries (x-verbs); MCPName
// its tool.
func VerbInput(verb string) string  { return ann().Verbs[verb].Input }
func VerbResult(verb string) string { return ann().Verbs[verb].Result }
func MCPName(verb string) string    { return ann().Verbs[verb].MCP }

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// Standalone compiles a schema that must stand alone (an MCP tool's input
// schema, as a client receives it): it refers to nothing outside itself
// and is valid against the draft 2020-12 meta-schema.
func Standalone(schema []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const u = "https://chatrelay.invalid/standalone.json"
	if err := c.AddResource(u, doc); err != nil {
		return nil, err
	}
	return c.Compile(u)
}

// noLoader refuses every URL it is asked to load: a standalone schema
// needs none (the meta-schemas are built in).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a standalone schema refers to %s", url)
}

// BodyDef names the $defs entry of a request's body (x-routes), or ""
// when the route takes none.
func BodyDef(method, target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	i := strings.Index(u.Path, "/api/")
	if i < 0 {
		return "", fmt.Errorf("%s is not under /api/", target)
	}
	key, ok := routeKey(method, strings.TrimSuffix(u.Path[i:], ".php"), u.Query().Get("v") == "2")
	if !ok {
		return "", fmt.Errorf("x-routes has no %s %s", method, u.Path[i:])
	}
	return ann().Routes[key].Body, nil
}
