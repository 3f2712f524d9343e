// people.js: the owner's People panel (contract Part 3). A modal dialog
// (the browser's own <dialog>: it keeps the focus inside, Escape closes it,
// and the focus goes back to the People button) with the invite form (a
// name, a role, an expiry), the link of a new invite shown this once with
// Copy and its QR code (made by the server, a PNG data URL), and the list
// of every link with its state and, while active, Revoke.

import { dayFmt, durationWords, linkPanel, listRow } from "./linkpanel.js";
import { LEAST, LIMITS } from "./limits.js";

// sentence says why the server refused an invite, a revoke or the list,
// from the error's machine code.
function sentence(err, what) {
  switch (err.code) {
    case "participant_limit":
      return `This conversation already has ${LIMITS["participant.grants"]} active links: revoke one before inviting someone else.`;
    case "invalid_name":
      return "Give the person a name: letters or digits, not only spaces or the characters [ ] < >.";
    case "invalid_role":
      return "Choose a role: viewer or commenter.";
    case "invalid_expiry":
      return `Choose when the link expires: between ${durationWords(LEAST["participant.expires_in"])} and ${durationWords(LIMITS["participant.expires_in"])}.`;
    case "invalid_cap":
      return `The number of messages a link may write is ${LEAST["participant.cap"]} to ${LIMITS["participant.cap"]}.`;
    case "participants_unreadable":
      return "The server cannot read this conversation's list of people, so no one can be invited or revoked for now, and every link is refused meanwhile. Tell whoever runs the server.";
    case "not_found":
      return what === "invite"
        ? "Write a first message before inviting anyone: there is no conversation to share yet."
        : "That link is not in this conversation's list any more.";
    case "store_unavailable":
      return "The server's store cannot be reached for now; try again in a moment.";
    case "rate_limited":
      return `Too many requests for now; try again in ${Math.max(1, Math.ceil(err.retryAfterMs / 1000))} s.`;
    case "network":
      return "The server could not be reached. Try again.";
  }
  const lead = { invite: "No link was made", revoke: "The link was not revoked", list: "The list could not be read" }[what];
  return `${lead}: ${err.message}.`;
}

/**
 * setupPeople wires the People panel of index.html to chat (a
 * ChatClient of the owner). onList is given every list of grants read,
 * so the page can name participants.
 */
export function setupPeople(chat, onList = () => {}) {
  const panel = linkPanel("people", {
    read: () => chat.participants(),
    onList,
    row,
    counted: (active, n) => (n ? `${active} active ${active === 1 ? "link" : "links"}, ${n} in all.` : "No one has been invited yet."),
    sentence,
    revoke,
    make: invite,
  });
  if (!panel) return;
  const { dialog, opener, form, name, expiry, status, showError, refresh, shown, newLink } = panel;

  // ---- the list ----

  function row(p) {
    const role = document.createElement("span");
    role.className = "badge";
    role.textContent = p.kind === "agent" ? `${p.role} · agent` : p.role;
    const meta = [];
    if (p.role === "commenter" || p.sent > 0) meta.push(`${p.sent} of ${p.cap} messages sent`);
    if (p.state === "active") meta.push(`expires ${dayFmt.format(new Date(p.expires_at))}`);
    else if (p.state === "expired") meta.push(`expired ${dayFmt.format(new Date(p.expires_at))}`);
    else meta.push(`invited ${dayFmt.format(new Date(p.created_at))}`);
    return listRow(p, { badges: [role], meta, revokeLabel: `Revoke ${p.name}'s link` });
  }

  // ---- revoke ----

  async function revoke(b) {
    const id = b.dataset.revoke;
    const who = b.dataset.name;
    const ok = confirm(`Revoke ${who}'s link?\n\n${who} loses access to this conversation at once, and the link can never be used again.`);
    if (!ok) return;
    b.disabled = true;
    showError("");
    try {
      await chat.revoke(id);
      status.textContent = `${who}'s link is revoked.`;
      b.closest("li")?.focus();
    } catch (err) {
      showError(sentence(err, "revoke"));
      b.disabled = false;
      return;
    }
    await refresh();
    status.textContent = `${who}'s link is revoked.`;
  }

  // ---- invite ----

  // The link of an invite is shown once: Done, or closing the panel,
  // forgets it (linkPanel; the server keeps only its digest).
  function showLink(r) {
    const p = r.participant;
    shown.show(`Link for ${p.name} (${p.role}), until ${dayFmt.format(new Date(p.expires_at))}`, r, p.name);
  }

  function invite() {
    if (form.getAttribute("aria-busy") === "true") return;
    const who = name.value;
    if (!who.trim()) {
      showError("Give the person a name first.");
      name.focus();
      return;
    }
    const role = form.elements.role.value || "commenter";
    return newLink({
      show: showLink,
      request: () => chat.invite({ name: who, role, expiresIn: Number(expiry.value) }),
      refused: (err) => sentence(err, "invite"),
    });
  }

  // ---- the panel ----

  // Inviting needs a conversation (the server answers 404 before the
  // first message), so People is offered once there is one.
  const offer = () => {
    opener.hidden = chat.messages.length === 0;
  };
  chat.addEventListener("clear", offer);
  chat.addEventListener("message", (e) => {
    offer();
    // A guest's post changes its link's count: an open list shows it.
    if (dialog.open && String(e.detail.message.author).startsWith("p:")) refresh();
  });
  offer();
}
