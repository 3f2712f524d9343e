package filestore

import (
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
)

// The share-token index: a digest prefix to its thread, so that Resolve
// reads one participants record, not every thread's.

// grantIndex maps digest prefixes to threads.
type grantIndex struct {
	mu      sync.Mutex // guards m, rebuilt and sums
	m       map[string]string
	rebuilt time.Time
	// sums holds, per thread, the maphash of the participants record this
	// process last wrote or announced: the folder watch's event for a
	// record with those bytes is this process's own write, already
	// announced, and is not read and announced again.
	sums map[string]uint64
}

// known records that the thread's record with sum was announced, and
// reports whether it already was.
func (x *grantIndex) known(thread string, sum uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sums == nil {
		x.sums = make(map[string]uint64)
	}
	if x.sums[thread] == sum {
		return true
	}
	x.sums[thread] = sum
	return false
}

// forget drops the thread's sum: the next record seen is announced.
func (x *grantIndex) forget(thread string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.sums, thread)
}

func (x *grantIndex) lookup(prefix string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t, ok := x.m[prefix]
	return t, ok
}

func (x *grantIndex) rebuildDue() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if time.Since(x.rebuilt) < time.Second {
		return false
	}
	x.rebuilt = time.Now()
	return true
}

// noteGrants puts a thread's grants in the index.
func (s *File) noteGrants(thread string, grants []chatrelay.Grant) {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	if s.index.m == nil {
		s.index.m = make(map[string]string)
	}
	for _, g := range grants {
		s.index.m[g.Digest[:16]] = thread
	}
}

// rebuildIndex reads every participants record into the index.
func (s *File) rebuildIndex() {
	paths, _ := filepath.Glob(filepath.Join(s.dir, "*.participants.json"))
	for _, p := range paths {
		thread := strings.TrimSuffix(filepath.Base(p), ".participants.json")
		if !chatrelay.ValidThread(thread) {
			continue
		}
		if grants, err := s.readGrants(thread); err == nil {
			s.noteGrants(thread, grants)
		}
	}
}
