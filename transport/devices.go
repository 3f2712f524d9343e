package transport

import (
	"encoding/base64"
	"encoding/json"
	"net/http"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/chatrelay/chatrelay"
)

// The device routes (contract Part 5): the owner makes a device link; the
// owner or a device lists and revokes devices. A device is a grant of the
// participants record (chatrelay.Grant.Device), so the gate resolves it,
// and liveGrants ends its streams, as a share link's.

// deviceBody is the body of POST /api/chat/devices.
type deviceBody struct {
	Name      *name           `json:"name"`
	ExpiresIn json.RawMessage `json:"expires_in"`
}

// deviceIssued is the 201 of POST /api/chat/devices: the token and link
// are shown this once; qr is the link as a QR code (a PNG data URL), for
// the page.
type deviceIssued struct {
	Success bool             `json:"success"`
	Device  chatrelay.Device `json:"device"`
	Token   string           `json:"token"`
	Link    string           `json:"link"`
	QR      string           `json:"qr,omitempty"` // absent for a link too long for a QR code
}

// request checks the body's fields, with the contract's codes.
func (b deviceBody) request() (chatrelay.DeviceRequest, error) {
	var in chatrelay.DeviceRequest
	if b.Name == nil {
		return in, chatrelay.Errorf(chatrelay.InvalidName, "a device needs a name")
	}
	in.Name = string(*b.Name)
	var err error
	if in.ExpiresIn, err = expiresIn(b.ExpiresIn, chatrelay.LimitDeviceExpiresIn); err != nil {
		return in, err
	}
	return in, in.Check()
}

// handleDeviceIssue serves POST /api/chat/devices (the owner's token only).
func (s *Server) handleDeviceIssue(w http.ResponseWriter, r *http.Request, p principal) {
	var body deviceBody
	if !s.decodeJSON(w, r, &body) {
		return
	}
	in, err := body.request()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d, err := s.people().IssueDevice(r.Context(), p.thread, in, s.publicBase(r), caller(r, s.cfg.Trusted))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, deviceIssued{Success: true, Device: d.Device, Token: d.Token, Link: d.Link, QR: qrDataURL(d.Link)})
}

// qrDataURL is link as a QR code, a PNG data URL ("" if it cannot be
// drawn).
func qrDataURL(link string) string {
	png, err := qrcode.Encode(link, qrcode.Medium, 256)
	if err != nil {
		return ""
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
}

// devicesAnswer is the 200 of GET /api/chat/devices.
type devicesAnswer struct {
	Success bool               `json:"success"`
	Devices []chatrelay.Device `json:"devices"`
}

// handleDevices serves GET /api/chat/devices (the owner or a device):
// every device, newest first.
func (s *Server) handleDevices(w http.ResponseWriter, r *http.Request, p principal) {
	ds, err := s.people().Devices(r.Context(), p.thread)
	s.answer(w, r, devicesAnswer{Success: true, Devices: ds}, err)
}

// deviceAnswer is the 200 of a device's revoke.
type deviceAnswer struct {
	Success bool             `json:"success"`
	Device  chatrelay.Device `json:"device"`
}

// handleDeviceRevoke serves DELETE /api/chat/devices/{id} (the owner or a
// device, itself included). Revoking again answers the same.
func (s *Server) handleDeviceRevoke(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	d, err := s.people().RevokeDevice(r.Context(), p.thread, id, caller(r, s.cfg.Trusted))
	if err == nil {
		s.live.end(p.thread, id, chatrelay.ErrDeviceRevoked) // here at once; other nodes by the feed
	}
	s.answer(w, r, deviceAnswer{Success: true, Device: d}, err)
}
