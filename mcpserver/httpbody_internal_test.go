package mcpserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/chatrelay/chatrelay"
)

// TestMessagesDecodeAsTheSDK: the requests messages finds in a body are
// those the SDK's jsonrpc.DecodeMessage decodes from each of its
// messages, with the same ids, methods and params.
func TestMessagesDecodeAsTheSDK(t *testing.T) {
	bodies := []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":"a7","method":"tools/call","params":{"name":"x"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":9,"result":{}}`,
		`{"jsonrpc":"1.0","id":9,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":9,"method":null}`,
		`{"jsonrpc":"2.0","id":9,"METHOD":"ping"}`,
		`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":9,"method":5}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","error":5}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","error":{"code":"x","message":"m"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","error":{"code":-1,"message":"m","data":[1]}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"a","error":5},{"jsonrpc":"2.0","id":2,"method":"b"}]`,
		` [{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"result":1},{"jsonrpc":"2.0","method":"b","params":[1,2]},3]`,
		`{"jsonrpc":"2.0","id":9,"method":"ping"`,
		`[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":{},"method":"b"},{"jsonrpc":"2.0","id":"c","method":"c"}]`,
		`[{"jsonrpc":"2.0","id":1,"method":"a"}`,
		``,
		// Nested past the SDK's 1 000 levels (its internal json's
		// defaultMaxDepth, counted over the whole body, a batch's array
		// too), and at them; brackets in a string are no nesting.
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + nested(999) + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + nested(1000) + `}`,
		`[{"jsonrpc":"2.0","id":1,"method":"a","params":` + nested(998) + `}]`,
		`[{"jsonrpc":"2.0","id":1,"method":"a","params":` + nested(999) + `},{"jsonrpc":"2.0","id":2,"method":"b"}]`,
		`[{"jsonrpc":"2.0","id":1,"method":"a","params":` + nested(999) + `},{"jsonrpc":"2.0","id":{},"method":"b"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":["` + strings.Repeat("[", 2000) + `\"{"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":` + nested(1000)[:1000] + `}`,
	}
	for _, b := range bodies {
		got := messages([]byte(b))
		want := sdkRequests([]byte(b))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", b, got, want)
		}
	}
}

// nested is n arrays, one in the other.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestMessagesOfADeepBody: a body nested deeper than the SDK decodes (a
// client's, of up to chatrelay.MaxMCPBody) has no messages, and costs
// messages a pass over it, not a decoder's descent through its levels.
func TestMessagesOfADeepBody(t *testing.T) {
	n := chatrelay.MaxMCPBody/2 - 100
	for _, b := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + nested(n) + `}`,
		`{"jsonrpc":"2.0","id":` + nested(n) + `,"method":"a"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"a","params":` + nested(n) + `}]`,
		`[{"jsonrpc":"2.0","id":1,"method":"a"},` + nested(n) + `]`,
	} {
		data := []byte(b)
		if ms := messages(data); ms != nil {
			t.Errorf("a body %d deep: %d messages, want none, as the SDK refuses it", n, len(ms))
		}
		if a := testing.AllocsPerRun(3, func() { messages(data) }); a > 2 {
			t.Errorf("a body %d deep: %v allocations, want at most 2", n, a)
		}
	}
}

// sdkRequests is messages as it was: each message through the SDK's
// DecodeMessage, the requests kept.
func sdkRequests(data []byte) []jsonrpc.Message {
	data = bytes.TrimLeft(data, " \t\r\n")
	var raws []json.RawMessage
	switch {
	case len(data) == 0:
		return nil
	case data[0] == '[':
		// The SDK's readBatch decodes the batch with its own decoder,
		// which refuses a body nested too deep, as DecodeMessage does.
		if _, err := jsonrpc.DecodeMessage(data); err != nil && strings.Contains(err.Error(), "maximum nesting depth") {
			return nil
		}
		if json.Unmarshal(data, &raws) != nil {
			return nil
		}
	default:
		raws = []json.RawMessage{data}
	}
	var ms []jsonrpc.Message
	for _, raw := range raws {
		if m, err := jsonrpc.DecodeMessage(raw); err == nil {
			if r, ok := m.(*jsonrpc.Request); ok {
				ms = append(ms, r)
			}
		}
	}
	return ms
}
