package storetest

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CorruptThread damages the thread's stored messages as a damaged disk, a
// hand edit or a write by something else would: the file store's
// document is written over with one cut short, and on Redis one more
// entry, after the newest, is added to the thread's log holding JSON that
// does not parse (what `redis-cli XADD` by hand leaves). The thread must
// have a message. It returns a function that reads what the store keeps
// of the thread, raw (the file store's files of the chat folder; on Redis
// every key of the thread and its entries in the indexes), to check that
// nothing writes over it or adds to it.
func (b *Backend) CorruptThread(t testing.TB, thread string) (raw func() string) {
	t.Helper()
	ctx := context.Background()
	if IsRedis(b.Name) {
		c := b.ThreadClient(t, thread)
		prefix := b.KeyPrefix(thread)
		log := prefix + "{" + thread + "}:log"
		last, err := c.XRevRangeN(ctx, log, "+", "-", 1).Result()
		if err != nil || len(last) == 0 {
			t.Fatalf("storetest: the newest entry of %s: %v (%d entries)", log, err, len(last))
		}
		epoch, err := strconv.ParseInt(strings.TrimSuffix(last[0].ID, "-0"), 10, 64)
		if err != nil {
			t.Fatalf("storetest: entry id %q: %v", last[0].ID, err)
		}
		id := strconv.FormatInt(epoch+1, 10) + "-0"
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: log, ID: id, Values: []string{"j", `{"id":broken`}}).Err(); err != nil {
			t.Fatalf("storetest: add a broken entry to %s: %v", log, err)
		}
		return func() string { return redisThreadState(t, c, prefix, thread) }
	}
	dir := filepath.Join(b.Dir, "chat")
	bad := []byte(`{"version":1,"thread":"` + thread + `","messages":[{"id":`)
	if err := os.WriteFile(filepath.Join(dir, thread+".json"), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() string { return folderState(t, dir, thread) }
}

// CorruptPush writes over the thread's push subscriptions record with
// one a newer chatrelay could have written: on the file store a version
// this code does not know, on Redis each subscription (the thread must
// have one) with a field this code does not know. It returns what raw
// of CorruptThread returns.
func (b *Backend) CorruptPush(t testing.TB, thread string) (raw func() string) {
	t.Helper()
	ctx := context.Background()
	if IsRedis(b.Name) {
		c := b.ThreadClient(t, thread)
		prefix := b.KeyPrefix(thread)
		key := prefix + "{" + thread + "}:push"
		subs, err := c.HGetAll(ctx, key).Result()
		if err != nil || len(subs) == 0 {
			t.Fatalf("storetest: the subscriptions of %s: %v (%d)", key, err, len(subs))
		}
		for id, js := range subs {
			newer := strings.TrimSuffix(js, "}") + `,"topic_key":"k1"}`
			if err := c.HSet(ctx, key, id, newer).Err(); err != nil {
				t.Fatalf("storetest: HSET %s %s: %v", key, id, err)
			}
		}
		return func() string { return redisThreadState(t, c, prefix, thread) }
	}
	dir := filepath.Join(b.Dir, "chat")
	newer := []byte(`{"version":2,"thread":"` + thread + `","subscriptions":[]}`)
	if err := os.WriteFile(filepath.Join(dir, thread+".push.json"), newer, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() string { return folderState(t, dir, thread) }
}

// folderState lists the files of dir whose names start with thread, with
// their bytes (lock files by name only: their content is the lock's).
func folderState(t testing.TB, dir, thread string) string {
	t.Helper()
	var out strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() || !strings.HasPrefix(rel, thread) {
			return nil
		}
		out.WriteString(rel + "\n")
		if filepath.Ext(path) == ".lock" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out.Write(data)
		out.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatalf("storetest: read %s: %v", dir, err)
	}
	return out.String()
}

// redisThreadState is every key of thread (serialized with DUMP, in name
// order) and its entries in the thread, pending, grant and upload indexes.
func redisThreadState(t testing.TB, c redis.UniversalClient, prefix, thread string) string {
	t.Helper()
	ctx := context.Background()
	pattern := prefix + "{" + thread + "}*"
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return iter.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster calls at once
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("storetest: a %T client", c)
	}
	if err != nil {
		t.Fatalf("storetest: SCAN %s: %v", pattern, err)
	}
	slices.Sort(keys)
	var out strings.Builder
	for _, k := range keys {
		d, err := c.Dump(ctx, k).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("storetest: DUMP %s: %v", k, err)
		}
		out.WriteString(k + " " + strconv.Quote(d) + "\n")
	}
	score := func(key string) string {
		s, err := c.ZScore(ctx, key, thread).Result()
		if err == redis.Nil {
			return "none"
		}
		if err != nil {
			t.Fatalf("storetest: ZSCORE %s: %v", key, err)
		}
		return strconv.FormatFloat(s, 'f', -1, 64)
	}
	out.WriteString("threads " + score(prefix+"threads") + "\n")
	out.WriteString("att-threads " + score(prefix+"att-threads") + "\n")
	out.WriteString("att-places " + score(prefix+"att-places") + "\n")
	pending, err := c.ZRangeWithScores(ctx, prefix+"pending", 0, -1).Result()
	if err != nil {
		t.Fatalf("storetest: pending: %v", err)
	}
	for _, z := range pending {
		if m, _ := z.Member.(string); strings.HasPrefix(m, thread+" ") {
			out.WriteString("pending " + m + " " + strconv.FormatFloat(z.Score, 'f', -1, 64) + "\n")
		}
	}
	gindex, err := c.HGetAll(ctx, prefix+"grant-index").Result()
	if err != nil {
		t.Fatalf("storetest: grant-index: %v", err)
	}
	var gs []string
	for k, v := range gindex {
		if v == thread {
			gs = append(gs, k)
		}
	}
	slices.Sort(gs)
	out.WriteString("grant-index " + strings.Join(gs, " ") + "\n")
	return out.String()
}
