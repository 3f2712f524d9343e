// linkpanel.js: what the People panel (people.js) and the devices panel
// (devices.js) share. Both make a link that is shown this once, with Copy
// and its QR code, and both list their links with a state and, while
// active, Revoke.

// durationWords says a limit's seconds in words ("1 hour", "30 days",
// "1 year"), in the largest unit that divides them.
export function durationWords(seconds) {
  for (const [unit, n] of [["year", 31536000], ["day", 86400], ["hour", 3600], ["minute", 60]]) {
    if (seconds >= n && seconds % n === 0) {
      const k = seconds / n;
      return `${k} ${unit}${k === 1 ? "" : "s"}`;
    }
  }
  return `${seconds} seconds`;
}

export const dayFmt = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });

/**
 * linkShownOnce wires the part of a panel that shows a new link this once:
 * els.box (hidden until a link is shown), els.title, els.link (the input
 * that holds it), els.copy (the Copy button), els.copied (what Copy did)
 * and els.qr (the QR code's img). show(title, r, name) shows the link
 * r.link and r.qr (a PNG data URL, if any) made for name; forget forgets
 * it (the server keeps only its digest).
 */
export function linkShownOnce(els) {
  const { box, title, link, copy, copied, qr } = els;

  function forget() {
    box.hidden = true;
    link.value = "";
    qr.removeAttribute("src");
    qr.alt = "";
    qr.hidden = true;
    copied.textContent = "";
  }

  function show(words, r, name) {
    title.textContent = words;
    link.value = r.link;
    copied.textContent = "";
    if (r.qr) {
      qr.src = r.qr;
      qr.alt = `QR code of the link for ${name}`;
      qr.hidden = false;
    }
    box.hidden = false;
    title.focus();
  }

  // Copy puts the link on the clipboard; where the Clipboard API is
  // refused (a page that is not a secure context), the selected text is
  // copied the old way, and failing that the person is told to.
  copy.addEventListener("click", async () => {
    const text = link.value;
    if (!text) return;
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch {}
    if (!ok) {
      link.focus();
      link.select();
      try {
        ok = document.execCommand("copy");
      } catch {}
    }
    if (ok) {
      copied.textContent = "Copied.";
      copy.focus();
    } else {
      link.focus();
      link.select();
      copied.textContent = "Could not copy: the link is selected, press Ctrl+C (⌘C on a Mac).";
    }
  });

  return { forget, show };
}

/**
 * drawList replaces the rows of list with all.map(row), keeps the focus
 * on the row it was on, and says in status what counted says of all.
 */
export function drawList(list, status, all, row, counted) {
  const focusedID = list.contains(document.activeElement) ? document.activeElement.closest("li")?.dataset.id : null;
  list.replaceChildren(...all.map(row));
  status.textContent = counted(all.filter((x) => x.state === "active").length, all.length);
  if (focusedID) list.querySelector(`li[data-id="${CSS.escape(focusedID)}"]`)?.focus();
}

/**
 * listRow makes the row of one link x (a participant's or a device's): its
 * name, then badges (elements, each after a space), its state and extra
 * (nodes); then the meta line, parts joined by " · "; and while x is
 * active a Revoke button named revokeLabel.
 */
export function listRow(x, { badges = [], extra = [], meta, revokeLabel }) {
  const li = document.createElement("li");
  li.dataset.id = x.id;
  li.dataset.state = x.state;
  li.tabIndex = -1;
  const who = document.createElement("div");
  who.className = "p-who";
  const nm = document.createElement("span");
  nm.className = "p-name";
  nm.dir = "auto"; // isolated: a right-to-left name never reorders the badges after it
  nm.textContent = x.name;
  const state = document.createElement("span");
  state.className = "p-state";
  state.dataset.state = x.state;
  state.textContent = x.state;
  who.append(nm, ...badges.flatMap((b) => [" ", b]), " ", state, ...extra);
  const line = document.createElement("div");
  line.className = "p-meta";
  line.textContent = meta.join(" · ");
  li.append(who, line);
  if (x.state === "active") {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "revoke quiet";
    b.dataset.revoke = x.id;
    b.dataset.name = x.name;
    b.textContent = "Revoke";
    b.setAttribute("aria-label", revokeLabel);
    li.append(b);
  }
  return li;
}

