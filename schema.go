package chatrelay

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync"
)

// The JSON Schema bundle (contract Part 4, "The schema and the limits, as
// artifacts"): one draft 2020-12 document whose $defs describe every
// request body, every answer (errors included), every SSE data and
// WebSocket frame, every participant and interaction object, and every
// host verb's input and result. It is the normative form of the contract:
// the Go types are tested against it.
//
// It is written here by hand, as Go values, so that every maxLength,
// maxItems, minimum, maximum and pattern is taken from the limits table
// (limits.go) and the id patterns: a limit is changed in one place.
//
// Conventions:
//   - a verb's input is "<verb>.input" and its result "<verb>.result";
//     each input is self-contained (no $ref), so that an MCP tool's input
//     schema is exactly its $defs entry;
//   - the other entries refer to each other with $ref;
//   - "x-routes", "x-verbs" and "x-sse" at the root (annotations, which
//     validators ignore) say which entry describes what: a route's body and
//     its answers by status, an SSE event's data, a verb's input and result.

// SchemaVersion names this version of the bundle and of the limits
// artifact.
const SchemaVersion = "chatrelay.v2"

// SchemaDraft is the JSON Schema dialect of the bundle.
const SchemaDraft = "https://json-schema.org/draft/2020-12/schema"

// Schema returns the bundle, rendered: indented JSON with a final newline,
// the same bytes every time (GET /api/schema.json, chatrelay schema, and
// the committed schema/chatrelay.schema.json).
func Schema() []byte { return bytes.Clone(schemaBytes()) }

// SchemaDef returns the $defs entry name, rendered as compact JSON, and
// whether there is one.
func SchemaDef(name string) (json.RawMessage, bool) {
	d, ok := schemaDoc()["$defs"].(obj)[name]
	if !ok {
		return nil, false
	}
	return marshal(d), true
}

// SchemaDefNames lists the $defs entries, sorted.
func SchemaDefNames() []string {
	return slices.Sorted(maps.Keys(schemaDoc()["$defs"].(obj)))
}

var (
	schemaDoc   = sync.OnceValue(buildSchema)
	schemaBytes = sync.OnceValue(func() []byte { return render(schemaDoc()) })
)

// render encodes v indented, without HTML escaping, with a final newline.
func render(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic("chatrelay: render: " + err.Error())
	}
	return b.Bytes()
}

// obj is a JSON object under construction; encoding/json writes its keys
// sorted, so the rendering is stable.
type obj = map[string]any

func ref(name string) obj { return obj{"$ref": "#/$defs/" + name} }

func describe(s obj, desc string) obj {
	if desc != "" {
		s["description"] = desc
	}
	return s
}

// object is a closed object: the properties listed, the required ones
// among them, and no other.
func object(desc string, props obj, required ...string) obj {
	for _, r := range required {
		if _, ok := props[r]; !ok {
			panic("chatrelay: schema: required " + r + " is not a property")
		}
	}
	if required == nil {
		required = []string{}
	}
	return describe(obj{"type": "object", "properties": props, "required": required, "additionalProperties": false}, desc)
}

// answer is a success answer that carries one field, key, besides
// "success": true.
func answer(desc, key string, v obj) obj {
	return object(desc, obj{"success": constant(true), key: v}, "success", key)
}

// linkAnswer is the answer that shows a new link once (a participant's
// invite, a device's): the record under key (a ref to key), its token (a
// ref to token), the link, whose fragment starts with frag ("/p#chp_"), and
// the link's QR code.
func linkAnswer(desc, key, token, frag string) obj {
	return object(desc, obj{
		"success": constant(true), key: ref(key), "token": ref(token),
		"link": describe(obj{"type": "string", "pattern": frag}, "<base>"+frag+"…: the token only in the fragment"),
		"qr":   describe(obj{"type": "string", "pattern": `^data:image/png;base64,`}, "the link as a QR code, a PNG data URL (chatrelay's addition, for the page)"),
	}, "success", key, "token", "link")
}

