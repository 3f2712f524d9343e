package filestore

import "syscall"

// atFDCWD is Linux's AT_FDCWD (fcntl.h), which package syscall does not
// export: a path relative to the working folder, as rename(2)'s.
const atFDCWD = -100

// The temp folder's descriptor (File.tempDir): a document's temp file is
// made, renamed from and removed relative to it, so that the kernel walks
// one path component for it instead of the whole path of the chat folder.

// openDirFD opens the folder path as a descriptor for openAt, renameAt
// and unlinkAt, or returns -1: path is not a folder of its own (a link,
// a file) or cannot be opened.
func openDirFD(path string) int {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// openAt opens name in the folder dirfd (openDirFD), or the path name
// with dirfd -1.
func openAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	if dirfd < 0 {
		return syscall.Open(name, flags, mode)
	}
	return syscall.Openat(dirfd, name, flags, mode)
}

// renameAt renames old, a name in the folder dirfd (a path with dirfd
// -1), to the path to: the target stays a path, so that a chat folder
// moved away by hand fails the rename rather than take the document.
func renameAt(dirfd int, old, to string) error {
	if dirfd < 0 {
		return syscall.Rename(old, to)
	}
	return syscall.Renameat(dirfd, old, atFDCWD, to)
}

// unlinkAt removes name in the folder dirfd (a path with dirfd -1).
func unlinkAt(dirfd int, name string) error {
	if dirfd < 0 {
		return syscall.Unlink(name)
	}
	return syscall.Unlinkat(dirfd, name)
}
