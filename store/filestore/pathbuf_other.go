//go:build !(linux && amd64)

package filestore

import "syscall"

// The calls of pathBuf through the string calls, where the raw ones are
// not written (pathbuf_linux_amd64.go).

func statPath(p *pathBuf, st *syscall.Stat_t) error { return syscall.Stat(p.String(), st) }

func openPath(p *pathBuf, flags int, mode uint32) (int, error) {
	return syscall.Open(p.String(), flags, mode)
}

func renamePath(from, to *pathBuf) error { return syscall.Rename(from.String(), to.String()) }
