package mcpserver

import (
	"encoding/base64"
	"strings"
	"testing"
)

// BenchmarkMessages: the decode of a POST body's requests for the cancel
// bookkeeping (every POST of a session) and the initialize check, on a
// small tool call and on one carrying a 700 KiB file (base64).
//
//	go test -run '^$' -bench Messages -benchmem ./mcpserver
func BenchmarkMessages(b *testing.B) {
	for _, c := range mcpBodies() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if len(messages(c.data)) != 1 {
					b.Fatal("no request")
				}
			}
		})
	}
}

// mcpBodies are a small tool call's body and one carrying a file.
func mcpBodies() []struct {
	name string
	data []byte
} {
	file := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 700<<10)))
	return []struct {
		name string
		data []byte
	}{
		{"small", []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"post_message","arguments":{"thread":"a1b2c3d4e5f60718","text":"build finished: 3 warnings"}}}`)},
		{"file", []byte(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"post_message","arguments":{"thread":"a1b2c3d4e5f60718","text":"log","files":[{"name":"a.log","data":"` + file + `"}]}}}`)},
	}
}
