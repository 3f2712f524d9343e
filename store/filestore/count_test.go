package filestore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/gofrs/flock"
)

// TestRemovedCountLockStillExcludes: the store keeps .threads.lock open
// between thread creations; if the file is removed from under it, the
// next creation locks the file now at the path, not the removed one, so
// another process that holds the new file still keeps it out (and the
// count it then writes is the one at the path).
func TestRemovedCountLockStillExcludes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{LockTimeout: 100 * time.Millisecond})
	appendText(t, s, threadA, "the first thread") // opens and keeps .threads.lock
	path := filepath.Join(dir, "chat", ".threads.lock")
	assert.Success(t, os.Remove(path))

	other := newFlock(path) // another process's lock of the file at the path
	ok, err := other.TryLock()
	assert.Success(t, err)
	assert.True(t, ok, "the new lock file is free")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = s.Append(ctx, threadB, store.NewMessage{Author: chatrelay.Operator, Text: "while another holds the count"})
	assert.Code(t, err, chatrelay.StoreUnavailable)
	_, err = os.Stat(s.path(threadB))
	assert.True(t, os.IsNotExist(err), "a creation refused for a busy count left its document: %v", err)
	assert.Success(t, other.Unlock())

	appendText(t, s, threadB, "once the count is free")
	data, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.Equal(t, "the count at the path", string(data), "2\n")
}

// TestCountLockTakesTurnsInProcess: the kept .threads.lock is one open
// file, whose flock does not exclude this process's own goroutines: they
// take turns on it, so concurrent creations and upload room checks count
// every thread once.
func TestCountLockTakesTurnsInProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{MaxThreads: 1 << 20})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Go(func() {
			c, err := s.lockCount(t.Context())
			if err != nil {
				errs <- err
				return
			}
			defer c.unlock()
			count, err := s.threadCount(c)
			if err != nil {
				errs <- err
				return
			}
			runtime.Gosched() // let another goroutine in, if the lock lets it
			setThreadCount(c, count+1)
		})
	}
	wg.Wait()
	assertCountAfter(t, dir, errs, 40)
}

// assertCountAfter checks that no call of errs failed and that
// .threads.lock holds want.
func assertCountAfter(t *testing.T, dir string, errs chan error, want int) {
	t.Helper()
	close(errs)
	for err := range errs {
		assert.Success(t, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "chat", ".threads.lock"))
	assert.Success(t, err)
	assert.Equal(t, "the count", string(data), fmt.Sprintf("%d\n", want))
}

// TestCountFileHoldsTheCount: a creation writes the count over the one in
// .threads.lock, which another writer may have left longer (padded) or
// shorter: the file then holds the new count and nothing after it, and a
// count given back that has a digit less (a refused creation at 10) too.
func TestCountFileHoldsTheCount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "chat", ".threads.lock")
	assert.Success(t, os.MkdirAll(filepath.Dir(path), 0o700))
	for _, c := range []struct{ before, after string }{
		{"   0 \n", "1\n"}, // padded, longer than the new count: cut
		{"9\n", "10\n"},    // a digit more
	} {
		assert.Success(t, os.WriteFile(path, []byte(c.before), 0o600))
		s := openFile(t, dir, FileOptions{MaxThreads: 100})
		thread := fmt.Sprintf("%016x", len(c.before))
		appendText(t, s, thread, "a new thread")
		data, err := os.ReadFile(path)
		assert.Success(t, err)
		assert.Equal(t, "the count after "+strconv.Quote(c.before), string(data), c.after)
		assert.Success(t, os.Remove(s.path(thread)))
		assert.Success(t, os.Remove(s.path(thread)+".lock"))
		s.Close()
	}

	// A reservation given back from 10 to 9: the file is "9\n", not "9\n\n".
	assert.Success(t, os.WriteFile(path, []byte("9\n"), 0o600))
	s := openFile(t, dir, FileOptions{MaxThreads: 100})
	_, counted, err := s.reserveThread(t.Context(), threadB, false)
	assert.Success(t, err)
	assert.True(t, counted, "the thread is reserved")
	s.releaseThread(t.Context(), threadB)
	data, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.Equal(t, "the count given back", string(data), "9\n")
}

