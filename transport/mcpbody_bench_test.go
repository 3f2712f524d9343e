package transport

import (
	"encoding/base64"
	"strings"
	"testing"
)

// BenchmarkMCPBodyChecks: the transport's checks of an MCP POST body
// (one JSON value; initialize in and out of a session), on a small tool
// call and on one carrying a 700 KiB file (base64).
//
//	go test -run '^$' -bench MCPBodyChecks -benchmem ./transport
func BenchmarkMCPBodyChecks(b *testing.B) {
	file := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 700<<10)))
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"small", []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"post_message","arguments":{"thread":"a1b2c3d4e5f60718","text":"build finished: 3 warnings"}}}`)},
		{"file", []byte(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"post_message","arguments":{"thread":"a1b2c3d4e5f60718","text":"log","files":[{"name":"a.log","data":"` + file + `"}]}}}`)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if checkMCPBody(c.data, true) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
