package filestore

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// checkOwner refuses a data folder whose chat folder is owned by another
// user than uid, the process's: what the process would make there (a
// thread file replaced, a lock file, the temp folder: 0600 and 0700, the
// process's own) the folder's owner, whom the server runs as, could not
// read or lock, and the thread would be lost to it. Root is no exception:
// root's files are the worst case (sudo chatrelay reply …). The chat
// folder, which chatrelay makes (0700), tells whom the threads are for;
// the data folder itself is the deployer's (a container's volume, owned
// by root or by a group, that the server's user may write), so a chat
// folder not made yet is the process's to make, except root's: root
// making it in a folder of another user (a script run as root before the
// service's first start) would give the server's user a chat folder it
// cannot use.
func checkOwner(data string, uid int) error {
	p := filepath.Join(data, "chat")
	fi, err := os.Stat(p)
	if err != nil && uid == 0 {
		p = data // no chat folder yet: root makes none in another's folder
		fi, err = os.Stat(p)
	}
	if err != nil {
		return nil // not there (made by us), or the open says why
	}
	owner, ok := fileOwner(fi)
	if !ok || owner == uid || (p == data && owner == 0) {
		return nil
	}
	o, me := userName(owner), userName(uid)
	return fmt.Errorf("%s is owned by %s, not by %s whom this process runs as: what it made there would be %s's alone (0600 and 0700), which a server run as %s could not use: run this as %s (sudo -u %s chatrelay …), or give the folder to the server's user (chown -R USER %s)",
		p, o.String(), me.String(), me.name, o.name, o.name, o.sudo, data)
}

// userName is a user as an error names it: "nobody (uid 65534)", or
// "uid 65534" for a uid with no name; sudo -u takes name, or #uid.
func userName(uid int) named {
	id := strconv.Itoa(uid)
	if u, err := user.LookupId(id); err == nil {
		return named{name: u.Username, uid: id, sudo: u.Username}
	}
	return named{name: "uid " + id, uid: id, sudo: "'#" + id + "'"}
}

type named struct{ name, uid, sudo string }

func (n named) String() string {
	if n.name == "uid "+n.uid {
		return n.name
	}
	return n.name + " (uid " + n.uid + ")"
}

// fileOwner is the uid that owns fi's file.
func fileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