// TestSecondPostToThreadBeingCreated: at the thread limit's last place,
// a post to a thread that another post of the same process is creating
// (its first post holds the place and waits for the thread's lock) is
// not refused thread_limit: it waits for the creation and goes to the
// thread. The thread is counted once.
func TestSecondPostToThreadBeingCreated(t *testing.T) {
	t.Parallel()
	s, countPath, other, first := postHoldingTheLastPlace(t)

	second := make(chan error, 1)
	secondID := make(chan string, 1)
	go func() {
		secondID <- goroutineID()
		_, err := s.Append(context.Background(), threadA, store.NewMessage{Author: chatrelay.Operator, Text: "two"})
		second <- err
	}()
	// The second post waits for the thread's lock (the first holds it in
	// this process while it waits for the other's flock); refused, it
	// would answer instead.
	id := <-secondID
	assert.Eventually(t, 10*time.Second, "the second post waits for the thread's lock", func() bool {
		select {
		case err := <-second:
			t.Fatalf("the second post answered while the thread was being created: %v", err)
		default:
		}
		return waitsInLine(id, "filestore.(*File).lockState(")
	})
	assert.Success(t, other.Unlock())
	assert.Success(t, <-first)
	assert.Success(t, <-second)
	assert.Equal(t, "the thread", texts(mustSince(t, s, threadA)), []string{"one", "two"})
	data, err := os.ReadFile(countPath)
	assert.Success(t, err)
	assert.Equal(t, "the count", string(data), "1\n")
}

// goroutineID is the calling goroutine's number, as runtime.Stack writes it.
func goroutineID() string {
	var buf [64]byte
	head := string(buf[:runtime.Stack(buf[:], false)])
	id, _, _ := strings.Cut(strings.TrimPrefix(head, "goroutine "), " ")
	return id
}

// waitsInLine reports whether goroutine id waits for a thread's
// in-process lock (threadMu.lock) with fn (a frame's name, as
// runtime.Stack writes it) on its stack.
func waitsInLine(id, fn string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.HasPrefix(g, "goroutine "+id+" [select") {
			return strings.Contains(g, "filestore.threadMu.lock(") && strings.Contains(g, fn)
		}
	}
	return false
}

// TestUploadsAndPostsCreatingThreadsTogether: concurrent first uploads
// and first posts of the same new threads (half of them take uploads
// alone), at the thread limit, count each thread once: none is refused
// thread_limit, the count file says how many threads there are, and a
// thread more is refused. (An upload counts a thread it starts; a post
// counts one its uploads have not.)
func TestUploadsAndPostsCreatingThreadsTogether(t *testing.T) {
	t.Parallel()
	const threads = 8
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{MaxThreads: threads})
	var wg sync.WaitGroup
	errs := make(chan error, threads*4)
	for i := range threads {
		thread := fmt.Sprintf("%016x", 0xa0+i)
		for j := range 2 {
			wg.Go(func() {
				_, err := s.PutAttachment(context.Background(), thread, store.Upload{Name: "f.txt", Type: "text/plain", Body: strings.NewReader(fmt.Sprintf("file %d", j)), Max: 1 << 10})
				if err != nil {
					err = fmt.Errorf("upload %d: %w", i, err)
				}
				errs <- err
			})
			if i%2 == 0 { // the others hold uploads alone
				wg.Go(func() {
					_, err := s.Append(context.Background(), thread, store.NewMessage{Author: chatrelay.Operator, Text: "hello"})
					if err != nil {
						err = fmt.Errorf("post %d: %w", i, err)
					}
					errs <- err
				})
			}
		}
	}
	wg.Wait()
	assertCountAfter(t, dir, errs, threads)
	_, err := s.PutAttachment(context.Background(), fmt.Sprintf("%016x", 0xff), store.Upload{Name: "f.txt", Type: "text/plain", Body: strings.NewReader("one too many"), Max: 1 << 10})
	assert.Code(t, err, chatrelay.ThreadLimit)
}

// TestUploadStartingThreadWhilePostGivesUp: a thread's first upload that
// finds a post of this process reserving the same thread (waiting for
// the lock the upload holds) still has its thread counted if that post
// then gives up (its client went away) before the upload is stored: the
// store holds the one thread the limit allows, and a post that would
// start another is refused thread_limit.
func TestUploadStartingThreadWhilePostGivesUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var armed atomic.Pointer[func()]
	s := openFile(t, dir, FileOptions{MaxThreads: 1, LockTimeout: 20 * time.Second, Now: func() time.Time {
		if f := armed.Swap(nil); f != nil {
			(*f)() // the upload holds the thread's lock, its bytes not yet stored
		}
		return time.Now()
	}})
	countPath := filepath.Join(dir, "chat", ".threads.lock")

	// The upload receives its bytes; meanwhile another process takes the
	// thread's lock, so the upload waits for it, holding the in-process one.
	body, feed := io.Pipe()
	uploadID := make(chan string, 1)
	uploaded := make(chan error, 1)
	go func() {
		uploadID <- goroutineID()
		_, err := s.PutAttachment(context.Background(), threadA, store.Upload{Name: "f.txt", Type: "text/plain", Body: body, Max: 1 << 10})
		uploaded <- err
	}()
	id := <-uploadID
	_, err := feed.Write([]byte("the file"))
	assert.Success(t, err)
	other := newFlock(s.path(threadA) + ".lock")
	ok, err := other.TryLock()
	assert.Success(t, err)
	assert.True(t, ok, "the thread's lock is free")
	assert.Success(t, feed.Close())
	assert.Eventually(t, 10*time.Second, "the upload waits for the other process's lock", func() bool {
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.HasPrefix(g, "goroutine "+id+" [") {
				return strings.Contains(g, "filestore.flockWait(") && strings.Contains(g, "PutAttachment(")
			}
		}
		return false
	})

	// A post of the same thread reserves the place, and waits for the lock.
	postCtx, cancelPost := context.WithCancel(context.Background())
	defer cancelPost()
	posted := make(chan error, 1)
	postID := make(chan string, 1)
	go func() {
		postID <- goroutineID()
		_, err := s.Append(postCtx, threadA, store.NewMessage{Author: chatrelay.Operator, Text: "one"})
		posted <- err
	}()
	pid := <-postID
	assert.Eventually(t, 10*time.Second, "the post reserved the place and waits", func() bool {
		data, _ := os.ReadFile(countPath)
		return string(data) == "1\n" && waitsInLine(pid, "filestore.(*File).lockState(")
	})
	// Once the upload has looked at the count, the post gives up.
	giveUp := func() {
		cancelPost()
		<-posted
	}
	armed.Store(&giveUp)
	assert.Success(t, other.Unlock())
	assert.Success(t, <-uploaded)
	assert.True(t, armed.Load() == nil, "the post gave up while the upload was stored")

	_, err = s.Append(context.Background(), threadB, store.NewMessage{Author: chatrelay.Operator, Text: "another thread"})
	assert.Equal(t, "a post that starts a second thread", chatrelay.CodeOf(err), chatrelay.ThreadLimit)
}

