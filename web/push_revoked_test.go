package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestApproveFromTheNotificationOfARevokedDevice: a device's page turned
// notifications on and got an approval's notification; the owner then
// revoked the device. Approve on the notification is refused by the
// server (401 token_revoked), stores nothing, and the notification says
// why and what to do, without telling the person to open the
// conversation to answer (the revoked device's page cannot).
func TestApproveFromTheNotificationOfARevokedDevice(t *testing.T) {
	srv, svc := startPushServer(t)
	owner := strings.Repeat("5d", 32)
	thread := threadOf(owner)
	post(t, srv.URL, owner, "deploys of this week", "operator")
	status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", owner, map[string]string{"name": "Phone"})
	var made struct {
		Link   string
		Device struct{ ID string }
	}
	if json.Unmarshal(raw, &made); status != http.StatusCreated || made.Link == "" {
		t.Fatalf("make a device: %d %s", status, raw)
	}
	phone := svc.Subscribe(t, "phone")
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(phone)
	tb.open(made.Link)
	tb.waitState(live, "ws")
	tb.waitShown(soon, "deploys of this week")
	tb.click("#notify")
	tb.waitJS(soon, "the switch on", `document.getElementById("notify").dataset.state === "on"`)
	reg := tb.registration(srv.URL)
	tb.open(srv.URL + "favicon.svg")

	ix, _ := tb.notifyApproval(srv, svc, srv.URL, reg, "/push/phone", thread, "Rotate the signing keys.", "rotate")

	status, raw = callAPI(t, http.MethodDelete, srv.URL+"api/chat/devices/"+made.Device.ID, "X-Chat-Token", owner, nil)
	if status != http.StatusOK {
		t.Fatalf("revoke the device: %d %s", status, raw)
	}
	inWorker[bool](tb, srv.URL+"sw.js", clickJS(ix, "approve", 0))
	tb.waitNotification(ix, "Not sent: this device was revoked: open a new device link from the owner's page.")
	if got := srv.check(thread, ix).State; got != "pending" {
		t.Errorf("the revoked device's Approve left the approval %s, want pending", got)
	}
}
