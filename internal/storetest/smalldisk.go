package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// SmallDisk mounts a tmpfs of size bytes on a new temp folder and returns
// the folder; it is unmounted at cleanup. A test fills it to see what a
// full disk does. Mounting needs root, which CI and the developers'
// machines have: without it the test fails, it is never skipped.
func SmallDisk(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes on %s (needs root): %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk fills the filesystem of dir (a SmallDisk) to the last block but
// about spare bytes, with a file of its own in dir, and returns the
// function that removes that file again. A write of more than spare bytes
// then fails with ENOSPC; writes within spare succeed (the filesystem
// counts whole pages: spare is rounded up to one).
func FillDisk(t testing.TB, dir string, spare int) (free func()) {
	t.Helper()
	sparePath, filler := filepath.Join(dir, ".spare"), filepath.Join(dir, ".filler")
	if spare > 0 {
		if err := os.WriteFile(sparePath, make([]byte, spare), 0o600); err != nil {
			t.Fatalf("fill %s: keep %d bytes: %v", dir, spare, err)
		}
	}
	f, err := os.Create(filler)
	if err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	// The last blocks a chunk could not take.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	if spare > 0 {
		if err := os.Remove(sparePath); err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return func() {
		t.Helper()
		if err := os.Remove(filler); err != nil {
			t.Errorf("free %s: %v", dir, err)
		}
	}
}

// Files lists every file under dir (but FillDisk's) with its mode and the
// SHA-256 of its bytes, by path relative to dir: two listings are equal
// when the folder holds exactly the same files, byte for byte.
func Files(t testing.TB, dir string) map[string]string {
	t.Helper()
	files := make(map[string]string)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == ".filler" || rel == ".spare" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files[rel] = fmt.Sprintf("%v %x", fi.Mode(), sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return files
}
