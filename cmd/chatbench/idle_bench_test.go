package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// BenchmarkIdleStream measures what an idle stream costs the server: a
// real chatrelay process holds 2 000 idle streams (half SSE, half
// WebSocket; or one kind) for 2 s, and the figure is its VmRSS after
// minus before, per stream, as S3 measures it (S3 itself holds them past
// a heartbeat, with more streams). The streams are
// opened once per sub-benchmark whatever b.N is; run it with
// -benchtime=1x:
//
//	go test -run '^$' -bench IdleStream -benchtime 1x ./cmd/chatbench
func BenchmarkIdleStream(b *testing.B) {
	for _, mix := range []string{"mixed", "sse", "ws"} {
		b.Run(mix, func(b *testing.B) {
			base, _, _, proc := startChatrelay(b)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			for b.Loop() {
				stdout.Reset()
				err := run(ctx, []string{
					"--server", base, "--server-pid", strconv.Itoa(proc.Pid), "--json", "--scenario", "S3",
					"--idle", "2000", "--idle-threads", "1000", "--idle-mix", mix, "--idle-hold", "2s",
				}, &stdout, &stderr)
				if err != nil {
					b.Fatalf("run: %v\n%s", err, stderr.String())
				}
			}
			var res struct {
				KiB   float64 `json:"kib_per_stream"`
				Alive struct{ Got, Want float64 }
			}
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
				b.Fatalf("S3 result %q: %v", stdout.String(), err)
			}
			if res.Alive.Got != res.Alive.Want {
				b.Fatalf("%v of %v streams alive after the idle hold", res.Alive.Got, res.Alive.Want)
			}
			b.ReportMetric(res.KiB, "KiB/stream")
			b.ReportMetric(0, "ns/op")
		})
	}
}
