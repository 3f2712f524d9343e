//go:build !linux

package filestore

import "syscall"

// Elsewhere the temp folder is named by its path (at_linux.go): no
// descriptor is opened and dirfd is always -1.

func openDirFD(path string) int { return -1 }

func openAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	return syscall.Open(name, flags, mode)
}

func renameAt(dirfd int, old, to string) error { return syscall.Rename(old, to) }

func unlinkAt(dirfd int, name string) error { return syscall.Unlink(name) }
