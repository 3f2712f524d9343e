package filestore

import (
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Linux's O_TMPFILE (open(2)) and AT_SYMLINK_FOLLOW (linkat(2)).
const (
	oTmpfile        = 0o20000000 | syscall.O_DIRECTORY
	atSymlinkFollow = 0x400
)

// createFD writes a thread's first document, dir/name, which the caller
// (holding name's lock) found missing: an unnamed file in dir
// (O_TMPFILE, mode 0600) written, fsynced (with ds), fstat'ed and linked
// at name (linkat(2), which fails if name exists), and the folder fsynced
// (with ds; its failure is an unsyncedError, the file linked). A reader
// sees no file or the whole one, as with writeFD,
// whose temp file and rename it saves: no folder entry is made and
// removed for the temp file, and the folder watch sees two events (the
// unnamed file's write, named "#<inode>", which the feed ignores, and
// the link) instead of four (the temp file's creation and write, the
// rename's two). A crash before the link leaves nothing (the file system
// frees an unlinked file), where writeFD leaves a temp file for the sweep.
//
// how is created, or, with nothing done, noTmpfile where the file
// system or the system has no O_TMPFILE or /proc is missing, or notHere
// where name exists after all (a writer that takes no lock) or the link
// failed otherwise: writeFD then writes it as every other write.
func createFD(dir, name string, data []byte, ds *dirSync) (_ int, id fileID, how createHow, err error) {
	// fd, not a named result: a return sets the results before the
	// deferred close runs.
	fd, err := syscall.Open(dir, syscall.O_RDWR|oTmpfile|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		if outOfFDs(err) {
			return -1, id, created, &fs.PathError{Op: "open", Path: dir, Err: err}
		}
		return -1, id, noTmpfile, nil
	}
	defer func() {
		if err != nil || how != created {
			syscall.Close(fd)
		}
	}()
	if err = writeAll(fd, dir, data); err != nil {
		return -1, id, created, err
	}
	if ds != nil {
		if err = ignoringEINTR(func() error { return syscall.Fsync(fd) }); err != nil {
			return -1, id, created, &fs.PathError{Op: "sync", Path: dir, Err: err}
		}
	}
	var st syscall.Stat_t
	if err = ignoringEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return -1, id, created, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	path := joinName(dir, name)
	var buf [32]byte
	proc := string(strconv.AppendInt(append(buf[:0], "/proc/self/fd/"...), int64(fd), 10))
	if lerr := ignoringEINTR(func() error { return linkat(proc, path) }); lerr != nil {
		switch lerr {
		case syscall.ENOSPC, syscall.EDQUOT, syscall.EIO:
			return -1, id, created, &os.LinkError{Op: "linkat", Old: proc, New: path, Err: lerr}
		case syscall.ENOENT:
			var pst syscall.Stat_t
			if syscall.Stat("/proc/self/fd", &pst) != nil {
				return -1, id, noTmpfile, nil // no /proc
			}
		}
		return -1, id, notHere, nil // EEXIST, …: the rename's way
	}
	if ds != nil {
		if err = ds.sync(); err != nil {
			return -1, id, created, &unsyncedError{err}
		}
	}
	return fd, identityOf(&st), created, nil
}

// linkat is linkat(AT_FDCWD, old, AT_FDCWD, new, AT_SYMLINK_FOLLOW).
func linkat(old, new string) error {
	op, err := syscall.BytePtrFromString(old)
	if err != nil {
		return err
	}
	np, err := syscall.BytePtrFromString(new)
	if err != nil {
		return err
	}
	atFDCWD := -100
	_, _, e := syscall.Syscall6(syscall.SYS_LINKAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(op)), uintptr(atFDCWD), uintptr(unsafe.Pointer(np)), atSymlinkFollow, 0)
	if e != 0 {
		return e
	}
	return nil
}
