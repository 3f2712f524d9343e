package storetest

import (
	"fmt"
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
