package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/testproc"
)

// The uploaders of BenchmarkPostsWhileUploading run in a process of their
// own, as the people who upload run on machines of their own: their
// writing of 10 MiB bodies is not the server's CPU, and on this 2-core
// machine it must not be counted as the server's, nor take its cores. The
// process is this test binary run again with only TestUploaderProcess,
// in SCHED_IDLE at nice 19 (testproc.Idle; uploaderNiceEnv sets a
// niceness instead, 19 for the class of the figures before 2026-12-05):
// it takes the CPU the server leaves. After each upload, it names it in a post, as a real
// client does (a thread holds at most attachment.pending uploads no post
// names). It reports each finished upload on a line of its output (the
// status of the post naming it, or the upload's own if it was refused),
// and exits when its input closes.

const (
	uploaderEnv     = "CHATRELAY_UPLOADER" // the job, as JSON (uploaderJob)
	uploaderNiceEnv = "CHATRELAY_UPLOADER_NICE"
)

// uploaderJob is what the uploader process does: workers clients, each
// uploading size bytes to url as token, then posting to post a message
// that names the upload, one upload after another.
type uploaderJob struct {
	URL     string `json:"url"`
	Post    string `json:"post"`
	Token   string `json:"token"`
	Size    int64  `json:"size"`
	Workers int    `json:"workers"`
}

// TestUploaderProcess is the uploader process (uploaderEnv set); without
// it, it does nothing.
func TestUploaderProcess(t *testing.T) {
	raw := os.Getenv(uploaderEnv)
	if raw == "" {
		t.Skip("the uploader process of BenchmarkPostsWhileUploading")
	}
	var job uploaderJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the parent closes our input to stop us
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for w := range job.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, job.URL, &patternReader{left: job.Size})
				req.ContentLength = job.Size
				req.Header.Set("X-Chat-Token", job.Token)
				req.Header.Set("X-Filename", "big"+string(rune('a'+w))+".bin")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				var up struct {
					Attachment struct {
						ID string `json:"id"`
					} `json:"attachment"`
				}
				err = json.NewDecoder(resp.Body).Decode(&up)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status := resp.StatusCode
				if status == http.StatusCreated && err == nil {
					status, err = namePost(ctx, job, up.Attachment.ID)
				}
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				mu.Lock()
				fmt.Fprintf(out, "%d\n", status)
				out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// namePost posts a message naming the upload id, as job's token, and
// returns the post's status.
func namePost(ctx context.Context, job uploaderJob, id string) (int, error) {
	body, _ := json.Marshal(map[string]any{"text": "", "attachments": []string{id}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, job.Post, bytes.NewReader(body))
	req.Header.Set("X-Chat-Token", job.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// startUploaders starts the uploader process on job. It counts the
// uploads the server took and a post named (201) in uploads; an upload
// or a post answered otherwise fails tb. stop ends the process and waits for it.
func startUploaders(tb testing.TB, job uploaderJob, uploads *atomic.Int64) (stop func()) {
	tb.Helper()
	raw, _ := json.Marshal(job)
	proc := testproc.Start(tb, "TestUploaderProcess", []string{uploaderEnv + "=" + string(raw)}, testproc.Nice(uploaderNiceEnv, testproc.Idle))
	stdout := proc.Stdout
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			status, err := strconv.Atoi(sc.Text())
			switch {
			case err != nil: // the test framework's own lines (PASS)
			case status != http.StatusCreated:
				tb.Errorf("an upload, or the post naming it, answered %d", status)
			default:
				uploads.Add(1)
			}
		}
	}()
	return func() {
		if err := proc.Stop(30 * time.Second); err != nil {
			tb.Errorf("the uploader process: %v", err)
		}
		<-read
	}
}
