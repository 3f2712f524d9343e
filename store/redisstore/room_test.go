package redisstore

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// roomEval runs room (roomLua) on the att hash KEYS[1]. ARGV: before
// (ms), the uploader, sha, size, "1" for the check before the bytes, and
// the limits (roomLimits).
var roomEval = redis.NewScript(roomLua + `
return room(KEYS[1], tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1', tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]))
`)

// TestRoomLuaIsStoreRoom: the Redis store's checks of an upload (roomLua,
// run before the bytes and at the commit) answer as store.Room, the file
// store's, on random threads: the owner's and participants' drafts (some
// past their hour), named files, bytes shared between them, near each
// limit. The conformance suite walks chosen cases on both; this walks
// many more.
func TestRoomLuaIsStoreRoom(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	rdb := srv.Client(t)
	ctx := t.Context()
	const mib = 1 << 20
	const before = int64(1_000_000)
	rng := rand.New(rand.NewPCG(1, 2))
	uploaders := []string{"", "p_0000000a", "p_0000000b", "p_0000000c"}
	refusals := map[string]int{}
	for c := range 3000 {
		// The thread: records of a few contents, each of one size.
		shas := make([]string, 1+rng.IntN(12))
		sizes := map[string]int64{}
		for i := range shas {
			shas[i] = fmt.Sprintf("%064x", rng.Uint64())
			sizes[shas[i]] = rng.Int64N(int64([]int{mib, 5 * mib, 20 * mib, 40 * mib}[rng.IntN(4)]))
		}
		ownerShare := rng.Float64()
		pUsed := rng.Float64() * rng.Float64() * 0.5
		key := fmt.Sprintf("room:{%d}:att", c)
		var recs []store.StoredAttachment // as Room is given them: kept ones
		usedIDs := map[string]bool{}
		held := map[string]int{}
		var stored int64
		fields := []any{}
		for i := range rng.IntN(160) {
			r := store.StoredAttachment{At: before + 1 + rng.Int64N(1000)}
			r.ID = fmt.Sprintf("at_%012x", i)
			r.SHA256 = shas[rng.IntN(len(shas))]
			r.Size = sizes[r.SHA256]
			if rng.Float64() >= ownerShare {
				r.By = uploaders[1+rng.IntN(2)]
			}
			used := rng.Float64() < pUsed
			if rng.IntN(10) == 0 {
				r.At = before - rng.Int64N(1000) // past its hour: pending no more
			}
			js, err := json.Marshal(r)
			assert.Success(t, err)
			fields = append(fields, r.ID, string(js))
			if used {
				fields = append(fields, "u:"+r.ID, 1)
				usedIDs[r.ID] = true
			}
			if held[r.SHA256] == 0 {
				stored += r.Size
			}
			held[r.SHA256]++
			if used || r.At > before {
				recs = append(recs, r)
			}
		}
		for sha, n := range held {
			fields = append(fields, "b:"+sha, n)
		}
		fields = append(fields, ".bytes", stored)
		_, err := rdb.HSet(ctx, key, fields...).Result()
		assert.Success(t, err)

		// The upload: by one of them, or one holding nothing; bytes the
		// thread holds, or new.
		by := uploaders[rng.IntN(len(uploaders))]
		sha, size := fmt.Sprintf("%064x", rng.Uint64()), rng.Int64N(30*mib)
		if rng.IntN(2) == 0 {
			sha = shas[rng.IntN(len(shas))]
			size = sizes[sha]
		}
		pre := rng.IntN(4) == 0
		flag := "0"
		if pre {
			flag = "1"
		}
		res, err := roomEval.Run(ctx, rdb, []string{key}, append([]any{before, by, sha, size, flag}, roomLimits()...)...).Text()
		assert.Success(t, err)
		want := store.Room(recs, func(id string) bool { return usedIDs[id] }, by, sha, size, pre)
		got := roomRefusal(res)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("case %d: an upload by %q of %d bytes (held: %v, pre: %v) into %d records: Lua %q (%v), Room %v", c, by, size, held[sha] > 0, pre, len(recs), res, got, want)
		}
		refusals[res]++
		rdb.Del(ctx, key)
	}
	t.Logf("answers: %v", refusals)
	// Each answer was walked, taken and refused.
	for _, res := range []string{"", "pending", "drafts", "full", "draftbytes"} {
		assert.True(t, refusals[res] > 0, "no case answered %q: %v", res, refusals)
	}
}