// open is an object that may carry more properties than those listed
// (request bodies: the server ignores fields it does not know).
func open(desc string, props obj, required ...string) obj {
	o := object(desc, props, required...)
	delete(o, "additionalProperties")
	return o
}

// str is a string bounded by l (code points: JSON Schema's maxLength).
func str(l Limit, desc string) obj {
	if l.Unit != CodePoints {
		panic("chatrelay: schema: " + l.Name + " is not counted in code points")
	}
	s := obj{"type": "string", "maxLength": l.Max}
	if l.Min > 0 {
		s["minLength"] = l.Min
	}
	return describe(s, desc)
}

// text is a string bounded by l that holds more than white space.
func text(l Limit, desc string) obj {
	s := str(l, desc)
	s["pattern"] = `\S`
	return s
}

// array is an array of items bounded by l.
func array(l Limit, items any, desc string) obj {
	if l.Unit != Items {
		panic("chatrelay: schema: " + l.Name + " does not count items")
	}
	s := obj{"type": "array", "items": items, "maxItems": l.Max}
	if l.Min > 0 {
		s["minItems"] = l.Min
	}
	return describe(s, desc)
}

// list is an unbounded array.
func list(items any, desc string) obj {
	return describe(obj{"type": "array", "items": items}, desc)
}

// integer is an integer in [min, max] (max < 0: unbounded).
func integer(min, max int, desc string) obj {
	s := obj{"type": "integer", "minimum": min}
	if max >= 0 {
		s["maximum"] = max
	}
	return describe(s, desc)
}

func boolean(desc string) obj { return describe(obj{"type": "boolean"}, desc) }

func constant(v any) obj { return obj{"const": v} }

func enum(desc string, vals ...any) obj { return describe(obj{"enum": vals}, desc) }

func pattern(p interface{ String() string }, desc string) obj {
	return describe(obj{"type": "string", "pattern": p.String()}, desc)
}

func oneOf(desc string, alts ...any) obj { return describe(obj{"oneOf": alts}, desc) }

// withProps returns a copy of the closed object o with more properties.
func withProps(o obj, props obj, required ...string) obj {
	c := maps.Clone(o)
	p := maps.Clone(o["properties"].(obj))
	maps.Copy(p, props)
	c["properties"] = p
	c["required"] = append(slices.Clone(c["required"].([]string)), required...)
	return c
}

func epoch(desc string) obj {
	if desc == "" {
		desc = "milliseconds since the Unix epoch"
	}
	return integer(0, -1, desc)
}

