package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// TestAttachmentStoredInChunks: a file of several chunks is stored as
// fields of at most chunkSize bytes (no command grows one string of
// megabytes, which blocks Redis while it copies it), and reads back whole
// and from any offset, across chunk boundaries. Bytes a version before
// the chunks stored as one string read back too.
func TestAttachmentStoredInChunks(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	st := openStore(t, srv, Options{})
	ctx := t.Context()
	const thread = "c4c4c4c4c4c4c4c4"
	body := make([]byte, 2*chunkSize+chunkSize/3)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	a := must[chatrelay.Attachment](t)(st.PutAttachment(ctx, thread, store.Upload{Name: "big.bin", Body: bytes.NewReader(body)}))
	key := st.blobKey(thread, a.SHA256)
	assert.Equal(t, "type of the stored bytes", must[string](t)(st.rdb.Type(ctx, key).Result()), "hash")
	fields := must[map[string]string](t)(st.rdb.HGetAll(ctx, key).Result())
	assert.Equal(t, "chunks", len(fields), 3)
	for f, v := range fields {
		assert.True(t, len(v) <= chunkSize, "chunk %s holds %d bytes", f, len(v))
	}

	check := func(what string) {
		t.Helper()
		_, f, err := st.OpenAttachment(ctx, thread, a.ID, "")
		assert.Success(t, err)
		defer f.Close()
		got, err := io.ReadAll(f)
		assert.Success(t, err)
		assert.True(t, bytes.Equal(got, body), "%s: the whole file differs (%d bytes read)", what, len(got))
		for _, off := range []int64{0, 1, chunkSize - 7, chunkSize, 2*chunkSize - 1, int64(len(body)) - 5} {
			_, err := f.Seek(off, io.SeekStart)
			assert.Success(t, err)
			b := make([]byte, 20)
			n, err := io.ReadFull(f, b)
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%s: read at %d: %v", what, off, err)
			}
			assert.True(t, bytes.Equal(b[:n], body[off:min(off+20, int64(len(body)))]), "%s: the bytes at %d differ", what, off)
		}
	}
	check("chunked")

	// As a version before the chunks stored them: one string.
	assert.Success(t, st.rdb.Del(ctx, key).Err())
	assert.Success(t, st.rdb.Set(ctx, key, body, 0).Err())
	check("one string")
}

// failCommit fails the script that commits an upload, as a Redis that
// errs at that moment would.
type failCommit struct{}

func (failCommit) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failCommit) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && strings.Contains(cmd.String(), commitScript.Hash()) || strings.Contains(cmd.String(), "local att, stage, blob") {
			err := errors.New("injected: the commit fails")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (failCommit) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRefusedUploadLeavesNothing: an upload whose commit fails answers
// store_unavailable and leaves no key of the thread and no listing for
// the sweep (a refused request leaves nothing behind).
func TestRefusedUploadLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	st := openStore(t, srv, Options{Prefix: "refused:"})
	ctx := t.Context()
	const thread = "d5d5d5d5d5d5d5d5"
	st.rdb.AddHook(failCommit{})
	_, err := st.PutAttachment(ctx, thread, store.Upload{Name: "a.txt", Body: strings.NewReader(strings.Repeat("x", chunkSize+10))})
	assert.Equal(t, "code", chatrelay.CodeOf(err), chatrelay.StoreUnavailable)
	keys := must[[]string](t)(srv.Client(t).Keys(ctx, "refused:*").Result())
	assert.Equal(t, "keys left", strings.Join(keys, " "), "")
}

// hookReader reads r, running hook once after the first n bytes.
type hookReader struct {
	r    io.Reader
	n    int
	hook func()
}

func (h *hookReader) Read(p []byte) (int, error) {
	if h.hook != nil && h.n <= 0 {
		h.hook()
		h.hook = nil
	}
	if h.hook != nil {
		p = p[:min(len(p), h.n)]
	}
	k, err := h.r.Read(p)
	h.n -= k
	return k, err
}

// TestUploadWhenRedisLostItsData: Redis loses its data while an upload is
// received (a restart without persistence, a failover to a replica that
// had not the first chunks): the staging key then lacks the chunks sent
// before, or is gone. The upload must not be stored with bytes missing
// (its record naming a size and a digest its bytes do not have, read back
// short): it is refused, retryable, and leaves nothing. Also when the loss
// comes after the last chunk, before the commit.
func TestUploadWhenRedisLostItsData(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	st := openStore(t, srv, Options{})
	rdb := srv.Client(t)
	ctx := t.Context()
	body := make([]byte, 3*chunkSize+100)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	for _, c := range []struct {
		name   string
		thread string
		after  int // bytes read before Redis loses its data
	}{
		{"after the first chunk", "e6e6e6e6e6e6e6e6", chunkSize + 10},
		{"after the last chunk", "f7f7f7f7f7f7f7f7", len(body)},
	} {
		lose := func() { assert.Success(t, rdb.FlushAll(ctx).Err()) }
		a, err := st.PutAttachment(ctx, c.thread, store.Upload{Name: "big.bin", Body: &hookReader{r: bytes.NewReader(body), n: c.after, hook: lose}})
		if err == nil {
			_, f, err := st.OpenAttachment(ctx, c.thread, a.ID, "")
			assert.Success(t, err)
			got, err := io.ReadAll(f)
			f.Close()
			t.Fatalf("%s: stored as %s (%d bytes), reads back %d bytes (%v)", c.name, a.ID, a.Size, len(got), err)
		}
		assert.Equal(t, c.name+": code", chatrelay.CodeOf(err), chatrelay.StoreUnavailable)
		keys := must[[]string](t)(rdb.Keys(ctx, "*"+c.thread+"*").Result())
		assert.Equal(t, c.name+": keys left", strings.Join(keys, " "), "")
	}
}

