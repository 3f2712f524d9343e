package filestore

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// pathBuf is a NUL-terminated path built on the caller's stack, for the
// system calls of a post's write (the thread document's stat, its temp
// file's creation and its rename, pathbuf_*.go): syscall.Stat, Open and
// Rename copy each string argument to a new NUL-terminated slice on the
// heap, and the path strings themselves (joined per call) were more:
// about ten allocations a post. A path longer than the buffer is kept as
// a string (long) and takes the string calls.
type pathBuf struct {
	b    [pathBufSize]byte
	n    int    // the path's length in b, without its NUL; -1: in long
	long string // the path, if it did not fit in b
}

const pathBufSize = 512

// set makes p dir + "/" + name + suffix (dir clean, name without a
// separator: joinName's fast case).
func (p *pathBuf) set(dir, name, suffix string) {
	p.start()
	p.add(dir)
	p.add("/")
	p.add(name)
	p.add(suffix)
	p.end(dir, name, suffix)
}

// setTemp makes p the path of a new temp file for dir/name+suffix:
// dir + "/." + name + suffix + ".tmp-" + a random suffix, as
// createTempFD names them (the sweep knows them by that shape).
func (p *pathBuf) setTemp(dir, name, suffix string) {
	p.start()
	p.add(dir)
	p.add("/.")
	p.add(name)
	p.add(suffix)
	p.add(".tmp-")
	var r [16]byte
	rs := strconv.AppendUint(r[:0], rand.Uint64(), 36)
	if p.n >= 0 && p.n+len(rs) < len(p.b) {
		p.n += copy(p.b[p.n:], rs)
	} else {
		p.n = -1
	}
	if p.n < 0 {
		p.long = dir + "/." + name + suffix + ".tmp-" + string(rs)
		return
	}
	p.b[p.n] = 0
}

func (p *pathBuf) start() {
	p.n, p.long = 0, ""
}

func (p *pathBuf) add(s string) {
	if p.n < 0 || p.n+len(s) >= len(p.b) || strings.IndexByte(s, 0) >= 0 {
		p.n = -1 // (a NUL: the string calls refuse it, EINVAL)
		return
	}
	p.n += copy(p.b[p.n:], s)
}

// end NUL-terminates the path, or keeps it as a string if it did not fit.
func (p *pathBuf) end(dir, name, suffix string) {
	if p.n < 0 {
		p.long = dir + "/" + name + suffix
		return
	}
	p.b[p.n] = 0
}

// String is the path.
func (p *pathBuf) String() string {
	if p.n < 0 {
		return p.long
	}
	return string(p.b[:p.n])
}
