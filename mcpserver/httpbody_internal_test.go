package mcpserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
	}
	for _, b := range bodies {
		got := messages([]byte(b))
		want := sdkRequests([]byte(b))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", b, got, want)
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
