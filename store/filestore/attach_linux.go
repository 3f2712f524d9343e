package filestore

import "syscall"

// Linux's sync_file_range(2) flags.
const (
	syncFileRangeWaitBefore = 1
	syncFileRangeWrite      = 2
	syncFileRangeWaitAfter  = 4
)

// writeBack starts writing [off, off+n) of fd to the disk, and waits for
// what was started before off: what an upload leaves to its final fsync
// (and to the journal commit that fsync or any other file's fsync makes)
// is at most two spans.
func writeBack(fd uintptr, off, n int64) error {
	if _, _, e := syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0); e != 0 {
		return e
	}
	if off == 0 {
		return nil
	}
	if _, _, e := syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, 0, uintptr(off), syncFileRangeWaitBefore|syncFileRangeWrite|syncFileRangeWaitAfter, 0, 0); e != 0 {
		return e
	}
	return nil
}
