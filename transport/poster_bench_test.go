package transport_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/testproc"
)

// The posting clients of BenchmarkWebPush and BenchmarkPostsWhileUploading
// run in a process of their own,
// as the people posting run on machines of their own: in the server's
// process their goroutines (a request's write, its answer's read, the
// connection's loops) took the server's Ps, and with push on, while a
// push's turn of the background lane holds one of the two Ps, they shared
// the other with the server's handlers, where in the push-off phase they
// had two: a cost of the harness that the on/off ratio counted as the
// server's. The process is this test binary run again with only
// TestPosterProcess, at the test's own priority (its round trips are the
// figure: it must not wait for a core behind the server). The test sends
// it a phase on a line of its input (posterPhase, as JSON) and reads the
// round trips back on a line of its output (posterResult); it exits when
// its input closes.

const posterEnv = "CHATRELAY_POSTER" // set (to anything) in the poster process

// posterPhase is one phase of posts: Posts posts from Workers clients to
// URL (its /api/chat/post), post n as tokenN(First + n % Threads), paced
// at Rate a second in all from the phase's start (0: each worker's next
// post as soon as its last is answered). NewClient makes the phase's
// posts (and the next phases', to URL) through a new client (new
// connections), not the one kept for URL.
type posterPhase struct {
	URL       string `json:"url"`
	Posts     int    `json:"posts"`
	First     int    `json:"first"`
	Threads   int    `json:"threads"`
	Workers   int    `json:"workers"`
	Rate      int    `json:"rate"`
	NewClient bool   `json:"new_client"`
}

// posterResult is a phase's outcome: each post's round trip (ns), the
// posts that started more than a millisecond after their time, and the
// first failure, if any.
type posterResult struct {
	Lat  []int64 `json:"lat"`
	Late int64   `json:"late"`
	Err  string  `json:"err,omitempty"`
}

// TestPosterProcess is the poster process (posterEnv set); without it,
// it does nothing.
func TestPosterProcess(t *testing.T) {
	if os.Getenv(posterEnv) == "" {
		t.Skip("the poster process of BenchmarkWebPush")
	}
	clients := map[string]*http.Client{} // one per server, its connections kept across phases
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var ph posterPhase
		if err := json.Unmarshal(in.Bytes(), &ph); err != nil {
			t.Fatal(err)
		}
		c := clients[ph.URL]
		if c == nil || ph.NewClient {
			if c != nil {
				c.CloseIdleConnections()
			}
			c = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: ph.Workers}}
			clients[ph.URL] = c
		}
		res := postPhase(c, ph)
		b, _ := json.Marshal(res)
		out.Write(append(b, '\n'))
		out.Flush()
	}
}

// postPhase makes ph's posts through c.
func postPhase(c *http.Client, ph posterPhase) posterResult {
	var mu sync.Mutex
	var res posterResult
	var next, late atomic.Int64
	begin := time.Now()
	var wg sync.WaitGroup
	for range ph.Workers {
		wg.Go(func() {
			var mine []int64
			defer func() {
				mu.Lock()
				res.Lat = append(res.Lat, mine...)
				mu.Unlock()
			}()
			for {
				n := int(next.Add(1)) - 1
				if n >= ph.Posts {
					return
				}
				if ph.Rate > 0 {
					at := begin.Add(time.Duration(n) * time.Second / time.Duration(ph.Rate))
					if wait := time.Until(at); wait > 0 {
						time.Sleep(wait) // the post's time: pacing, not a condition
					} else if -wait > time.Millisecond {
						late.Add(1)
					}
				}
				d, err := benchPostURL(c, ph.URL, tokenN(ph.First+n%ph.Threads))
				if err != nil {
					mu.Lock()
					if res.Err == "" {
						res.Err = err.Error()
					}
					mu.Unlock()
					return
				}
				mine = append(mine, int64(d))
			}
		})
	}
	wg.Wait()
	res.Late = late.Load()
	return res
}

// poster is the poster process, as the benchmark drives it.
type poster struct {
	proc *testproc.Proc
	out  *bufio.Scanner
}

// startPoster starts the poster process, at the test's priority; it is
// stopped at tb's end.
func startPoster(tb testing.TB) *poster {
	tb.Helper()
	proc := testproc.Start(tb, "TestPosterProcess", []string{posterEnv + "=1"}, 0)
	tb.Cleanup(func() {
		proc.Stop(10 * time.Second)
	})
	out := bufio.NewScanner(proc.Stdout)
	out.Buffer(nil, 16<<20)
	return &poster{proc: proc, out: out}
}

// phase sends ph to the poster process, without waiting: result reads
// its outcome.
func (p *poster) phase(tb testing.TB, ph posterPhase) {
	b, _ := json.Marshal(ph)
	if _, err := p.proc.Write(append(b, '\n')); err != nil {
		tb.Fatalf("the poster process: %v", err)
	}
}

// result reads the outcome of the phase sent last: its round trips.
func (p *poster) result(tb testing.TB) []time.Duration {
	for p.out.Scan() {
		var res posterResult
		if json.Unmarshal(p.out.Bytes(), &res) != nil {
			continue // the test framework's own lines
		}
		if res.Err != "" {
			tb.Fatalf("the poster process: %s", res.Err)
		}
		benchLate.Add(res.Late)
		lat := make([]time.Duration, len(res.Lat))
		for i, d := range res.Lat {
			lat[i] = time.Duration(d)
		}
		return lat
	}
	tb.Fatalf("the poster process ended: %v", p.out.Err())
	return nil
}