// TestSweepWhileThreadIsCreated: the sweep recounts the threads while a
// post creates one (its place reserved, its document not yet written):
// the thread is still counted once written, so at --max-threads 1 a post
// that would start a second thread is refused thread_limit.
func TestSweepWhileThreadIsCreated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	countPath := filepath.Join(dir, "chat", ".threads.lock")
	var s *File
	var swept atomic.Bool
	s = openFile(t, dir, FileOptions{MaxThreads: 1, Now: func() time.Time {
		if data, _ := os.ReadFile(countPath); string(data) == "1\n" && swept.CompareAndSwap(false, true) {
			// The post holds the thread's lock, its place reserved.
			_, err := s.Sweep(context.Background())
			assert.Success(t, err)
		}
		return time.Now()
	}})
	appendText(t, s, threadA, "the first thread")
	assert.True(t, swept.Load(), "the sweep ran while the thread was created")

	_, err := s.Append(context.Background(), threadB, store.NewMessage{Author: chatrelay.Operator, Text: "a second thread"})
	assert.Equal(t, "a post that starts a second thread", chatrelay.CodeOf(err), chatrelay.ThreadLimit)
}

// TestSweepKeepsAThreadBeingCreated: the sweep's recount, run while a
// post holds the last place for the thread it is creating (it waits for
// the thread's lock, its document not written yet), keeps that place:
// another new thread is still refused thread_limit, and the count ends
// at the one thread there is. (The recount counted the folder alone and
// gave the place away: two threads under --max-threads 1.)
func TestSweepKeepsAThreadBeingCreated(t *testing.T) {
	t.Parallel()
	s, countPath, other, first := postHoldingTheLastPlace(t)
	_, err := s.Sweep(t.Context())
	assert.Success(t, err)
	_, err = s.Append(t.Context(), threadB, store.NewMessage{Author: chatrelay.Operator, Text: "two"})
	assert.Code(t, err, chatrelay.ThreadLimit)
	assert.Success(t, other.Unlock())
	assert.Success(t, <-first)
	_, err = s.Sweep(t.Context())
	assert.Success(t, err)
	data, err := os.ReadFile(countPath)
	assert.Success(t, err)
	assert.Equal(t, "the count", string(data), "1\n")
}

// postHoldingTheLastPlace opens a store of one thread at most, and starts
// a post creating threadA while another process holds the thread's lock:
// it returns once the post has reserved the last place (the count file
// says 1) and waits for that lock, which the caller lets go of (other);
// first gets the post's outcome.
func postHoldingTheLastPlace(t *testing.T) (s *File, countPath string, other *flock.Flock, first chan error) {
	t.Helper()
	dir := t.TempDir()
	s = openFile(t, dir, FileOptions{MaxThreads: 1, LockTimeout: 20 * time.Second})
	countPath = filepath.Join(dir, "chat", ".threads.lock")
	other = newFlock(s.path(threadA) + ".lock")
	ok, err := other.TryLock()
	assert.Success(t, err)
	assert.True(t, ok, "the thread's lock is free")
	first = make(chan error, 1)
	go func() {
		_, err := s.Append(context.Background(), threadA, store.NewMessage{Author: chatrelay.Operator, Text: "one"})
		first <- err
	}()
	assert.Eventually(t, 10*time.Second, "the first post reserved the last place", func() bool {
		data, _ := os.ReadFile(countPath)
		return string(data) == "1\n"
	})
	return s, countPath, other, first
}
