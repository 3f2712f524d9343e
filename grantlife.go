package chatrelay

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The rules of a grant that every backend applies the same way: a grant
// admitted or refused (AdmitGrant, CheckGrant), a participant's post or
// request refused (GrantRefusal, CapRefusal, WaitingRefusal), and a
// grant's life after it ends and the invite window (contract Part 3,
// chatrelay's additions; PruneGrants), applied to a thread's participants
// record as it is read, so every answer and every write sees the same
// record.

// AdmitGrant is how every backend's Invite admits g beside a thread's
// grants (a device beside the devices, a share link beside the share
// links): ParticipantLimit or DeviceLimit if the thread has the most active ones,
// RateLimited if it made the most in the invite window (checkInviteRate), an
// Internal error if g lacks what a reader relies on (CheckGrant: it would
// make the record unreadable), and g with a fresh id if its id is taken.
func AdmitGrant(grants []Grant, g Grant, now time.Time) (Grant, error) {
	if err := CheckGrant(g); err != nil {
		return g, &Error{Code: Internal, Message: "internal error", Err: fmt.Errorf("invite: the grant %w", err)}
	}
	// A device counts among devices, a share link among share links.
	grants = slices.DeleteFunc(slices.Clone(grants), func(o Grant) bool { return o.Device() != g.Device() })
	active := 0
	for i := range grants {
		if grants[i].StateAt(now) == Active {
			active++
		}
	}
	switch {
	case g.Device() && active >= LimitActiveDevices.Max:
		return g, Errorf(DeviceLimit, "this thread already has %d active devices: revoke one first", active)
	case !g.Device() && active >= LimitActiveGrants.Max:
		return g, Errorf(ParticipantLimit, "this thread already has %d active share links: revoke one first", active)
	}
	if err := checkInviteRate(grants, now, g.Device()); err != nil {
		return g, err
	}
	for slices.ContainsFunc(grants, func(o Grant) bool { return o.ID == g.ID }) {
		if g.Device() {
			g.ID = NewDeviceID()
		} else {
			g.ID = NewParticipantID()
		}
	}
	return g, nil
}

// GrantIndex is the index of the grant id in grants (a thread's); a grant
// not there is NotFound.
func GrantIndex(grants []Grant, id string) (int, error) {
	i := slices.IndexFunc(grants, func(g Grant) bool { return g.ID == id })
	if i < 0 {
		return -1, Errorf(NotFound, "no participant %q in this thread", id)
	}
	return i, nil
}

// CheckGrant checks what a reader of a stored grant relies on: its id (a
// participant's, or a device's for a grant whose role is Owner), its
// digest (64 hex) and its expiry. A backend's participants record with a
// grant that fails it does not parse (it fails closed).
func CheckGrant(g Grant) error {
	d, err := hex.DecodeString(g.Digest)
	validID := ValidParticipantID(g.ID)
	if g.Device() {
		validID = ValidDeviceID(g.ID)
	}
	if !validID || err != nil || len(d) != 32 || g.ExpiresAt <= 0 {
		return errors.New("lacks its id, digest or expiry")
	}
	return nil
}

// PruneGrants returns the thread's grants (oldest first) without those
// that ended (revoked, or expired) more than LimitEndedListed
// ago, nor, past the newest LimitEndedKept ended ones, the
// older-ended. It never drops an active grant, nor one created within
// InviteWindow (the invite window counts those). Share links and devices
// are counted apart: each keeps LimitEndedKept ended ones. dropped is
// what it left out; kept is grants itself when nothing is.
func PruneGrants(grants []Grant, now time.Time) (kept, dropped []Grant) {
	ms := now.UnixMilli()
	listed := int64(LimitEndedListed.Max) * 1000
	recent := ms - InviteWindow.Milliseconds()
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
		return -cmp.Compare(endedAt(&grants[a], ms), endedAt(&grants[b], ms))
	})
	drop := map[int]bool{}
	var n [2]int // the ended ones kept so far: share links, devices
	for _, i := range ended {
		c := 0
		if grants[i].Device() {
			c = 1
		}
		if n[c] >= LimitEndedKept.Max || ms-endedAt(&grants[i], ms) > listed {
			drop[i] = true
		}
		n[c]++
	}
	if len(drop) == 0 {
		return grants, nil
	}
	kept = make([]Grant, 0, len(grants)-len(drop))
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
func endedAt(g *Grant, now int64) int64 {
	switch {
	case g.RevokedAt != 0:
		return g.RevokedAt
	case now >= g.ExpiresAt:
		return g.ExpiresAt
	}
	return 0
}

// checkInviteRate returns RateLimited, with the wait, if the thread's
// grants (of one class: devices, or share links) hold LimitInvites.Max
// made within the last InviteWindow (revoked ones too: revoking does not
// give an invite back).
func checkInviteRate(grants []Grant, now time.Time, devices bool) error {
	from := now.Add(-InviteWindow).UnixMilli()
	var made []int64
	for i := range grants {
		if grants[i].CreatedAt > from {
			made = append(made, grants[i].CreatedAt)
		}
	}
	if len(made) < LimitInvites.Max {
		return nil
	}
	slices.Sort(made)
	// Room again once all but Max-1 of them have left the window.
	oldest := made[len(made)-LimitInvites.Max]
	wait := time.Duration(oldest-from) * time.Millisecond
	what := "share links"
	if devices {
		what = "device links"
	}
	return &Error{Code: RateLimited, Retry: max(wait, time.Millisecond),
		Message: fmt.Sprintf("too many %s made: at most %d per thread in any hour", what, LimitInvites.Max)}
}

// The refusals of a participant's post, in the order a store checks them:
// the share link is unknown, revoked or expired (before anything else; a
// replay of a message the participant posted is then answered as such),
// its cap is spent, or too many of its messages wait for hermes. Every
// backend refuses with these, so that their answers agree.

// UnknownShareLink is the refusal of a grant the thread does not have (a
// share link's or a device's: both are grants).
func UnknownShareLink() error {
	return Errorf(Unauthorized, "this share link or device link is not known here")
}

// The refusals of a share link that no longer holds, wherever it is
// found out: a post, a request, a live stream's end.
var (
	ErrLinkRevoked = Errorf(TokenRevoked, "this share link was revoked by the conversation's owner")
	ErrLinkExpired = Errorf(TokenExpired, "this share link expired: ask the owner for a new one")
)

// GrantRefusal is ErrLinkRevoked or ErrLinkExpired (ErrDeviceRevoked or
// ErrDeviceExpired for a device) for a grant that is not active at now,
// else nil.
func GrantRefusal(g Grant, now time.Time) error {
	switch g.StateAt(now) {
	case Revoked:
		if g.Device() {
			return ErrDeviceRevoked
		}
		return ErrLinkRevoked
	case Lapsed:
		if g.Device() {
			return ErrDeviceExpired
		}
		return ErrLinkExpired
	}
	return nil
}

// CapRefusal is CapReached for a grant whose cap is spent, else nil.
func CapRefusal(g Grant) error {
	if g.Sent >= g.Cap {
		return Errorf(CapReached, "this share link's %s spent", plural(g.Cap, "message is", "messages are"))
	}
	return nil
}

// WaitingRefusal is TooManyMessages when waiting of the participant's
// messages come after hermes's newest (LimitWaitingPosts), else nil.
func WaitingRefusal(waiting int) error {
	if waiting >= LimitWaitingPosts.Max {
		return Errorf(TooManyMessages, "%d of your messages wait for hermes's answer", waiting)
	}
	return nil
}
