package chatrelay

import "time"

// Devices (contract Part 5): the owner on several devices. A device is a
// grant of the thread's participants record whose role is Owner (and
// whose id is "d_" + 8 hex): the same record, the same digest lookup,
// revoke, expiry, first use, audit and end of streams as a share link's
// (Part 3), one mechanism for both. A device acts as the owner on every
// route but making devices; its posts are the operator's, it sees the
// stored text, and it is never counted, listed or capped as a
// participant.

const devicePrefix = "chd_"

// Device is the device object of every answer that shows one: never its
// token or digest.
type Device struct {
	ID        string     `json:"id"` // "d_" + 8 lowercase hex
	Name      string     `json:"name"`
	CreatedAt int64      `json:"created_at"`
	ExpiresAt int64      `json:"expires_at"`
	LastSeen  int64      `json:"last_seen,omitempty"` // its latest request, to DefaultDeviceSeen; absent before its first
	State     GrantState `json:"state"`
}

// Device reports whether the grant is one of the owner's devices, not a
// participant's share link.
func (g *Grant) Device() bool { return g.Role == Owner }

// DeviceObject is the device grant's public object at now.
func (g *Grant) DeviceObject(now time.Time) Device {
	return Device{ID: g.ID, Name: g.Name, CreatedAt: g.CreatedAt, ExpiresAt: g.ExpiresAt, LastSeen: g.LastSeen, State: g.StateAt(now)}
}

// AuditOf is the audit event ev (AuditIssued, AuditRevoked, …) of the
// grant: a participant's names it in "participant"; a device's is
// "device_" + ev and names it in "device". ok is false for an event a
// device's audit does not keep (a refusal: the contract's device events
// are issued, revoked, expired and first use).
func (g *Grant) AuditOf(ev string) (e AuditEvent, ok bool) {
	if !g.Device() {
		return AuditEvent{Event: ev, Participant: g.ID}, true
	}
	if ev == AuditRefused {
		return AuditEvent{}, false
	}
	return AuditEvent{Event: "device_" + ev, Device: g.ID}, true
}

// NewDeviceToken returns a fresh device token ("chd_" + 43 base64url
// characters of 32 random bytes) and its digest (hex SHA-256).
func NewDeviceToken() (token, digest string) {
	token = newSecret(devicePrefix)
	return token, DigestOf(token)
}

// ValidDeviceToken reports whether s has the form of a device token.
func ValidDeviceToken(s string) bool { return validSecret(s, devicePrefix) }

// NewDeviceID returns a fresh "d_" + 8 lowercase hex.
func NewDeviceID() string { return newID("d_", 4) }

// ValidDeviceID reports whether s has the form of a device id.
func ValidDeviceID(s string) bool { return validID(s, "d_", 4) }

// ValidGrantID reports whether s has the form of a grant's id: a
// participant's or a device's.
func ValidGrantID(s string) bool { return ValidParticipantID(s) || ValidDeviceID(s) }

// DeviceRequest is what the owner asks for: a device's name and life (a
// zero ExpiresIn takes the default).
type DeviceRequest struct {
	Name      string
	ExpiresIn time.Duration
}

// Check cleans the name (as a participant's), fills the default life and
// checks it, with the contract's codes.
func (in *DeviceRequest) Check() error {
	name, err := CleanName(in.Name)
	if err != nil {
		return err
	}
	in.Name = name
	if in.ExpiresIn == 0 {
		in.ExpiresIn = DefaultDeviceExpiresIn
	}
	lo, hi := LimitDeviceExpiresIn.Duration()
	if in.ExpiresIn < lo || in.ExpiresIn > hi || in.ExpiresIn%time.Second != 0 {
		return Errorf(InvalidExpiry, "a device's expires_in is %d … %d seconds", LimitDeviceExpiresIn.Min, LimitDeviceExpiresIn.Max)
	}
	return nil
}

// Grant makes the device grant of a checked request at now, with a fresh
// id and token; the token is returned once and never kept.
func (in DeviceRequest) Grant(now time.Time) (Grant, string) {
	token, digest := NewDeviceToken()
	return Grant{ID: NewDeviceID(), Name: in.Name, Role: Owner,
		CreatedAt: now.UnixMilli(), ExpiresAt: now.Add(in.ExpiresIn).UnixMilli(), Digest: digest}, token
}

// The refusals of a device that no longer holds (GrantRefusal's, for a
// device).
var (
	ErrDeviceRevoked = Errorf(TokenRevoked, "this device was revoked: open a new device link from the owner's page")
	ErrDeviceExpired = Errorf(TokenExpired, "this device's link expired: open a new device link from the owner's page")
)
