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

// messages are the JSON-RPC messages of a POST body: one, or a batch
// (MCP 2025-03-26). What does not decode is left out (the SDK refuses it).
func messages(data []byte) []jsonrpc.Message {
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
			ms = append(ms, m)
		}
	}
	return ms
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
