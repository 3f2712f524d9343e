package filestore

import "syscall"

// Linux's sync_file_range(2) flags.
const (
	syncFileRangeWaitBefore = 1
	syncFileRangeWrite      = 2
	syncFileRangeWaitAfter  = 4
)

// writeBack writes [off, off+n) of fd, the span just written, to the disk
// and waits for it; the calls before waited for what is before it (a span
// whose writing failed is the final fsync's to report), so the call does
// not walk the pages of the whole file again. An upload leaves no data to
// its final fsync, nor to the journal commit that fsync or a post's fsync
// makes; and it goes at the disk's pace, a span at a time, rather than
// fill the page cache for the posts' fsyncs to wait behind (on a journaled
// ext4, letting the span just written go unwaited for gave uploads half as
// many again a second and posts' p99 while they ran about twice as long).
func writeBack(fd uintptr, off, n int64) error {
	if _, _, e := syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWaitBefore|syncFileRangeWrite|syncFileRangeWaitAfter, 0, 0); e != 0 {
		return e
	}
	return nil
}
