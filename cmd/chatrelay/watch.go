package main

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/store"
)

// watchLine is one line of watch and subscribe output.
type watchLine struct {
	Thread  string          `json:"thread"`
	Message json.RawMessage `json:"message,omitempty"`
	Reset   bool            `json:"reset,omitempty"` // messages were dropped by retention: redraw
}

// watch prints every new message of every thread as one JSON line, read
// from the store's change feed: no server needed.
func watch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("watch", "watch [--data DIR] [--since EPOCH] [--all]", stderr)
	var sf storeFlags
	sf.register(fs, false)
	since := fs.Int64("since", 0, "first print stored messages with epoch > `EPOCH` (0: only new ones)")
	all := fs.Bool("all", false, "include hermes's own messages")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 || *since < 0 {
		return usageError("watch takes no arguments and a non-negative --since")
	}
	st, err := sf.open(ctx, store.FileOptions{})
	if err != nil {
		return err
	}
	defer st.Close()

	q := newBatchQueue(4096)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { st.Follow(ctx, q.push) })
	select { // the feed is registered before the store is read: nothing falls between
	case <-q.ready:
	case <-ctx.Done():
		return nil
	}

	enc := json.NewEncoder(stdout)
	last := map[string]int64{}
	print := func(thread string, msgs []store.Entry) error {
		for _, e := range msgs {
			if e.Epoch <= last[thread] {
				continue
			}
			last[thread] = e.Epoch
			if e.Author == chatrelay.Hermes && !*all {
				continue
			}
			if err := enc.Encode(watchLine{Thread: thread, Message: e.JSON}); err != nil {
				return err
			}
		}
		return nil
	}
	// catchUp prints what the store has after each thread's last epoch
	// (after from, for threads not seen yet), oldest first across threads.
	catchUp := func(from int64, only string) error {
		infos, err := st.Threads(ctx)
		if err != nil {
			return err
		}
		var backlog []watchEntry
		for _, info := range infos {
			if only != "" && info.Thread != only {
				continue
			}
			after, seen := last[info.Thread]
			if !seen {
				after = from
			}
			p, err := st.Since(ctx, info.Thread, after, 0)
			if err != nil {
				fmt.Fprintf(stderr, "chatrelay watch: thread %s: %v\n", info.Thread, err)
				continue
			}
			for _, e := range p.Messages {
				backlog = append(backlog, watchEntry{info.Thread, e})
			}
		}
		slices.SortFunc(backlog, func(a, b watchEntry) int { return int(a.e.Epoch - b.e.Epoch) })
		for _, b := range backlog {
			if err := print(b.thread, []store.Entry{b.e}); err != nil {
				return err
			}
		}
		return nil
	}
	if *since > 0 {
		if err := catchUp(*since, ""); err != nil {
			return err
		}
	}
	start := time.Now().UnixMilli()
	for {
		batches, lost, ok := q.pop(ctx)
		if !ok {
			return nil
		}
		if lost { // the queue overflowed: the store has everything
			if err := catchUp(start, ""); err != nil {
				return err
			}
			continue
		}
		for _, b := range batches {
			var err error
			if b.Reset {
				err = catchUp(start, b.Thread)
			} else {
				err = print(b.Thread, b.Messages)
			}
			if err != nil {
				return err
			}
		}
	}
}

type watchEntry struct {
	thread string
	e      store.Entry
}

// batchQueue takes feed batches without blocking the feed; past max
// batches it drops them and says so, and the reader catches up from the
// store.
type batchQueue struct {
	max   int
	ready chan struct{}
	wake  chan struct{}
	mu    sync.Mutex // guards items and lost
	items []store.Batch
	lost  bool
}

func newBatchQueue(max int) *batchQueue {
	return &batchQueue{max: max, ready: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (q *batchQueue) push(b store.Batch) {
	if b.Ready {
		close(q.ready)
		return
	}
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.items, q.lost = nil, true
	} else if !q.lost {
		q.items = append(q.items, b)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *batchQueue) pop(ctx context.Context) ([]store.Batch, bool, bool) {
	for {
		q.mu.Lock()
		items, lost := q.items, q.lost
		q.items, q.lost = nil, false
		q.mu.Unlock()
		if len(items) > 0 || lost {
			return items, lost, true
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return nil, false, false
		}
	}
}

// subscribe prints one thread's live messages from a remote server, over
// its WebSocket, resuming from the last epoch after every drop.
func subscribe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("subscribe", "subscribe --server URL [--token T | --ticket K] [--since N]", stderr)
	server := fs.String("server", "", "the chatrelay `URL`, with its prefix: http://127.0.0.1:8080")
	token := fs.String("token", "", "the thread's token (64 hex); prefer CHATRELAY_TOKEN to keep it out of ps")
	ticket := fs.String("ticket", "", "a read-only ticket instead of a token (it expires; the stream ends then)")
	since := fs.Int64("since", 0, "resume after `N` (epoch ms); 0: the newest 50, then live")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if *server == "" || (*token == "") == (*ticket == "") || *since < 0 || fs.NArg() > 0 {
		return usageError("subscribe needs --server and exactly one of --token or --ticket")
	}
	u, err := url.Parse(strings.TrimSuffix(*server, "/") + "/api/chat/ws")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return usageError(fmt.Sprintf("--server %q: want http:// or https://", *server))
	}
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	hdr := http.Header{}
	if *token != "" {
		hdr.Set("X-Chat-Token", *token)
	}
	enc := json.NewEncoder(stdout)
	cursor := *since
	backoff := 500 * time.Millisecond
	for {
		q := u.Query()
		q.Set("since", strconv.FormatInt(cursor, 10))
		if *ticket != "" {
			q.Set("ticket", *ticket)
		}
		u.RawQuery = q.Encode()
		got, err := subscribeOnce(ctx, u.String(), hdr, &cursor, enc)
		if ctx.Err() != nil {
			return nil
		}
		switch websocket.CloseStatus(err) {
		case websocket.StatusPolicyViolation:
			return fmt.Errorf("the server refused the stream: %v", err)
		}
		if got {
			backoff = 500 * time.Millisecond
		}
		fmt.Fprintf(stderr, "chatrelay subscribe: stream ended (%v); resuming after %d\n", err, cursor)
		wait := backoff/2 + rand.N(backoff/2+1) // jittered, so restarts don't bring every agent back at once
		backoff = min(2*backoff, 15*time.Second)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// subscribeOnce follows one WebSocket until it ends, printing messages
// after *cursor and advancing it. It reports whether it got the ready frame.
func subscribeOnce(ctx context.Context, u string, hdr http.Header, cursor *int64, enc *json.Encoder) (bool, error) {
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return false, err
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	var thread string
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return thread != "", err
		}
		var f struct {
			Type    string          `json:"type"`
			Thread  string          `json:"thread"`
			Message json.RawMessage `json:"message"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return thread != "", fmt.Errorf("bad frame: %w", err)
		}
		switch f.Type {
		case "ready":
			thread = f.Thread
		case "reset":
			if err := enc.Encode(watchLine{Thread: thread, Reset: true}); err != nil {
				return true, err
			}
		case "message":
			var m struct {
				Epoch int64 `json:"epoch"`
			}
			if json.Unmarshal(f.Message, &m) != nil || m.Epoch <= *cursor {
				continue
			}
			*cursor = m.Epoch
			if err := enc.Encode(watchLine{Thread: thread, Message: f.Message}); err != nil {
				return true, err
			}
		}
	}
}
