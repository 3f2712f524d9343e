package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestServeSetsGOGCUnlessTheVariableDoes: serve runs its collector at
// GOGC 200 (serveGCPercent) where the GOGC variable sets none, and leaves
// the variable's value (100 here) when it does, as /metrics' go_gc_gogc_percent
// shows an operator. In processes of their own: the percent is the process's.
func TestServeSetsGOGCUnlessTheVariableDoes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		gogc string // "": unset
		want string
	}{{"", "200"}, {"100", "100"}} {
		t.Run("GOGC="+c.gogc, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(chatrelayBinary(t), "serve", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
				"--data", t.TempDir(), "--fsync", "never")
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "CHATRELAY_") {
					env = append(env, kv)
				}
			}
			if c.gogc != "" {
				env = append(env, "GOGC="+c.gogc)
			}
			cmd.Env = env
			var log lockedBuffer
			cmd.Stderr = &log
			out, err := cmd.StdoutPipe()
			assert.Success(t, err)
			assert.Success(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			lines := bufio.NewScanner(out)
			metrics := ""
			for metrics == "" && lines.Scan() {
				if v, ok := strings.CutPrefix(lines.Text(), "metrics on "); ok {
					metrics = v
				}
			}
			assert.True(t, metrics != "", "serve named no metrics address; log:\n%s", log.String())
			go io.Copy(io.Discard, out)
			status, body := opsGet(t, metrics)
			assert.Equal(t, "/metrics", status, 200)
			m := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\S+)$`).FindSubmatch(body)
			assert.True(t, m != nil, "/metrics has no go_gc_gogc_percent")
			assert.Equal(t, "go_gc_gogc_percent", string(m[1]), c.want)
		})
	}
}
