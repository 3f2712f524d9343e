package transport

import (
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
)

// parsePostFast reads the common post body without encoding/json: one
// JSON object whose members are "text", "kind" and "client_id", each once,
// each a string without escapes. It reports ok only for a body that
// parsePostFull accepts, with the same result; anything else (another
// member, a duplicate, an escape, null, a refusal of any kind) is left to
// parsePostFull, which then gives the answer it always gave. It saves a
// post the map, the reflection and the copies of the full decode.
func parsePostFast(data []byte, who principal) (postBody, bool) {
	var text, kind, clientID []byte
	var seen [3]bool
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return postBody{}, false
	}
	i = skipWS(data, i+1)
	for {
		key, j, ok := plainString(data, i)
		if !ok {
			return postBody{}, false
		}
		j = skipWS(data, j)
		if j >= len(data) || data[j] != ':' {
			return postBody{}, false
		}
		val, k, ok := plainString(data, skipWS(data, j+1))
		if !ok {
			return postBody{}, false
		}
		var f int
		switch string(key) {
		case "text":
			f, text = 0, val
		case "kind":
			f, kind = 1, val
		case "client_id":
			f, clientID = 2, val
		default:
			return postBody{}, false
		}
		if seen[f] {
			return postBody{}, false
		}
		seen[f] = true
		i = skipWS(data, k)
		if i >= len(data) {
			return postBody{}, false
		}
		if data[i] == '}' {
			break
		}
		if data[i] != ',' {
			return postBody{}, false
		}
		i = skipWS(data, i+1)
	}
	if skipWS(data, i+1) != len(data) || !seen[0] || len(text) == 0 || !utf8.Valid(text) {
		return postBody{}, false
	}
	p := postBody{Text: string(text), Kind: chatrelay.Operator}
	if chatrelay.CheckText(p.Text) != nil {
		return postBody{}, false
	}
	if seen[1] {
		if who.participant() {
			return postBody{}, false
		}
		switch string(kind) {
		case string(chatrelay.Operator):
		case string(chatrelay.Agent):
			p.Kind = chatrelay.Agent
		default:
			return postBody{}, false
		}
	}
	if seen[2] {
		p.ClientID = string(clientID)
		if p.ClientID == "" || chatrelay.CheckClientID(p.ClientID) != nil {
			return postBody{}, false
		}
	}
	return p, true
}

// skipWS is the index of the first byte at or after i that is not JSON
// white space.
func skipWS(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the JSON string at data[i] if it has no escape and no
// control character: its content and the index after its closing quote.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}
