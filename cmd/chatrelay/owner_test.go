package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestRootOnAFolderOfAnotherUser: the CLI run as root on a data folder
// owned by the server's user (nobody here) is refused, exit 1, naming the
// owner, and makes nothing there: it replaced the thread file with one
// owned by root (0600) and made .tmp and locks as root, after which the
// server, run as that user, could read the thread no more ("open
// chat/THREAD.json: permission denied"). Root only: only root can make a
// folder another user owns.
func TestRootOnAFolderOfAnotherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give the folder to another user")
	}
	const nobody = 65534
	data := seed(t)
	assert.Success(t, filepath.WalkDir(data, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}))
	for _, args := range [][]string{
		{"reply", threadOld, "as root", "--fsync", "never"},
		{"open", "--title", "as root", "--fsync", "never"},
		{"list"},
	} {
		r := runCLI(t, nil, "", append(args, "--data", data)...)
		assert.Equal(t, args[0]+": exit code", exitCode(r.err), 1)
		assert.True(t, r.err != nil && strings.Contains(r.err.Error(), "owned by") && strings.Contains(r.err.Error(), "65534") ||
			r.err != nil && strings.Contains(r.err.Error(), "nobody"), "%s: the error: %v", args[0], r.err)
	}
	assert.Success(t, filepath.WalkDir(data, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != nobody {
			t.Errorf("%s is owned by uid %d, not the folder's owner", p, st.Uid)
		}
		return nil
	}))
	doc, err := os.ReadFile(filepath.Join(data, "chat", threadOld+".json"))
	assert.Success(t, err)
	assert.True(t, strings.Contains(string(doc), "is it green?") && !strings.Contains(string(doc), "as root"), "the thread: %s", doc)
}
