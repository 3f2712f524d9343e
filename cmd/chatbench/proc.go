package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procCPU returns the user+system CPU time of process pid ("self" for this
// one) from /proc/<pid>/stat, to the nearest clock tick.
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line. The command name, field 2, is in parentheses and
// may hold spaces, so fields are counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')'")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errors.New("stat: too few fields")
	}
	return sumTicks(f[11:13])
}

// procChildCPU returns the user+system CPU time of the waited-for children
// of this process (cutime and cstime, fields 16 and 17 of /proc/self/stat):
// the chatrelay reply processes of S6.
func procChildCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')'")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 15 {
		return 0, errors.New("stat: too few fields")
	}
	return sumTicks(f[13:15])
}

func sumTicks(f [][]byte) (time.Duration, error) {
	var total time.Duration
	for _, s := range f {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: %w", err)
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}

// procStatus returns a "kB" field (VmRSS, VmHWM) or a count (Threads) of
// /proc/<pid>/status: kB for the former.
func procStatus(pid, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	return parseStatusField(b, field)
}

func parseStatusField(b []byte, field string) (int64, error) {
	key := []byte(field + ":")
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, key); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(string(f[0]), 10, 64)
		}
	}
	return 0, fmt.Errorf("status: no %s", field)
}

// usage is a CPU meter over one phase: the tool's and the server's CPU and
// the wall time between start and stop.
type usage struct {
	serverPID   string   // "" when --server-pid was not given
	backendPIDs []string // none when --backend-pid was not given
	wall0       time.Time
	self0       time.Duration
	srv0        time.Duration
	backend0    []time.Duration
	busy0       time.Duration
	child0      time.Duration

	Wall, Self, Server time.Duration
	Children           time.Duration // processes the tool ran and waited for (S6)
	ServerOK           bool
	Backend            time.Duration // the store's server processes (redis-server), together
	BackendBusiest     time.Duration // the one of them that used the most
	BackendOK          bool
	// Others is the CPU that neither the tool nor the server (nor the
	// backend) used while the phase ran (other jobs, kernel threads): it
	// should be near 0.
	Others time.Duration
}

func startUsage(serverPID string, backendPIDs []string) *usage {
	u := &usage{serverPID: serverPID, backendPIDs: backendPIDs, wall0: time.Now()}
	u.busy0, _ = machineBusy()
	u.self0, _ = procCPU("self")
	u.child0, _ = procChildCPU()
	if serverPID != "" {
		u.srv0, _ = procCPU(serverPID)
	}
	for _, p := range backendPIDs {
		cpu, _ := procCPU(p)
		u.backend0 = append(u.backend0, cpu)
	}
	return u
}

func (u *usage) stop() {
	u.Wall = time.Since(u.wall0)
	self, _ := procCPU("self")
	u.Self = self - u.self0
	if u.serverPID != "" {
		if srv, err := procCPU(u.serverPID); err == nil {
			u.Server, u.ServerOK = srv-u.srv0, true
		}
	}
	u.BackendOK = len(u.backendPIDs) > 0
	for i, p := range u.backendPIDs {
		be, err := procCPU(p)
		if err != nil {
			u.BackendOK = false
			break
		}
		u.Backend += be - u.backend0[i]
		u.BackendBusiest = max(u.BackendBusiest, be-u.backend0[i])
	}
	if child, err := procChildCPU(); err == nil {
		u.Children = child - u.child0
	}
	if busy, err := machineBusy(); err == nil && u.ServerOK {
		u.Others = max(busy-u.busy0-u.Self-u.Server-u.Backend-u.Children, 0)
	}
}

// procNoFile is the soft open-file limit of process pid.
func procNoFile(pid string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil {
		return 0, err
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("Max open files")); ok {
			f := bytes.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(string(f[0]), 10, 64)
			}
		}
	}
	return 0, errors.New("no open-file limit")
}

// raiseNoFile lifts this process's open-file limit to its hard limit and
// returns the new soft limit.
func raiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	return lim.Cur, nil
}

// machineBusy returns the busy CPU time of the whole machine (every core,
// every process, interrupts included) from the first line of /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineBusy(b)
}

// parseMachineBusy sums the "cpu" line's fields but idle and iowait.
func parseMachineBusy(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line")
	}
	var busy int64
	for i, s := range f[1:] {
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return time.Duration(busy) * clockTick, nil
}

// waitQuiet waits, at most limit, for a second in which the machine is
// less than 10% busy (other jobs would skew the figures). It returns the
// busy share of the last second.
func waitQuiet(limit time.Duration) float64 {
	deadline := time.Now().Add(limit)
	for {
		b0, err := machineBusy()
		t0 := time.Now()
		time.Sleep(time.Second)
		b1, err1 := machineBusy()
		if err != nil || err1 != nil {
			return 0
		}
		share := (b1 - b0).Seconds() / time.Since(t0).Seconds() / float64(runtime.NumCPU())
		if share < 0.10 || time.Now().After(deadline) {
			return share
		}
	}
}
