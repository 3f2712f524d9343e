//go:build !linux

package filestore

// createFD is Linux's O_TMPFILE creation (create_linux.go); elsewhere a
// thread's first document is written as every other write (writeFD).
func createFD(dir, name string, data []byte, ds *dirSync) (fd int, id fileID, how createHow, err error) {
	return -1, id, noTmpfile, nil
}