// makeLink runs a panel's one request for a new link (a share link, a
// device link): the form is busy meanwhile (its button disabled,
// aria-busy; a second submit does nothing), the link shown before is
// forgotten, and the new one is shown once and the list drawn again; a
// refusal is said in the panel's words (refused(err)) and the name field
// takes the focus.
export async function makeLink({ form, send, name, showError, forget, show, refresh, request, refused }) {
  if (form.getAttribute("aria-busy") === "true") return;
  send.disabled = true;
  form.setAttribute("aria-busy", "true");
  showError("");
  forget();
  try {
    const r = await request();
    name.value = "";
    show(r);
    refresh();
  } catch (err) {
    showError(refused(err));
    name.focus();
  } finally {
    send.disabled = false;
    form.removeAttribute("aria-busy");
  }
}

/**
 * linkPanel wires what a People-like panel shares, its parts found in the
 * dialog of that id (index.html marks them the same way in both): the
 * button that opens it (aria-controls), its Close (.people-head), its form
 * (fields name and expires, its submit button) with the error under it
 * (.people-error), the link shown once (section.invited, linkShownOnce's,
 * with its Done) and the list (ul.people-list) with its status line.
 *
 * read() reads the list, which is given to onList and drawn by row and
 * counted (drawList), or sentence(err, "list") says why it was not; a row's Revoke runs revoke(button); a submit runs
 * make(); opening the panel focuses focusOnOpen() (the name field unless
 * it says otherwise) and reads the list; Done or closing the panel forgets
 * the link shown. It returns null if the page has no such dialog, else its
 * parts with showError(words), refresh(), shown (linkShownOnce's) and
 * newLink({ request, refused, show }), makeLink on this panel's form.
 */
export function linkPanel(id, { read, onList = () => {}, row, counted, sentence, revoke, make, focusOnOpen }) {
  const dialog = document.getElementById(id);
  if (!dialog) return null;
  const form = dialog.querySelector("form");
  const box = dialog.querySelector("section.invited");
  const panel = {
    dialog,
    form,
    opener: document.querySelector(`button[aria-controls="${id}"]`),
    name: form.elements.name,
    expiry: form.elements.expires,
    send: form.querySelector('button[type="submit"]'),
    error: dialog.querySelector(".people-error"),
    list: dialog.querySelector("ul.people-list"),
    status: dialog.querySelector('p.hint[role="status"]'),
    shown: linkShownOnce({
      box,
      title: box.querySelector("h3"),
      link: box.querySelector(".link-row input"),
      copy: box.querySelector(".link-row button"),
      copied: box.querySelector(".copied"),
      qr: box.querySelector("img.qr"),
    }),
    showError,
    refresh,
    newLink: ({ request, refused, show }) =>
      makeLink({ form, send: panel.send, name: panel.name, showError, forget: panel.shown.forget, show, refresh, request, refused }),
  };
  const { opener, name, error, list, status, shown } = panel;

  // A name holds at most data-max-chars code points, as the server counts
  // them (past it the server cuts it): a maxlength would count UTF-16
  // units, an emoji as two, and keep half the name the server takes.
  const maxChars = Number(name.dataset.maxChars);
  name.addEventListener("input", () => {
    const chars = [...name.value];
    if (chars.length > maxChars) name.value = chars.slice(0, maxChars).join("");
  });

  function showError(words) {
    error.textContent = words;
    error.hidden = !words;
    name.setAttribute("aria-invalid", words ? "true" : "false");
  }

  // Only the newest read draws: an older one that answers late is dropped.
  let reading = 0;
  async function refresh() {
    const n = ++reading;
    try {
      const all = await read();
      if (n !== reading) return;
      onList(all);
      drawList(list, status, all, row, counted);
    } catch (err) {
      if (n === reading) status.textContent = sentence(err, "list");
    }
  }

  list.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-revoke]");
    if (b && !b.disabled) revoke(b);
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    make();
  });
  box.querySelector(".invited-text > button").addEventListener("click", () => {
    shown.forget();
    name.focus();
  });

  opener.addEventListener("click", () => {
    showError("");
    if (!dialog.open) dialog.showModal();
    (focusOnOpen?.() ?? name).focus();
    refresh();
  });
  dialog.querySelector(".people-head button").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => {
    shown.forget();
    showError("");
    if (!opener.hidden) opener.focus();
  });
  return panel;
}
