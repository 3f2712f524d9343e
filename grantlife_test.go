package chatrelay_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestPruneKeepsWhatTheInviteWindowCounts: past the 100 newest-ended
// grants a thread keeps, the older-ended go, but never an active grant nor
// one made within the invite window (beside the 100), even when it ended
// before the others (a link revoked at once, while older links expire
// after it): the window would forget an invite and allow one more.
func TestPruneKeepsWhatTheInviteWindowCounts(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := now.UnixMilli()
	var grants []chatrelay.Grant
	add := func(created, expires, revoked int64) string {
		id := fmt.Sprintf("p_%08x", len(grants))
		grants = append(grants, chatrelay.Grant{ID: id, CreatedAt: created, ExpiresAt: expires, RevokedAt: revoked})
		return id
	}
	day := int64(24 * 3600 * 1000)
	active := add(ms-10*day, ms+day, 0)
	recent := add(ms-30*60*1000, ms+day, ms-29*60*1000) // made 30 minutes ago, revoked at once
	var expired []string
	for i := range chatrelay.LimitEndedKept.Max + 5 { // made days ago, expired in the last minutes, after recent's revoke
		expired = append(expired, add(ms-7*day, ms-int64(i+1)*1000, 0))
	}
	kept, dropped := chatrelay.PruneGrants(grants, now)
	assert.Equal(t, "dropped", len(dropped), 5)
	ids := map[string]bool{}
	for _, g := range kept {
		ids[g.ID] = true
	}
	assert.True(t, ids[active] && ids[recent], "the active or the recent grant was dropped")
	for i, id := range expired {
		assert.Equal(t, fmt.Sprintf("expired %d kept", i), ids[id], i < chatrelay.LimitEndedKept.Max)
	}
	assert.Equal(t, "the order kept", kept[0].ID, active)
}

// TestPruneCountsDevicesApart: a thread's ended share links and its ended
// devices are kept apart, LimitEndedKept of each: a hundred revoked share
// links never push the owner's ended devices out of its list, and the
// invite window and the active limits count each class on its own.
func TestPruneCountsDevicesApart(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := now.UnixMilli()
	day := int64(24 * 3600 * 1000)
	var grants []chatrelay.Grant
	device := chatrelay.Grant{ID: "d_00000001", Role: chatrelay.Owner, CreatedAt: ms - 7*day, ExpiresAt: ms + day, RevokedAt: ms - 2*day}
	grants = append(grants, device)
	for i := range chatrelay.LimitEndedKept.Max + 3 {
		grants = append(grants, chatrelay.Grant{ID: fmt.Sprintf("p_%08x", i), Role: chatrelay.Viewer, CreatedAt: ms - 7*day, ExpiresAt: ms + day, RevokedAt: ms - int64(i+1)*1000})
	}
	kept, dropped := chatrelay.PruneGrants(grants, now)
	assert.Equal(t, "dropped", len(dropped), 3)
	assert.Equal(t, "the ended device, older-ended than every share link, is kept", kept[0].ID, device.ID)
	for _, g := range dropped {
		assert.True(t, !g.Device(), "a device was dropped: %+v", g)
	}

	// Fifty active share links do not stop a device; ten active devices do.
	var active []chatrelay.Grant
	for i := range chatrelay.LimitActiveGrants.Max {
		active = append(active, chatrelay.Grant{ID: fmt.Sprintf("p_%08x", i), Role: chatrelay.Viewer, CreatedAt: ms - 2*3600*1000, ExpiresAt: ms + day})
	}
	in := chatrelay.DeviceRequest{Name: "phone"}
	assert.Success(t, in.Check())
	d, _ := in.Grant(now)
	_, err := chatrelay.AdmitGrant(active, d, now)
	assert.Success(t, err)
	for i := range chatrelay.LimitActiveDevices.Max {
		active = append(active, chatrelay.Grant{ID: fmt.Sprintf("d_%08x", i), Role: chatrelay.Owner, CreatedAt: ms - 2*3600*1000, ExpiresAt: ms + day})
	}
	_, err = chatrelay.AdmitGrant(active, d, now)
	assert.Code(t, err, chatrelay.DeviceLimit)
}

// TestCapRefusalCountsTheCap: the cap_reached words agree with the cap:
// "its 1 message is spent" for a cap of 1 (it read "1 messages are
// spent", probe11), "its 50 messages are spent" at the default.
func TestCapRefusalCountsTheCap(t *testing.T) {
	for _, c := range []struct {
		cap  int
		want string
	}{
		{1, "this share link's 1 message is spent"},
		{50, "this share link's 50 messages are spent"},
	} {
		var e *chatrelay.Error
		err := chatrelay.CapRefusal(chatrelay.Grant{Cap: c.cap, Sent: c.cap})
		if !errors.As(err, &e) || e.Code != chatrelay.CapReached || e.Message != c.want {
			t.Errorf("cap %d: %v, want cap_reached %q", c.cap, err, c.want)
		}
	}
}
