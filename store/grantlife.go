package store

import (
	"fmt"
	"slices"
	"time"

	"github.com/chatrelay/chatrelay"
)

// A grant's life after it ends, and the invite window (contract Part 3,
// chatrelay's additions): both backends apply them to a thread's
// participants record as they read it, so every answer and every write
// sees the same record.

// PruneGrants returns the thread's grants (oldest first) without those
// that ended (revoked, or expired) more than chatrelay.LimitEndedListed
// ago, nor, past the newest chatrelay.LimitEndedKept ended ones, the
// older-ended. It never drops an active grant, nor one created within
// chatrelay.InviteWindow (the invite window counts those). dropped is
// what it left out; kept is grants itself when nothing is.
func PruneGrants(grants []chatrelay.Grant, now time.Time) (kept, dropped []chatrelay.Grant) {
	ms := now.UnixMilli()
	listed := int64(chatrelay.LimitEndedListed.Max) * 1000
	recent := ms - chatrelay.InviteWindow.Milliseconds()
	var ended []int // indexes of the ended grants that may go
	for i := range grants {
		if at := endedAt(&grants[i], ms); at != 0 && grants[i].CreatedAt <= recent {
			ended = append(ended, i)
		}
	}
	if len(ended) == 0 {
		return grants, nil
	}
	// The newest-ended first: past LimitEndedKept of them, the rest go.
	slices.SortStableFunc(ended, func(a, b int) int {
		return -cmpInt(endedAt(&grants[a], ms), endedAt(&grants[b], ms))
	})
	drop := map[int]bool{}
	for n, i := range ended {
		if n >= chatrelay.LimitEndedKept.Max || ms-endedAt(&grants[i], ms) > listed {
			drop[i] = true
		}
	}
	if len(drop) == 0 {
		return grants, nil
	}
	kept = make([]chatrelay.Grant, 0, len(grants)-len(drop))
	for i, g := range grants {
		if drop[i] {
			dropped = append(dropped, g)
		} else {
			kept = append(kept, g)
		}
	}
	return kept, dropped
}

// endedAt is when g ended (epoch ms): its revoke, or its expiry if that
// has passed at now; 0 for an active grant.
func endedAt(g *chatrelay.Grant, now int64) int64 {
	switch {
	case g.RevokedAt != 0:
		return g.RevokedAt
	case now >= g.ExpiresAt:
		return g.ExpiresAt
	}
	return 0
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkInviteRate returns RateLimited, with the wait, if the thread's
// grants hold chatrelay.LimitInvites.Max made within the last
// chatrelay.InviteWindow (revoked ones too: revoking does not give an
// invite back).
func checkInviteRate(grants []chatrelay.Grant, now time.Time) error {
	from := now.Add(-chatrelay.InviteWindow).UnixMilli()
	var made []int64
	for i := range grants {
		if grants[i].CreatedAt > from {
			made = append(made, grants[i].CreatedAt)
		}
	}
	if len(made) < chatrelay.LimitInvites.Max {
		return nil
	}
	slices.Sort(made)
	// Room again once all but Max-1 of them have left the window.
	oldest := made[len(made)-chatrelay.LimitInvites.Max]
	wait := time.Duration(oldest-from) * time.Millisecond
	return &chatrelay.Error{Code: chatrelay.RateLimited, Retry: max(wait, time.Millisecond),
		Message: fmt.Sprintf("too many share links made: at most %d per thread in any hour", chatrelay.LimitInvites.Max)}
}