// TestUploadThreadLimitAcrossNodes: uploads that start threads, and posts
// that create them, raced on two nodes of one Redis, take no more places
// than the thread limit has (uploadThreadLimitAcrossNodes).
func TestUploadThreadLimitAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	opt := Options{MaxThreads: 7, Now: clk.Now}
	uploadThreadLimitAcrossNodes(t, openStore(t, srv, opt), openStore(t, srv, opt), clk)
}

// TestShardedUploadThreadLimitAcrossNodes: the same on shards and on a
// cluster, where the limit holds for all shards together: an upload that
// would start its thread takes the creation lock and counts the other
// shards' places, as a post that creates one does. The 50 writes take the
// lock in turn, on the default store timeout: a write waits for its turn
// as long as the lock moves on (lockCreate), up to maxCreateWait store
// timeouts, which 50 turns stay far within on a loaded machine.
func TestShardedUploadThreadLimitAcrossNodes(t *testing.T) {
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		clk := testclock.New(time.UnixMilli(1792778400000))
		opt := Options{Prefix: prefix, MaxThreads: 7, Now: clk.Now}
		uploadThreadLimitAcrossNodes(t, openSharded(t, spec, opt), openSharded(t, spec, opt), clk)
	})
}

// uploadThreadLimitAcrossNodes checks a store limited to 7 threads through
// two nodes a and b: 20 new threads each sent two uploads at once, one
// through each node, and 10 more created by a post, all at once: 7
// threads hold something (an upload thread both of its uploads: one took
// the place, the other found it taken), the others nothing; a new thread
// is then refused, by upload and by post. Once the uploads expire and a
// sweep collects them, their places are free again, and only theirs.
func uploadThreadLimitAcrossNodes(t *testing.T, a, b store.Store, clk *testclock.Clock) {
	ctx := t.Context()
	put := func(st store.Store, th string) error {
		_, err := st.(store.Attachments).PutAttachment(ctx, th, store.Upload{Name: "f.txt", Type: "text/plain", Body: strings.NewReader("bytes of " + th)})
		return err
	}
	var mu sync.Mutex
	stored := map[string]int{} // thread -> its writes stored
	note := func(th string, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch chatrelay.CodeOf(err) {
		case "":
			stored[th]++
		case chatrelay.ThreadLimit:
		default:
			t.Errorf("%s: %v", th, err)
		}
	}
	var wg sync.WaitGroup
	uploaded := map[string]bool{}
	for i := range 20 {
		th := fmt.Sprintf("%016x", 0xf11e000+i)
		uploaded[th] = true
		wg.Go(func() { note(th, put(a, th)) })
		wg.Go(func() { note(th, put(b, th)) })
	}
	for i := range 10 {
		th := fmt.Sprintf("%016x", 0x9057000+i)
		node := a
		if i%2 == 1 {
			node = b
		}
		wg.Go(func() {
			_, err := node.Append(ctx, th, store.NewMessage{Text: "first"})
			note(th, err)
		})
	}
	wg.Wait()
	if len(stored) != 7 {
		t.Fatalf("%d threads hold something, want 7: %v", len(stored), stored)
	}
	posted := 0
	for th, n := range stored {
		if !uploaded[th] {
			posted++
		} else if n != 2 {
			t.Errorf("thread %s kept %d of its 2 uploads", th, n)
		}
	}
	wantCode(t, put(b, "fedcba9876543210"), chatrelay.ThreadLimit)
	_, err := a.Append(ctx, "fedcba9876543210", store.NewMessage{Text: "new"})
	wantCode(t, err, chatrelay.ThreadLimit)

	clk.Advance(time.Duration(chatrelay.LimitAttachmentUnused.Max) * time.Second)
	must[store.SweepStats](t)(a.Sweep(ctx))
	for i := range 7 - posted {
		if err := put([]store.Store{a, b}[i%2], fmt.Sprintf("%016x", 0xa77e000+i)); err != nil {
			t.Fatalf("upload %d of %d into a new thread after the sweep: %v", i+1, 7-posted, err)
		}
	}
	wantCode(t, put(b, "fedcba9876543210"), chatrelay.ThreadLimit)
}
