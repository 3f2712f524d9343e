package mcpserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
)

// messages are the JSON-RPC requests of a POST body: one, or a batch
// (MCP 2025-03-26). What does not decode is left out (the SDK refuses
// it), and so are responses, which no caller reads. They are decoded as
// the SDK's jsonrpc.DecodeMessage decodes a message (segmentio's
// decoder, keys in their own case, the same fields, nothing nested past
// its depth), in one pass over the body: DecodeMessage made a decoder with a 32 KiB buffer for each
// message and each method name (66 KB for one small call), after
// encoding/json had copied a batch's messages out.
func messages(data []byte) []jsonrpc.Message {
	data = bytes.TrimLeft(data, " \t\r\n")
	var ws []wireMessage
	switch {
	case len(data) == 0:
		return nil
	case data[0] == '[':
		if chatrelay.UnmarshalExactCase(data, &ws) != nil {
			return batchMessages(data) // an element that is no message, or does not decode
		}
	default:
		var w wireMessage
		if chatrelay.UnmarshalExactCase(data, &w) != nil {
			return nil
		}
		ws = []wireMessage{w}
	}
	var ms []jsonrpc.Message
	for _, w := range ws {
		if r, ok := w.request(); ok {
			ms = append(ms, r)
		}
	}
	return ms
}

// batchMessages is messages of a batch that does not decode whole:
// each of its elements that decodes. A batch the SDK's decoder refuses
// (the SDK's readBatch decodes it so: nested past its depth) has none.
func batchMessages(data []byte) []jsonrpc.Message {
	var raws []json.RawMessage
	if chatrelay.UnmarshalExactCase(data, &raws) != nil {
		return nil
	}
	var ms []jsonrpc.Message
	for _, raw := range raws {
		var w wireMessage
		if chatrelay.UnmarshalExactCase(raw, &w) != nil {
			continue
		}
		if r, ok := w.request(); ok {
			ms = append(ms, r)
		}
	}
	return ms
}

// wireMessage is a JSON-RPC message as the SDK decodes it
// (jsonrpc2.wireDecode, less a response's result): a request whose error
// field does not decode as an error is none, there as here.
type wireMessage struct {
	Version string          `json:"jsonrpc"`
	ID      any             `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Error   *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// request is w as the SDK's request, if it is one that the SDK decodes:
// version "2.0", an id that is none, a number or a string, and a method
// (the key present).
func (w wireMessage) request() (*jsonrpc.Request, bool) {
	if w.Version != "2.0" || len(w.Method) == 0 {
		return nil, false
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil, false
	}
	var method string
	if chatrelay.UnmarshalExactCase(w.Method, &method) != nil {
		return nil, false
	}
	return &jsonrpc.Request{ID: id, Method: method, Params: w.Params}, true
}

// initializeParams refuses an initialize request in data whose params are
// not MCP's (initializeParamsOK): the SDK answered it 200 with a JSON-RPC
// error of code 0 that echoed the params, under the id of a session it
// did not keep.
func initializeParams(data []byte) error {
	for _, msg := range messages(data) {
		if r, ok := msg.(*jsonrpc.Request); ok && r.Method == "initialize" && !initializeParamsOK(r.Params) {
			return chatrelay.Errorf(chatrelay.InvalidJSON, "the initialize request's params are not MCP's: "+initializeParamsWant)
		}
	}
	return nil
}

// initializeParamsWant says what initializeParamsOK wants.
const initializeParamsWant = "an object with protocolVersion a string, capabilities and clientInfo objects"

// initializeParamsOK says whether params (none is left to the SDK) decode
// as MCP's InitializeParams, as the SDK reads them: else the SDK answers
// a JSON-RPC error of code 0 that echoes them.
func initializeParamsOK(params json.RawMessage) bool {
	if len(params) == 0 {
		return true
	}
	var p struct {
		mcp.InitializeParams
		// The SDK reads capabilities its own way (a roots of older
		// clients' shape too): only their being an object is judged.
		Capabilities json.RawMessage `json:"capabilities"`
	}
	// Decoded as the SDK decodes (its internal/json): keys match in their
	// own case only, where encoding/json would take "CAPABILITIES" or a
	// clientInfo's "NAME", keys MCP does not name and the SDK ignores,
	// for MCP's.
	err := chatrelay.UnmarshalExactCase(params, &p)
	c := bytes.TrimSpace(p.Capabilities)
	return err == nil && (len(c) == 0 || c[0] == '{' || string(c) == "null")
}

// readBody returns the body of r (at most a request's limit, and
// one byte more, which the SDK then refuses) and puts it back for the SDK.
func readBody(r *http.Request) []byte {
	data, _ := io.ReadAll(io.LimitReader(r.Body, chatrelay.MaxMCPBody+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(data), r.Body), r.Body}
	return data
}
