package filestore

import (
	"syscall"
	"unsafe"
)

// The calls of pathBuf: the path's bytes go to the kernel from the
// caller's stack (a goroutine's stack does not move while it is in a
// system call). A path that did not fit takes the string calls.

var atFDCWD = -100 // AT_FDCWD: a relative path is the working folder's, as the string calls'

// statPath is syscall.Stat of p.
func statPath(p *pathBuf, st *syscall.Stat_t) error {
	if p.n < 0 {
		return syscall.Stat(p.long, st)
	}
	_, _, e := syscall.Syscall6(syscall.SYS_NEWFSTATAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&p.b[0])), uintptr(unsafe.Pointer(st)), 0, 0, 0)
	return errnoErr(e)
}

// openPath is syscall.Open of p.
func openPath(p *pathBuf, flags int, mode uint32) (int, error) {
	if p.n < 0 {
		return syscall.Open(p.long, flags, mode)
	}
	fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&p.b[0])), uintptr(flags|syscall.O_LARGEFILE), uintptr(mode), 0, 0)
	return int(fd), errnoErr(e)
}

// renamePath is syscall.Rename of from to to.
func renamePath(from, to *pathBuf) error {
	if from.n < 0 || to.n < 0 {
		return syscall.Rename(from.String(), to.String())
	}
	_, _, e := syscall.Syscall6(syscall.SYS_RENAMEAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&from.b[0])), uintptr(atFDCWD), uintptr(unsafe.Pointer(&to.b[0])), 0, 0)
	return errnoErr(e)
}

// errnoErr is e as the string calls answer it: nil for 0.
func errnoErr(e syscall.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}
