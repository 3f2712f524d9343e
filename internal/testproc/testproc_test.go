package testproc_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testproc"
)

const helperEnv = "TESTPROC_NICE_HELPER"

// TestNiceHelper is the helper of TestEveryThreadNice (helperEnv set):
// it makes threads (goroutines locked to threads of their own, as the
// runtime makes them for work that blocks), reports the niceness of each
// of its threads on a line, then "end", and waits for its input's end.
func TestNiceHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("the helper process of TestEveryThreadNice")
	}
	var ready, stop sync.WaitGroup
	stop.Add(1)
	for range 4 {
		ready.Add(1)
		go func() {
			runtime.LockOSThread()
			ready.Done()
			stop.Wait()
		}()
	}
	ready.Wait()
	tasks, _ := filepath.Glob("/proc/self/task/*/stat")
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that ended
		}
		_, rest, _ := strings.Cut(string(b), ") ") // after the command's name
		fields := strings.Fields(rest)             // from the state (field 3): the niceness is field 19
		if len(fields) > 38 {
			fmt.Println(fields[16], fields[38]) // the niceness, and the scheduling policy (field 41)
		}
	}
	fmt.Println("end")
	io.Copy(io.Discard, os.Stdin)
	stop.Done()
}

// TestEveryThreadNice: every thread of a helper runs at the niceness it
// is started at, not only its first, in the normal scheduling class.
func TestEveryThreadNice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	for i, n := range helperThreads(t, 19) {
		assert.Equal(t, fmt.Sprintf("niceness and policy of thread %d", i+1), n, "19 0")
	}
}

// TestEveryThreadIdle: every thread of a helper started at Idle runs in
// the SCHED_IDLE class (policy 5), at nice 19.
func TestEveryThreadIdle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if _, err := exec.LookPath("chrt"); err != nil {
		// util-linux, in every Debian (essential): a machine without it
		// runs the benchmarks' helpers at nice 19 alone, which this test
		// is here to catch, not to pass by.
		t.Fatalf("chrt (util-linux) is not installed: the helpers would run at nice 19 only: %v", err)
	}
	for i, n := range helperThreads(t, testproc.Idle) {
		assert.Equal(t, fmt.Sprintf("niceness and policy of thread %d", i+1), n, "19 5")
	}
}

// helperThreads starts TestNiceHelper at nice and returns what it
// reported of each of its threads: "niceness policy".
func helperThreads(t *testing.T, nice int) []string {
	p := testproc.Start(t, "TestNiceHelper", []string{helperEnv + "=1"}, nice)
	var nices []string
	read, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(p.Stdout)
		for sc.Scan() && sc.Text() != "end" {
			nices = append(nices, sc.Text())
		}
		close(read)
		io.Copy(io.Discard, p.Stdout) // to the helper's exit
	}()
	select {
	case <-read:
	case <-time.After(30 * time.Second):
		p.Stop(time.Second)
		<-drained
		t.Fatal("the helper did not report its threads")
	}
	assert.Success(t, p.Stop(30*time.Second))
	<-drained
	assert.True(t, len(nices) >= 5, "the helper reported %d threads", len(nices))
	return nices
}
