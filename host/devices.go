package host

import (
	"context"

	"github.com/chatrelay/chatrelay"
)

// The owner's devices (contract Part 5), on the same record, the same
// store calls and the same audit as share links: a device is a grant
// whose role is owner (chatrelay.Grant.Device). The HTTP routes
// (transport) and `chatrelay device` share these.

// Issued is a device's making: the device, and its token and link, shown
// this once (the store keeps neither).
type Issued struct {
	Device chatrelay.Device
	Token  string
	Link   string
}

// IssueDevice checks in (the contract's codes), stores a new device
// grant in thread and audits it. The link is base's device link (see
// DeviceLink). NotFound if the thread has no message, DeviceLimit if it
// has the most active devices.
func (p *Participants) IssueDevice(ctx context.Context, thread string, in chatrelay.DeviceRequest, base string, by Caller) (Issued, error) {
	g, token, now, err := p.issue(ctx, thread, &in, by)
	if err != nil {
		return Issued{}, err
	}
	return Issued{Device: g.DeviceObject(now), Token: token, Link: DeviceLink(base, token)}, nil
}

// DeviceLink is the link that opens the page on a device: base + "/d#" +
// token (see ShareLink).
func DeviceLink(base, token string) string { return link(base, "/d#", token) }

// Devices returns the thread's devices, newest first, revoked and
// expired ones included.
func (p *Participants) Devices(ctx context.Context, thread string) ([]chatrelay.Device, error) {
	grants, err := p.Store.Grants(ctx, thread)
	if err != nil {
		return nil, err
	}
	now := p.now()
	out := []chatrelay.Device{}
	for _, g := range grants {
		if g.Device() {
			out = append(out, g.DeviceObject(now))
		}
	}
	return out, nil
}

// RevokeDevice revokes a device of thread and returns it; revoking again
// answers the same (and audits nothing). NotFound for no such device.
func (p *Participants) RevokeDevice(ctx context.Context, thread, id string, by Caller) (chatrelay.Device, error) {
	notFound := chatrelay.Errorf(chatrelay.NotFound, "no device %q in this thread", clipAt(id, 256))
	if !chatrelay.ValidDeviceID(id) {
		return chatrelay.Device{}, notFound
	}
	g, err := p.revoke(ctx, thread, id, by)
	if chatrelay.CodeOf(err) == chatrelay.NotFound {
		return chatrelay.Device{}, notFound
	}
	if err != nil {
		return chatrelay.Device{}, err
	}
	return g.DeviceObject(p.now()), nil
}
