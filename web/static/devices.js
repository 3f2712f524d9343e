// devices.js: the owner's devices panel, "Open on another device"
// (contract Part 5). A modal dialog, as People's (people.js): a form that
// makes a device link (a name, how long it works), the link shown this once
// with Copy and its QR code (made by the server, a PNG data URL, with the
// skip2/go-qrcode library), and the list of the conversation's devices with
// Revoke. On a device's own page (/d) the form is left out (only the
// conversation's own token makes devices) and the list marks "this device";
// revoking this device ends the page, as a revoke from elsewhere does.

import { dayFmt, durationWords, linkPanel, listRow } from "./linkpanel.js";
import { LEAST, LIMITS } from "./limits.js";

// sentence says why the server refused a device link, a revoke or the
// list, from the error's machine code.
function sentence(err, what) {
  switch (err.code) {
    case "device_limit":
      return `This conversation already has ${LIMITS["device.active"]} active devices: revoke one before adding another.`;
    case "invalid_name":
      return "Give the device a name: letters or digits, not only spaces or the characters [ ] < >.";
    case "invalid_expiry":
      return `Choose how long the link works: between ${durationWords(LEAST["device.expires_in"])} and ${durationWords(LIMITS["device.expires_in"])}.`;
    case "participants_unreadable":
      return "The server cannot read this conversation's list of devices and people for now. Tell whoever runs the server.";
    case "not_found":
      return what === "make"
        ? "Write a first message before opening this conversation elsewhere: there is no conversation yet."
        : "That device is not in this conversation's list any more.";
    case "not_permitted":
      return "Only the browser that started this conversation can add devices.";
    case "store_unavailable":
      return "The server's store cannot be reached for now; try again in a moment.";
    case "rate_limited":
      return `Too many requests for now; try again in ${Math.max(1, Math.ceil(err.retryAfterMs / 1000))} s.`;
  }
  if (err.status === 0) return "The server could not be reached. Try again.";
  const lead = { make: "No link was made", revoke: "The device was not revoked", list: "The list could not be read" }[what];
  return `${lead}: ${err.message}.`;
}

/**
 * setupDevices wires the devices panel of index.html to chat (a
 * ChatClient of the owner, or of one of its devices: chat.device).
 * thisDevice is the id of the device this page is ("" for the owner's
 * own page), learnt from whoami.
 */
export function setupDevices(chat, thisDevice = () => "") {
  const panel = linkPanel("devices", {
    read: () => chat.devices(),
    row,
    counted: (active, n) => (n ? `${active} active ${active === 1 ? "device" : "devices"}, ${n} in all.` : "No other device yet."),
    sentence,
    revoke,
    make,
    focusOnOpen: () => (chat.device ? document.getElementById("devices-close") : null),
  });
  if (!panel) return;
  const { dialog, opener, form, name, expiry, list, status, showError, refresh, shown, newLink } = panel;

  // A device may list and revoke devices, not make them.
  if (chat.device) {
    form.hidden = true;
    document.getElementById("devices-title").textContent = "Devices";
    document.getElementById("devices-intro").textContent =
      "The devices that open this conversation as its owner. Only the browser that started the conversation can add one; any of them can revoke one.";
  }

  // ---- the list ----

  function row(d) {
    const extra = [];
    if (d.id === thisDevice()) {
      const me = document.createElement("span");
      me.className = "this-device";
      me.textContent = "this device";
      extra.push(" · ", me);
    }
    const meta = [d.last_seen ? `last seen ${dayFmt.format(new Date(d.last_seen))}` : "not opened yet"];
    if (d.state === "active") meta.push(`works until ${dayFmt.format(new Date(d.expires_at))}`);
    else if (d.state === "expired") meta.push(`expired ${dayFmt.format(new Date(d.expires_at))}`);
    return listRow(d, { extra, meta, revokeLabel: `Revoke the device ${d.name}` });
  }

  // ---- revoke ----

  async function revoke(b) {
    const id = b.dataset.revoke;
    const which = b.dataset.name;
    const self = id === thisDevice();
    const ok = confirm(
      self
        ? `Revoke this device (${which})?\n\nThis browser loses access to the conversation at once, for good.`
        : `Revoke the device ${which}?\n\nIt loses access to this conversation at once, and its link can never be used again.`,
    );
    if (!ok) return;
    b.disabled = true;
    showError("");
    try {
      await chat.revokeDevice(id);
    } catch (err) {
      showError(sentence(err, "revoke"));
      b.disabled = false;
      return;
    }
    if (self) {
      dialog.close(); // the page ends: the next request is refused
      return;
    }
    await refresh();
    status.textContent = `${which} is revoked.`;
    list.querySelector(`li[data-id="${CSS.escape(id)}"]`)?.focus();
  }

  // ---- make a device link ----

  // The link is shown once: Done, or closing the panel, forgets it
  // (linkPanel; the server keeps only its digest).
  function showLink(r) {
    const d = r.device;
    shown.show(`Link for ${d.name}, until ${dayFmt.format(new Date(d.expires_at))}`, r, d.name);
  }

  function make() {
    const which = name.value.trim() ? name.value : name.placeholder;
    return newLink({
      show: showLink,
      request: () => chat.makeDevice({ name: which, expiresIn: Number(expiry.value) }),
      refused: (err) => sentence(err, "make"),
    });
  }

  // ---- the panel ----

  // A device link needs a conversation (the server answers 404 before the
  // first message), so the panel is offered once there is one.
  const offer = () => {
    opener.hidden = chat.messages.length === 0 || !!chat.ended;
  };
  chat.addEventListener("clear", offer);
  chat.addEventListener("message", offer);
  chat.addEventListener("ended", () => {
    offer();
    if (dialog.open) dialog.close();
  });
  offer();
}