// Patterns the bundle states that are not ids.
const (
	tsPattern     = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\+00:00$`
	authorPattern = `^(operator|agent|hermes|p:p_[0-9a-f]{8})$`
	// No white space, no control character. CheckEmoji also refuses the
	// invisible format characters but the joiner U+200D (and a flag's
	// tags): a pattern that says so would need \p{Cf} with U+200D set
	// apart, which no one regexp syntax of both Go and ECMA-262 spells,
	// or those characters written invisibly in the bundle, so the
	// description says it and the pattern is looser.
	emojiPattern = `^[^\s\x00-\x1f\x7f-\x9f]+$`
	linkPattern  = `^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+`
)

func codeStrings(codes []Code) []any {
	out := make([]any, len(codes))
	for i, c := range codes {
		out[i] = string(c)
	}
	return out
}

// defSet is the bundle's $defs under construction.
type defSet obj

// add adds an entry; a name is added once.
func (d defSet) add(name string, s obj) {
	if _, dup := d[name]; dup {
		panic("chatrelay: schema: $defs " + name + " twice")
	}
	d[name] = s
}

func buildSchema() obj {
	d := defSet{}
	d.ids()
	d.messages()
	d.interactions()
	d.cards()
	d.participants()
	d.bodies()
	d.answers()
	d.sse()
	d.ws()
	d.verbs()
	d.push()
	defs := obj(d)
	return obj{
		"$schema":          SchemaDraft,
		"title":            "chatrelay",
		"description":      "The chatrelay wire contract (Parts 1-5) and the host's verbs, " + SchemaVersion + ". Every limit's unit is in GET " + PathLimits + ": maxLength counts code points.",
		"$defs":            defs,
		"x-schema-version": SchemaVersion,
		"x-routes":         xRoutes(),
		"x-sse":            sseEvents(),
		"x-ws":             obj{"v1": "ws.frame", "v2": "ws.v2.frame", "client": "ws.post"},
		"x-verbs":          verbMap(),
	}
}

// merge returns the properties of a and b.
func merge(a, b obj) obj {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

func withPattern(s obj, p string) obj {
	s["pattern"] = p
	return s
}

// count is an integer bounded by a Count limit.
func count(l Limit, desc string) obj {
	if l.Unit != Count {
		panic("chatrelay: schema: " + l.Name + " is not a count")
	}
	return integer(l.Min, l.Max, desc)
}

// xRoutes is x-routes, from the route table (routes.go): each documented
// route's body and its answers by status (every error answer, 4xx or 5xx,
// is "error"), or the stream it opens and its view (x-sse, x-ws). A v1
// route also answers with a .php suffix, and the whole API may be mounted
// under a prefix.
func xRoutes() obj {
	r := obj{}
	for _, rt := range Routes() {
		if !rt.Documented() {
			continue
		}
		key := rt.Key()
		if rt.Stream != "" {
			r[key] = obj{"stream": rt.Stream, "view": "v1"}
			r[key+"?v=2"] = obj{"stream": rt.Stream, "view": "v2"}
			continue
		}
		e := routeEntry(rt.Body, rt.Status, rt.Answer)
		if rt.StatusAgain != 0 {
			e["answers"].(obj)[strconv.Itoa(rt.StatusAgain)] = rt.Answer
		}
		r[key] = e
		if rt.AnswerV2 != "" {
			r[key+"?v=2"] = routeEntry(rt.Body, rt.Status, rt.AnswerV2)
		}
	}
	return r
}

func routeEntry(body string, status int, answer string) obj {
	answers := obj{}
	if answer != "" {
		answers[strconv.Itoa(status)] = answer
	}
	e := obj{"answers": answers}
	if body != "" {
		e["body"] = body
	}
	return e
}

func sseEvents() obj {
	v1 := obj{"ready": "sse.ready", "reset": "sse.reset", "message": "message", "revoked": "sse.revoked"}
	v2 := maps.Clone(v1)
	v2["message"], v2["update"] = "message.v2", "message.v2"
	return obj{"v1": v1, "v2": v2}
}

func seconds() obj { return obj{"type": "number", "exclusiveMinimum": 0} }

// LimitsArtifact returns the limits artifact (GET /api/limits.json,
// chatrelay schema --limits): every limit of the table with its unit, the
// id patterns, and the rate windows, stream limits, retention and MCP
// bounds given (zero fields: the defaults). Rendered like Schema.
func LimitsArtifact(w Windows, s StreamLimits, r Retention, m MCPBounds) []byte {
	w, s, r, m = w.WithDefaults(), s.WithDefaults(), r.WithDefaults(), m.WithDefaults()
	limits := obj{}
	for _, l := range Limits() {
		limits[l.Name] = obj{"min": l.Min, "max": l.Max, "unit": string(l.Unit)}
	}
	patterns := obj{}
	for name, p := range Patterns() {
		patterns[name] = p.String()
	}
	return render(obj{
		"schema_version": SchemaVersion,
		"limits":         limits,
		"patterns":       patterns,
		"rate_limits":    obj{"per_thread": w.PerThread, "per_ip": w.PerIP, "window_seconds": w.Window.Seconds()},
		"streams":        obj{"per_thread": s.PerThread, "participants_per_thread": s.Participants(), "per_ip": s.PerIP},
		"retention":      obj{"messages": r.Messages, "age_seconds": r.Age.Seconds()},
		"mcp": obj{"sessions": m.MaxSessions, "sessions_per_key": m.MaxSessionsPerKey,
			"calls_per_key": m.MaxCallsPerKey, "idle_seconds": m.SessionIdle.Seconds()},
	})
}
