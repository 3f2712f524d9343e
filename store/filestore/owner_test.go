package filestore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestFolderOfAnotherUserIsRefused: a data folder whose chat folder is
// owned by another user than the process's is refused with an error
// naming its owner and the way out (run as that user, or chown), and nothing is
// made there: what the process made (a thread file replaced, a lock,
// .tmp, all 0600 or 0700) would be its own, and the server, run as the
// folder's owner, could no longer read the thread. A chat folder of its
// own, or none yet, is opened, whoever owns the data folder itself (a
// container's volume, root's or a group's, that the server may write).
func TestFolderOfAnotherUserIsRefused(t *testing.T) {
	t.Parallel()
	me := os.Geteuid()
	other := me + 4242 // the process "runs as" another user than the folder's owner
	data := t.TempDir()
	assert.Success(t, checkOwner(data, me))
	assert.Success(t, checkOwner(filepath.Join(data, "none yet"), other))
	assert.Success(t, checkOwner(data, other)) // no chat folder yet: the process makes it
	assert.Success(t, os.Mkdir(filepath.Join(data, "chat"), 0o700))
	assert.Success(t, checkOwner(data, me))
	err := checkOwner(data, other)
	assert.True(t, err != nil && strings.Contains(err.Error(), filepath.Join(data, "chat")) && strings.Contains(err.Error(), "run this as "), "the error: %v", err)
	entries, _ := os.ReadDir(data)
	assert.Equal(t, "what the data folder holds", len(entries), 1)
	assert.True(t, strings.Contains(err.Error(), "chown -R USER "+data), "the error offers no chown: %v", err)

	// Root making the chat folder of a data folder another user owns (a
	// script run as root before the service's first start) would leave the
	// server's user a chat folder of root's (review13): refused, naming the
	// data folder. A data folder of root's is root's to use.
	if me == 0 {
		fresh := t.TempDir()
		assert.Success(t, os.Chown(fresh, 65534, 65534))
		err = checkOwner(fresh, 0)
		assert.True(t, err != nil && strings.Contains(err.Error(), fresh+" is owned by"), "root on another's fresh folder: %v", err)
		assert.Success(t, checkOwner(t.TempDir(), 0))
	}
}
