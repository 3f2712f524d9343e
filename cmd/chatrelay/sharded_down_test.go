package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/redisstore"
)

// TestServeShardDownAtStart: with one of two Redis instances down (shard
// 1; shard 0 holds the ticket key), the host CLI writes a thread of the
// other shard and a node starts: a post on the healthy shard's thread is
// 201 and reaches a live stream, one on the down shard's is 503
// store_unavailable with Retry-After, and /readyz says 200 with
// "store":"partial" (every node finds the shard down alike: 503 would
// take them all out of rotation, and the healthy shard's threads with
// them). Once the shard is back at its address, without a restart, its
// thread takes posts that reach a stream (the node's and the CLI's: the
// node follows its feed), and /readyz says "ok"; gone again while the
// node runs, "partial" again, and the healthy shard's thread streams.
func TestServeShardDownAtStart(t *testing.T) {
	t.Parallel()
	s0 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s1 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	spec := s0.URL() + "," + s1.URL()
	args := []string{"--store", spec, "--redis-prefix", "down:"}
	b, err := store.Open(t.Context(), spec, store.Options{KeyPrefix: "down:"})
	assert.Success(t, err)
	sh := b.Store.(*redisstore.Sharded)
	tokens := make([]string, 2) // a thread's token on each shard
	threads := make([]string, 2)
	for i := 0; tokens[0] == "" || tokens[1] == ""; i++ {
		r := runCLI(t, nil, "", append([]string{"open", "--text", "first", "--public-url", "https://chat.example.com/"}, args...)...)
		assert.Success(t, r.err)
		var out struct {
			Thread string `json:"thread"`
			Link   string `json:"link"`
		}
		assert.Success(t, json.Unmarshal([]byte(r.stdout), &out))
		_, tok, _ := strings.Cut(out.Link, "#t=")
		k := sh.ShardOf(out.Thread)
		tokens[k], threads[k] = tok, out.Thread
	}
	b.Close()

	s1.Kill()
	r := runCLI(t, nil, "", append([]string{"reply", threads[0], "while shard 1 is down"}, args...)...)
	assert.Success(t, r.err)
	r = runCLI(t, nil, "", append([]string{"reply", threads[1], "on the down shard"}, args...)...)
	assert.True(t, r.err != nil && strings.Contains(r.stderr+r.err.Error(), "store_unavailable"), "a reply on the down shard: %v, stderr %q", r.err, r.stderr)

	base := startServe(t, args...)
	type answer struct {
		StatusCode int
		Header     http.Header
		Code       string
	}
	post := func(tok, text string) answer {
		t.Helper()
		req, err := http.NewRequest("POST", base+"api/chat/post", strings.NewReader(`{"text":"`+text+`"}`))
		assert.Success(t, err)
		req.Header.Set("X-Chat-Token", tok)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		defer res.Body.Close()
		var body struct {
			Code string `json:"code"`
		}
		json.NewDecoder(res.Body).Decode(&body)
		return answer{res.StatusCode, res.Header, body.Code}
	}
	stream := func(tok, text string) <-chan bool { return streamSays(t, base, tok, text) }
	// readyz is /readyz's status and its body's store.
	readyz := func() (int, string) {
		res, err := http.Get(base + "readyz")
		assert.Success(t, err)
		defer res.Body.Close()
		var body struct {
			Store string `json:"store"`
		}
		json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body.Store
	}

	got := stream(tokens[0], "live on shard 0")
	assert.Equal(t, "post on the healthy shard", post(tokens[0], "live on shard 0").StatusCode, 201)
	assert.True(t, <-got, "the healthy shard's post did not reach its stream")
	res := post(tokens[1], "on the down shard")
	assert.Equal(t, "post on the down shard", res.StatusCode, 503)
	assert.Equal(t, "its code", res.Code, "store_unavailable")
	assert.True(t, res.Header.Get("Retry-After") != "", "no Retry-After on the down shard's 503")
	status, st := readyz()
	assert.True(t, status == 200 && st == "partial", "readyz with a shard down: %d %q", status, st)

	s1.Restart(t)
	assert.Eventually(t, 15*time.Second, "a post on the shard back", func() bool {
		return post(tokens[1], "first after").StatusCode == 201
	})
	got = stream(tokens[1], "live on shard 1")
	assert.Equal(t, "post on the shard back", post(tokens[1], "live on shard 1").StatusCode, 201)
	assert.True(t, <-got, "the shard back's post did not reach its stream")
	got = stream(tokens[1], "from the CLI")
	r = runCLI(t, nil, "", append([]string{"reply", threads[1], "from the CLI"}, args...)...)
	assert.Success(t, r.err)
	assert.True(t, <-got, "the CLI's reply on the shard back did not reach the stream")
	assert.Eventually(t, 15*time.Second, "readyz ok with the shard back", func() bool {
		status, st := readyz()
		return status == 200 && st == "ok"
	})

	// A shard that goes away while the node runs: the node stays ready,
	// the healthy shard's thread streams.
	s1.Kill()
	assert.Eventually(t, 15*time.Second, "readyz partial with the shard gone", func() bool {
		status, st := readyz()
		return status == 200 && st == "partial"
	})
	got = stream(tokens[0], "shard 1 gone")
	assert.Equal(t, "post on the healthy shard", post(tokens[0], "shard 1 gone").StatusCode, 201)
	assert.True(t, <-got, "the healthy shard's post did not reach its stream")
}

// TestServeShard0DownAtStart: shard 0 holds the ticket key every node
// signs streams with; a node that starts while it is down exits with
// store_unavailable naming it, rather than sign with a key of its own,
// and the host CLI still writes a thread of the other shard.
func TestServeShard0DownAtStart(t *testing.T) {
	t.Parallel()
	s0 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s1 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	spec := s0.URL() + "," + s1.URL()
	args := []string{"--store", spec, "--redis-prefix", "down0:"}
	b, err := store.Open(t.Context(), spec, store.Options{KeyPrefix: "down0:"})
	assert.Success(t, err)
	sh := b.Store.(*redisstore.Sharded)
	var on1 string
	for on1 == "" {
		r := runCLI(t, nil, "", append([]string{"open", "--text", "first"}, args...)...)
		assert.Success(t, r.err)
		var out struct {
			Thread string `json:"thread"`
		}
		assert.Success(t, json.Unmarshal([]byte(r.stdout), &out))
		if sh.ShardOf(out.Thread) == 1 {
			on1 = out.Thread
		}
	}
	b.Close()

	s0.Kill()
	r := runCLI(t, nil, "", append([]string{"reply", on1, "while shard 0 is down"}, args...)...)
	assert.Success(t, r.err)
	r = runCLI(t, nil, "", append([]string{"serve", "-addr", "127.0.0.1:0"}, args...)...)
	msg := ""
	if r.err != nil {
		msg = r.stderr + r.err.Error()
	}
	assert.True(t, strings.Contains(msg, "store_unavailable") && strings.Contains(msg, s0.Addr()),
		"serve with shard 0 down: %v, stderr %q", r.err, r.stderr)
}

// streamSays opens a stream of tok's thread on the server at base and
// returns a channel that says whether a message with text came on it
// (false: the stream ended first, or 20 s passed).
func streamSays(t *testing.T, base, tok, text string) <-chan bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", base+"api/chat/stream", nil)
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", tok)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	assert.Equal(t, "stream status", res.StatusCode, 200)
	got := make(chan bool, 1)
	go func() {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") && strings.Contains(sc.Text(), `"text":"`+text+`"`) {
				got <- true
				return
			}
		}
		got <- false
	}()
	return got
}
