package filestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
)

// A thread's floor. The sweep removes a thread whose messages have all
// expired at once (as Part 1 says), and keeps its newest change in
// <thread>.floor while that change is less than Retention.RemoveAfter old
// (a reaction a moment ago, or one a node whose clock is ahead wrote). A
// thread made again with the same id starts above its floor, so that a
// cursor a client holds from the removed thread hides none of its new
// messages even when their writer's clock is behind the sweeper's (or
// stepped back). A later sweep removes a floor past its time, or one
// whose thread was made again.

func (s *File) floorPath(thread string) string { return s.dir + "/" + thread + ".floor" }

// keepFloor writes the floor of thread, which the sweep removes at now
// with its newest change at newest, if that change is less than
// Retention.RemoveAfter old. The caller holds the thread's lock.
func (s *File) keepFloor(thread string, newest int64, now time.Time) error {
	if !s.floorHolds(newest, now) {
		return nil
	}
	return s.withFDs(func() error {
		f, _, err := writeFileSync(s.dir, thread+".floor", strconv.AppendInt(nil, newest, 10), s.dsync)
		if f != nil {
			f.Close()
		}
		return err
	})
}

// floorHolds reports whether a floor at newest still holds at now.
func (s *File) floorHolds(newest int64, now time.Time) bool {
	return newest >= now.Add(-s.opt.Retention.RemoveAfter()).UnixMilli()
}

// readFloor returns the floor of thread, 0 if it has none (or one that
// does not parse: a floor only ever moves a new thread's epochs up). The
// caller holds the thread's lock.
func (s *File) readFloor(thread string) (int64, error) {
	b, err := os.ReadFile(s.floorPath(thread))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, s.unavailable(thread, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		s.log.Warn("a thread's floor does not parse: the thread starts at its writer's clock", "thread", thread, "err", err)
		return 0, nil
	}
	return n, nil
}

// sweepFloors removes, each under its thread's lock, the floors past
// their time and those of threads made again.
func (s *File) sweepFloors(ctx context.Context) {
	floors, _ := filepath.Glob(filepath.Join(s.dir, "*.floor"))
	for _, f := range floors {
		thread := strings.TrimSuffix(filepath.Base(f), ".floor")
		if !chatrelay.ValidThread(thread) || ctx.Err() != nil {
			continue
		}
		if err := s.sweepFloor(ctx, thread); err != nil {
			s.log.Warn("sweep: a thread's floor", "thread", thread, "err", err)
		}
	}
}

func (s *File) sweepFloor(ctx context.Context, thread string) error {
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	snap, err := s.load(thread, t)
	if err != nil {
		return err
	}
	if snap == nil {
		t.drop = true // no document: its lock file goes
		n, err := s.readFloor(thread)
		if err != nil || s.floorHolds(n, s.now()) {
			return err
		}
	}
	if err := os.Remove(s.floorPath(thread)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
