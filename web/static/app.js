// app.js: the page, for the conversation's owner (index.html), for one of
// the owner's devices (index.html served at /d, which t-link.js marks
// <html data-page="device">: the owner, with a device link's token), and
// for a participant who came by a share link (p.html, <body data-page=
// "participant">). It draws what the ChatClient of chat.js reports (with
// the builders of view.js) and sends what the person writes, answers and
// reacts. Text is always set with textContent, never parsed as HTML. The
// owner's People panel is people.js, its devices panel devices.js; the
// "Notify me" switch is push.js.

import { ChatClient, DEVICE_TOKEN, MAX_CHARS, SHARE_TOKEN, countChars } from "./chat.js";
import { OWNER, el, guest, messageItem, moveInBar, redrawNames, refreshInteraction, sizeText, tick, updateItem } from "./view.js";
import { setupPeople } from "./people.js";
import { setupDevices } from "./devices.js";
import { setupPush } from "./push.js";
import { LIMITS } from "./limits.js";

const $ = (id) => document.getElementById(id);
const els = {
  status: $("status"),
  statusText: $("status-text"),
  fresh: $("new"),
  me: $("me"),
  others: $("others"),
  readonly: $("readonly"),
  ended: $("ended"),
  endedText: $("ended-text"),
  scroller: $("conversation"),
  log: $("log"),
  empty: $("empty"),
  waiting: $("waiting"),
  jump: $("jump"),
  announcer: $("announcer"),
  form: $("composer"),
  text: $("text"),
  count: $("count"),
  send: $("send"),
  notice: $("notice"),
  noticeText: $("notice-text"),
  retry: $("retry"),
  files: $("files"),
  file: $("file"),
  attach: $("attach"),
};

const states = {
  connecting: "connecting…",
  ws: "live · WebSocket",
  sse: "live · SSE",
  polling: "polling",
  offline: "offline",
  ended: "no access",
};

// ---- who reads ----

/** The participant page keeps its link's token here, for this tab only. */
const SHARE_KEY = "chatrelay.share";

const participantPage = document.body.dataset.page === "participant";

// The participant's link: p-link.js took its token out of the address bar
// (and the history) before anything else ran, and left it here.
const link = participantPage ? readLink() : null;

function readLink() {
  let token = "";
  try {
    token = sessionStorage.getItem(SHARE_KEY) || "";
  } catch {}
  if (!token) return { token, problem: "missing" };
  if (!SHARE_TOKEN.test(token)) return { token, problem: "malformed" };
  return { token, problem: "" };
}

/** A device's page keeps its link's token here: a device is meant to stay. */
const DEVICE_KEY = "chatrelay.device";

const devicePage = document.documentElement.dataset.page === "device";

// declinedDevice: the person said no to a device link that would have
// replaced the device this browser keeps (readDevice).
let declinedDevice = false;

// The device's link: t-link.js took its token out of the address bar (and
// the history) before anything else ran, and kept it in localStorage.
const deviceLink = devicePage ? readDevice() : null;

function readDevice() {
  const said = document.documentElement.dataset.device;
  if (said === "malformed") return { token: "", problem: "malformed" };
  if (said === "unkept") return { token: "", problem: "unkept" };
  if (said === "pending") {
    // The link names another device than the one this browser keeps:
    // adopted unasked, it would make the browser forget its device, and
    // show (and send the person's words to) the conversation of whoever
    // made the link. Said no, the page keeps its own.
    const fresh = window.chatrelayDevice;
    delete window.chatrelayDevice;
    const ok = confirm(
      "Open the conversation of this device link?\n\nThis browser will forget the device link it keeps now, and open the new link's conversation instead. Say no if you did not expect a new device link.",
    );
    if (!ok) declinedDevice = true;
    else {
      try {
        localStorage.setItem(DEVICE_KEY, fresh);
      } catch {
        return { token: "", problem: "unkept" };
      }
    }
  }
  let token = "";
  try {
    token = localStorage.getItem(DEVICE_KEY) || "";
  } catch {}
  if (!token) return { token, problem: "missing" };
  if (!DEVICE_TOKEN.test(token)) return { token, problem: "malformed" };
  return { token, problem: "" };
}

// The server is the one that served this page. A participant's client is
// made with its link's token, a device's with its own (one that is not a
// token is never started).
const chat = new ChatClient(
  participantPage ? { shareToken: link.token || "-" } : devicePage ? { deviceToken: deviceLink.token || "-" } : {},
);

// busy holds the requests of this page in flight: an interaction's id
// while its answer is sent, "<message id> <emoji>" while a reaction is.
const busy = new Set();
// ctx says who reads (view.js draws with it). A participant's page fills
// it in from whoami before it connects.
const ctx = {
  me: OWNER,
  canAnswer: !participantPage,
  canReact: !participantPage,
  names: new Map(), // "p:<id>" → {name, role, kind}
  now: () => chat.now(),
  busy: (key) => busy.has(key),
  attachmentURL: (id) => chat.attachmentURL(id), // the file's own ticket in the address: <img> sends no header
};

// ---- the conversation ----

function nearBottom() {
  const s = els.scroller;
  return s.scrollHeight - s.scrollTop - s.clientHeight < 48;
}

function toBottom() {
  els.scroller.scrollTop = els.scroller.scrollHeight;
  els.jump.hidden = true;
}

function itemOf(id) {
  return els.log.querySelector(`li[data-id="${CSS.escape(id)}"]`);
}

// shown is every message drawn in the log, by id, as drawn.
const shown = new Map();

function messageOf(id) {
  return shown.get(id);
}

// announce says words once through the page's polite status region: the
// outcome of an interaction, never its countdown.
function announce(words) {
  if (!words) return;
  // The same words twice in a row are still read: the region is emptied first.
  els.announcer.textContent = "";
  setTimeout(() => (els.announcer.textContent = words), 50);
}

// The log is an aria-live region. While a batch of old messages loads (the
// history, or a backlog after a reset) it is marked busy, so a screen
// reader announces what arrives afterwards, not fifty old messages.
// index.html starts it busy; it settles half a second after the last
// message of the batch, or after connecting to an empty thread.
let settling = null;
function settle() {
  clearTimeout(settling);
  settling = setTimeout(() => {
    settling = null;
    els.log.removeAttribute("aria-busy");
  }, 500);
}
function loading() {
  els.log.setAttribute("aria-busy", "true");
  settle();
}

// ---- answers only from a page that has been seen ----

// A page of another site cannot frame this one, but it can open it
// (window.open) at a size it chooses, where a pending approval shows at a
// place it can learn, under the pointer of a person it has clicking (a
// game, "double-click to continue": double-clickjacking). So the answer
// buttons take no press in the first ARM_MS after the page drew its
// conversation (loaded, or shown again): a click that lands then is not a
// person's answer to a card they have read. <html data-answers> says
// "waiting", then "armed". A card that arrives later is answered at once.
const ARM_MS = 500;
let armedAt = Infinity;
let drawn = false;
document.documentElement.dataset.answers = "waiting";
function arm() {
  armedAt = performance.now() + ARM_MS;
  document.documentElement.dataset.answers = "waiting";
  setTimeout(() => {
    if (performance.now() >= armedAt) document.documentElement.dataset.answers = "armed";
  }, ARM_MS);
}
function armed() {
  return performance.now() >= armedAt;
}
function drew() {
  if (drawn) return;
  drawn = true;
  arm();
}
chat.addEventListener("status", (e) => ["ws", "sse", "polling"].includes(e.detail.state) && drew());
document.addEventListener("visibilitychange", () => drawn && document.visibilityState === "visible" && arm());

chat.addEventListener("message", (e) => {
  const { message: m, before } = e.detail;
  drew();
  const stick = nearBottom();
  if (els.log.hasAttribute("aria-busy")) settle();
  const li = messageItem(m, ctx);
  shown.set(m.id, m);
  const next = before && itemOf(before);
  if (next) next.before(li);
  else els.log.append(li);
  els.empty.hidden = true;
  // Follow the conversation only if the reader was already at its end;
  // one scrolled up to read is not yanked away, but told.
  if (stick) toBottom();
  else if (!next) els.jump.hidden = false;
  showWaiting();
  delivered(m);
  ticking();
  learnNames(m);
});

chat.addEventListener("update", (e) => {
  const { message: m, previous } = e.detail;
  const li = itemOf(m.id);
  if (!li) return;
  shown.set(m.id, m);
  const stick = nearBottom();
  announce(updateItem(li, m, previous, ctx));
  if (stick) toBottom();
  ticking();
  learnNames(m);
});

chat.addEventListener("clear", () => {
  loading();
  shown.clear();
  els.log.replaceChildren();
  els.empty.hidden = false;
  els.jump.hidden = true;
  showWaiting();
});

chat.addEventListener("awaiting", showWaiting);

function showWaiting() {
  const stick = nearBottom();
  els.waiting.hidden = !(chat.awaiting && chat.messages.length > 0);
  if (stick) toBottom();
}

els.jump.addEventListener("click", () => {
  toBottom();
  els.text.focus();
});
// A reader at the end stays there when the conversation's box or its
// content changes size without a message (the header or the composer
// growing, a phone's keyboard, a font arriving): no scroll event says so.
let atEnd = true;
els.scroller.addEventListener("scroll", () => {
  atEnd = nearBottom();
  if (atEnd) els.jump.hidden = true;
});
new ResizeObserver(() => {
  if (atEnd) toBottom();
}).observe(els.scroller);
new ResizeObserver(() => {
  if (atEnd) toBottom();
}).observe(els.log);

// showThread says which conversation this is: its title (chatrelay open)
// or else its thread id, short, in the header (the thread id whole in its
// tooltip), and the same in the tab's title.
const threadID = document.getElementById("thread-id");
const fullTitle = document.getElementById("full-title");
let shownThread = "";
function showThread() {
  const shown = chat.thread + "\n" + chat.title;
  if (!chat.thread || shownThread === shown) return;
  shownThread = shown;
  threadID.textContent = chat.title || chat.thread.slice(0, 8);
  threadID.classList.toggle("titled", !!chat.title);
  threadID.title = chat.title ? `${chat.title} (conversation ${chat.thread})` : `conversation ${chat.thread}`;
  document.title = `chatrelay · ${chat.title || chat.thread}`;
  fullTitle.textContent = chat.title;
  fitTitle();
}
chat.addEventListener("title", showThread);

// fitTitle shows the title whole above the conversation when the bar cuts
// it (at a phone's width, or a long title), since its tooltip is shown to
// no touch screen and no keyboard. Hidden from screen readers, which read
// the bar's title whole.
function fitTitle() {
  const h1 = threadID.parentElement;
  const cut = threadID.scrollWidth > threadID.clientWidth + 0.5 || h1.scrollWidth > h1.clientWidth + 0.5;
  fullTitle.hidden = !chat.title || !cut;
}
// fitStatus draws the status words whole, or their first word alone ("live"
// of "live · WebSocket"), or none, as the bar's room allows: a cut word
// ("l…") tells no one anything, and the dot tells the state by its shape.
// The words are made transparent, not removed, so that the bar's layout
// (the room it gives them) does not change with what is drawn, and screen
// readers still read them whole.
function fitStatus() {
  const text = els.statusText, room = text.clientWidth + 0.5;
  const first = text.firstElementChild;
  const fits = text.scrollWidth <= room;
  els.status.classList.toggle("first-word", !fits && !!first && first.getBoundingClientRect().width <= room);
  els.status.classList.toggle("bare", !fits && !(first && first.getBoundingClientRect().width <= room));
}

// setStatusWords writes the status words, the first word in a span of its
// own for fitStatus.
function setStatusWords(words) {
  const [first, ...rest] = words.split(" · ");
  els.statusText.replaceChildren(el("span", { textContent: first }), ...(rest.length ? [el("span", { textContent: " · " + rest.join(" · ") })] : []));
  fitStatus();
}

new ResizeObserver(fitTitle).observe(document.querySelector("header.bar"));
// the words' room changes without the bar's size (a button shown beside them)
new ResizeObserver(fitStatus).observe(els.statusText);

let wasLive = false;
let seenLive = false;
chat.addEventListener("status", (e) => {
  const { state, shared } = e.detail;
  if (state !== "connecting" && settling === null && els.log.hasAttribute("aria-busy")) settle();
  els.status.dataset.state = state;
  setStatusWords(states[state] || state);
  // the whole words in its tooltip: the bar draws them to their room (fitStatus; at a desktop's
  // width beside "Open on another device", "live")
  els.status.title = `${states[state] || state}${shared ? " (shared with another tab of this browser)" : ""}`;
  showThread();
  // Back after a while away: who is in the conversation may have changed.
  const isLive = state === "ws" || state === "sse" || state === "polling";
  if (isLive && !wasLive && participantPage && seenLive) refreshWho();
  wasLive = isLive;
  seenLive ||= isLive;
});

// ---- participants' names ----

// learnNames notices participants this page cannot name yet (a reactor,
// or an agent's badge) and asks the server who they are: one request at a
// time, after a short wait that gathers a burst of messages. The names and
// reactions are then drawn again.
let naming = null;
const asked = new Set(); // ids the server could not name (a revoked link's, on whoami): not asked again
const unnamedIn = (m) =>
  [m.author, ...Object.values(m.reactions || {}).flat()].filter(
    (id) => guest(id) && id !== ctx.me && !ctx.names.has(id) && !asked.has(id),
  );
function learnNames(m) {
  // A participant's message names its author, even one whose link has ended.
  if (guest(m.author) && m.author_name && !ctx.names.has(m.author)) ctx.names.set(m.author, { name: m.author_name });
  if (naming || unnamedIn(m).length === 0) return;
  naming = setTimeout(async () => {
    const ids = unnamedIn(m);
    await (participantPage ? refreshWho() : refreshNames());
    for (const id of ids) if (!ctx.names.has(id)) asked.add(id);
    naming = null;
    for (const [id, m] of shown) {
      const li = itemOf(id);
      if (li && (guest(m.author) || Object.keys(m.reactions || {}).length)) redrawNames(li, m, ctx);
    }
  }, 300);
}

// setNames takes the owner's list of grants, or whoami's active ones.
function setNames(list) {
  for (const p of list || []) ctx.names.set(`p:${p.id}`, { name: p.name, role: p.role, kind: p.kind });
}

function refreshNames() {
  return chat.participants().then(setNames, () => {});
}

// ---- interactions ----

// The countdowns of pending interactions tick while there is one, each
// turn timed to the next moment a countdown's words change (its seconds
// are counted to its deadline), so a card whose deadline passed shows as
// expired at once, before the server's word arrives (the server writes it
// within a second).
let ticker = null;
function ticking() {
  if (ticker !== null) return;
  const pending = els.log.querySelectorAll(".ix[data-state=pending]");
  if (!pending.length) return;
  const now = chat.now();
  let next = 1000;
  for (const sec of pending) {
    const left = Number(sec.dataset.deadline) - now;
    if (Number.isFinite(left)) next = Math.min(next, left > 0 ? left % 1000 || 1000 : 0);
  }
  ticker = setTimeout(() => {
    ticker = null;
    const now = chat.now();
    for (const sec of els.log.querySelectorAll(".ix[data-state=pending]")) {
      if (!tick(sec, now)) continue;
      const li = sec.closest("li");
      const m = li && messageOf(li.dataset.id);
      if (m?.interaction) announce(refreshInteraction(li, m, ctx));
    }
    ticking();
  }, Math.max(next + 5, 20));
}

// redraw draws an interaction's card again (busy changed, or an error).
function redraw(ixID) {
  const li = els.log.querySelector(`.ix[data-ix="${CSS.escape(ixID)}"]`)?.closest("li");
  const m = li && messageOf(li.dataset.id);
  if (li) announce(refreshInteraction(li, m, ctx));
  return li;
}

function cardError(ixID, words) {
  const e = redraw(ixID)?.querySelector(".ix-error");
  if (!e) return;
  e.textContent = words;
  e.hidden = !words;
}

async function answer(ixID, ans) {
  if (busy.has(ixID)) return;
  busy.add(ixID);
  cardError(ixID, "");
  let error = "";
  let closed = false; // the error is about the outcome, not the request
  try {
    await chat.respond(ixID, ans); // shows the answered message at once
  } catch (err) {
    // interaction_closed: the card now shows who or what came first
    // (chat.respond showed the message the 409 carried). When that is
    // the answer given here, it is said as taken: most often it is this
    // page's own, stored by a press whose answer was lost on its way back.
    if (err.code === "interaction_closed") {
      closed = true;
      if (!answeredAs(err.current?.interaction, ans)) error = "Your answer was not taken: this had already closed.";
    } else if (err.code === "not_found") {
      // The card goes with the conversation read again (chat.respond):
      // said under the composer instead.
      notify("Your answer was not taken: this request is no longer in the conversation (older messages were removed).");
    } else if (err.status === 0) {
      error = "Not sent: the server could not be reached. Try again.";
    } else if (err.code === "rate_limited") {
      error = `Too many requests; try again in ${Math.ceil(err.retryAfterMs / 1000)} s.`;
    } else {
      error = `Not sent: ${err.message}.`;
    }
  } finally {
    busy.delete(ixID);
    const card = redraw(ixID)?.querySelector(":scope > .ix");
    // An answer whose fate is unknown (the server could not be reached,
    // or answered a proxy's 502: it may have stored it) is said only on a
    // card still pending: once the stream brought the outcome, which came
    // first, the card shows it.
    if (error && (closed || card?.dataset.state === "pending")) cardError(ixID, error);
  }
}

// answeredAs reports whether interaction ix closed with the answer ans.
function answeredAs(ix, ans) {
  if (ans.decision) return ix?.state === (ans.decision === "approve" ? "approved" : "denied");
  return ix?.state === "answered" && ix.answer?.value === ans.value;
}

// ---- reactions ----

async function toggleReaction(id, emoji, button) {
  const key = `${id} ${emoji}`;
  if (busy.has(key)) return;
  const m = messageOf(id);
  const mine = (m?.reactions?.[emoji] || []).includes(ctx.me);
  busy.add(key);
  button.setAttribute("aria-disabled", "true");
  try {
    await chat.react(id, emoji, mine); // shows the message at once
  } catch (err) {
    if (err.code === "rate_limited") {
      if (countdown === null) {
        const s = Math.max(1, Math.ceil(err.retryAfterMs / 1000));
        notify(`Too many reactions for now; try again in ${s} s.`, "wait");
      }
    } else if (err.status === 0) {
      // The request may have been stored with its answer lost: when the
      // stream has shown it stored meanwhile, there is nothing to say.
      const now = (messageOf(id)?.reactions?.[emoji] || []).includes(ctx.me);
      if (now === mine) notify("Reaction not saved: the server could not be reached.", "error");
    } else {
      notify(`Reaction not saved: ${err.message}.`, "error");
    }
  } finally {
    busy.delete(key);
    // The bar may have been drawn again meanwhile: find the button anew.
    itemOf(id)?.querySelector(`.reactions button[data-emoji="${CSS.escape(emoji)}"]`)?.removeAttribute("aria-disabled");
  }
}

// One listener for every button of the log: real <button>s, so Enter and
// Space work as clicks.
els.log.addEventListener("click", (e) => {
  const b = e.target.closest("button");
  if (!b || !els.log.contains(b) || b.getAttribute("aria-disabled") === "true") return;
  const li = b.closest("li[data-id]");
  if (!li) return;
  if (b.dataset.emoji) {
    for (const x of b.parentElement.children) x.tabIndex = x === b ? 0 : -1; // the bar's Tab stop
    toggleReaction(li.dataset.id, b.dataset.emoji, b);
    return;
  }
  const ixID = b.closest(".ix")?.dataset.ix;
  if (!ixID || !armed()) return;
  if (b.dataset.decision) answer(ixID, { decision: b.dataset.decision });
  else if (b.dataset.choice !== undefined) answer(ixID, { value: b.dataset.choice });
});

// A file's link carries the file's ticket it was drawn with, which expires
// (POST api/chat/ticket: 15 minutes): a link pressed when its ticket is
// about to expire, or has, gets a fresh one first, then opens (the press
// still counts as the person's: a browser allows the new tab or the
// download for a few seconds after it).
els.log.addEventListener("click", async (e) => {
  const a = e.target.closest?.(".atts a[data-att]");
  if (!a?.href) return;
  if (a.dataset.fresh) {
    delete a.dataset.fresh;
    return;
  }
  const expires = Number(new URL(a.href).searchParams.get("ticket")?.split(".").at(-2));
  if (expires - chat.now() > 30000) return;
  e.preventDefault();
  try {
    a.href = await chat.attachmentURL(a.dataset.att);
  } catch {
    return notify("The file could not be opened: the server could not be reached.", "error");
  }
  a.dataset.fresh = "1";
  a.click();
});

els.log.addEventListener("keydown", (e) => {
  const b = e.target.closest?.(".reactions button");
  if (b && !e.altKey && !e.ctrlKey && !e.metaKey && moveInBar(b, e.key)) e.preventDefault();
});

els.log.addEventListener("submit", (e) => {
  const f = e.target.closest("form.ix-text");
  if (!f) return;
  e.preventDefault();
  const ixID = f.dataset.ix;
  if (busy.has(ixID)) return;
  const v = f.elements.value.value;
  if (!v.trim()) {
    cardError(ixID, "Write an answer first.");
    f.elements.value.focus();
    return;
  }
  answer(ixID, { value: v });
});

// ---- writing ----

let countdown = null; // the rate-limit timer, while it runs
let sending = false;
// pending is the post that was sent but is not known to be stored: its
// text and client_id. Sending the same text again reuses the client_id,
// so a retry after a network failure is stored once, however many times
// it is pressed.
let pending = null;

function updateCount() {
  const n = countChars(els.text.value);
  const over = n - MAX_CHARS;
  els.count.textContent = over > 0 ? `${n} / ${MAX_CHARS} · ${over} too many` : `${n} / ${MAX_CHARS}`;
  els.count.classList.toggle("over", over > 0);
  els.text.setAttribute("aria-invalid", over > 0 ? "true" : "false");
}

// notify shows a notice under the composer (an alert); parts are strings
// or nodes. notify("") hides it.
function notify(parts, kind = "error", retry = false) {
  parts = [].concat(parts).filter((p) => p !== "");
  els.notice.hidden = parts.length === 0;
  els.notice.dataset.kind = kind;
  els.noticeText.replaceChildren(...parts);
  els.retry.hidden = !retry;
}

function updateSend() {
  els.send.disabled = sending || countdown !== null;
}

function startCountdown(ms) {
  clearInterval(countdown);
  const end = Date.now() + Math.max(ms, 1000);
  // The seconds tick in a part that is not announced, so a screen reader
  // reads the notice once rather than every second.
  const secs = document.createElement("span");
  secs.setAttribute("aria-live", "off");
  notify(["Too many messages for now. You can send again in ", secs, " s. Your message is kept."], "wait");
  const tick = () => {
    const left = Math.ceil((end - Date.now()) / 1000);
    secs.textContent = String(Math.max(left, 0));
    if (left <= 0) {
      clearInterval(countdown);
      countdown = null;
      updateSend();
      // The message waits for the person: nothing is sent on its own.
      notify("You can send again. Your message is still here; press Send when you are ready.", "info");
    }
  };
  countdown = setInterval(tick, 250);
  tick();
  updateSend();
}

// sent clears the composer once its post is stored (if it still holds
// that text).
function sent(text) {
  pending = null;
  if (els.text.value === text) els.text.value = "";
  updateCount();
  notify("");
}

// delivered notices the pending post arriving: its answer was lost, but
// the message was stored, so nothing is left to retry.
function delivered(m) {
  if (!pending || sending || m.client_id !== pending.clientId) return;
  const text = pending.text;
  sent(text);
  if (els.text.value !== "") notify("Your earlier message was delivered after all.", "info");
}

async function send() {
  const text = els.text.value;
  if (sending || countdown !== null) return;
  if (files.some((f) => f.state === "uploading")) {
    notify("A file is still uploading; send once it is done.", "info");
    return;
  }
  // A file refused for now (a store that could not answer, the thread
  // limit) is uploaded again first: a message never goes without a file
  // the composer shows as not uploaded for such a reason.
  const again = files.filter((f) => f.state === "failed" && f.again);
  if (!text.trim() && files.every((f) => f.state !== "done" && !f.again)) {
    notify("Write a message first.", "info");
    return;
  }
  let p = null;
  sending = true;
  updateSend();
  els.form.setAttribute("aria-busy", "true");
  try {
    if (again.length) {
      await Promise.all(again.map(upload));
      if (chat.ended) return;
      if (again.some((f) => f.state === "failed")) {
        const err = again.find((f) => f.state === "failed").error;
        if (err.code === "thread_limit") threadLimited();
        else notify(`Not sent: a file was not uploaded (${err.message}). Your message and its files are kept.`, "error", true);
        return;
      }
    }
    const ids = files.filter((f) => f.state === "done").map((f) => f.attachment.id);
    const key = ids.join(" ");
    if (!pending || pending.text !== text || pending.key !== key) pending = { text, key, clientId: chat.newClientId() };
    p = pending;
    await chat.send(text, { clientId: p.clientId, attachments: ids });
    sent(text);
    clearFiles(ids);
    toBottom();
  } catch (err) {
    // In every failure the text stays in the composer, with its client_id.
    if (chat.ended) {
      // The link ended: the page says so instead (the "ended" event).
    } else if (err.status === 0 && chat.messages.some((m) => m.client_id === p?.clientId)) {
      sent(text); // the answer was lost, the message is shown: it was stored
    } else if (err.code === "rate_limited") {
      startCountdown(err.retryAfterMs);
    } else if (err.status === 413) {
      const n = countChars(text);
      const why = err.code === "text_too_long" ? `${n} characters, ${n - MAX_CHARS} over the limit` : "too large";
      notify(`Not sent: ${err.message}. Your message is ${why}; shorten it and send again.`);
    } else if (err.status === 0) {
      notify("Not sent: the server could not be reached. Your message is kept.", "error", true);
    } else if (err.code === "thread_limit") {
      threadLimited();
    } else if (refusals[err.code]) {
      notify(refusals[err.code], "wait");
    } else {
      notify(`Not sent: ${err.message}.`, "error", err.retryable);
    }
  } finally {
    sending = false;
    updateSend();
    els.form.removeAttribute("aria-busy");
  }
}

els.form.addEventListener("submit", (e) => {
  e.preventDefault();
  send();
});

// ---- files: attach, drop or paste; each is uploaded at once, with its progress ----

const MAX_FILES = LIMITS["message.attachments"]; // a message's attachments (the server's limits table)
// files are those in the composer: {file, li, status, state: "uploading" | "done" | "failed",
// attachment, error, again}.
const files = [];

function drawFiles() {
  els.files.hidden = files.length === 0;
}

function addFiles(list) {
  for (const file of list) {
    if (files.length >= MAX_FILES) {
      notify(`A message carries at most ${MAX_FILES} files.`, "info");
      break;
    }
    const f = { file, state: "uploading", attachment: null };
    const remove = el("button", { type: "button", className: "quiet", textContent: "×", "aria-label": `Remove ${file.name || "file"}` });
    f.status = el("span", { className: "file-status" });
    f.li = el("li", { className: "file" }, el("span", { className: "file-name", dir: "auto", textContent: file.name || "pasted image" }), f.status, remove);
    remove.addEventListener("click", () => {
      files.splice(files.indexOf(f), 1);
      f.li.remove();
      drawFiles();
      els.text.focus();
    });
    files.push(f);
    els.files.append(f.li);
    upload(f);
  }
  drawFiles();
}

// upload uploads a file of the composer, showing its progress, then its
// size or why it was refused; it resolves once it is settled. A file
// refused for now (f.again: not one too large or malformed, which would
// be refused again) is uploaded again by the next Send.
function upload(f) {
  const { file } = f;
  const bar = el("progress", { max: 1, value: 0, "aria-label": `Uploading ${file.name || "file"}` });
  f.state = "uploading";
  f.status.className = "file-status";
  f.status.textContent = "";
  f.status.before(bar);
  return chat.upload(file, (p) => (bar.value = p), file.name || "pasted image.png").then(
    (a) => {
      f.state = "done";
      f.attachment = a;
      bar.remove();
      f.status.textContent = sizeText(a.size);
    },
    (err) => {
      f.state = "failed";
      f.error = err;
      f.again = err.status !== 413 && err.status !== 400;
      bar.remove();
      f.status.className = "file-status bad";
      // 413: over the server's limit for one file or for the conversation; its message says which
      f.status.textContent = err.status === 413 ? `too large (${sizeText(file.size)}): ${err.message}` : `not uploaded: ${err.message}`;
    },
  );
}

// clearFiles takes the files a stored message carried out of the composer.
function clearFiles(ids) {
  for (const f of [...files]) {
    if (f.attachment && ids.includes(f.attachment.id)) {
      files.splice(files.indexOf(f), 1);
      f.li.remove();
    }
  }
  drawFiles();
}

els.attach.addEventListener("click", () => els.file.click());
els.file.addEventListener("change", () => {
  addFiles([...els.file.files]);
  els.file.value = "";
});
for (const zone of [els.form, els.scroller]) {
  zone.addEventListener("dragover", (e) => {
    if (![...(e.dataTransfer?.types || [])].includes("Files") || els.form.hidden) return;
    e.preventDefault();
    els.form.classList.add("dropping");
  });
  zone.addEventListener("dragleave", () => els.form.classList.remove("dropping"));
  zone.addEventListener("drop", (e) => {
    els.form.classList.remove("dropping");
    if (!e.dataTransfer?.files?.length || els.form.hidden) return;
    e.preventDefault();
    addFiles([...e.dataTransfer.files]);
  });
}
els.text.addEventListener("paste", (e) => {
  const pasted = [...(e.clipboardData?.files || [])];
  if (pasted.length === 0) return; // text pastes as text
  e.preventDefault();
  addFiles(pasted);
});
els.text.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
els.text.addEventListener("input", updateCount);
els.retry.addEventListener("click", () => {
  send();
  els.text.focus();
});

// A participant's post refused for a reason of its link's (contract Part 3).
const refusals = {
  too_many_messages: "Not sent: your last 3 messages still wait for hermes's answer. Your message is kept; send it once hermes has answered.",
  cap_reached: "Not sent: this link has used all the messages it may write. Ask the conversation's owner for a new link to write more.",
  not_permitted: "Not sent: this link lets you read this conversation, not write in it.",
};

// threadLimited says a new conversation's first message was refused at
// the server's thread limit (507): a place may free up, so it waits for Retry.
function threadLimited() {
  const kept = files.length ? "Your message and its files are kept" : "Your message is kept";
  notify(`Not sent: this server holds as many conversations as it may, and this one would be new. ${kept}: press Retry later.`, "error", true);
}

els.fresh?.addEventListener("click", () => {
  const ok = confirm(
    "Start a new conversation?\n\nThis browser will forget the current one; it cannot be opened here again.",
  );
  if (!ok) return;
  clearInterval(countdown);
  countdown = null;
  pending = null;
  els.text.value = "";
  updateCount();
  updateSend();
  notify("");
  chat.newConversation();
  els.text.focus();
});

// ---- a participant's page ----

// The sentences a participant reads when the server refuses their link,
// and when the page has no link to use; a device's page says its own.
const endedDevice = {
  token_revoked: "This device was revoked: it no longer opens this conversation. Open a new device link from the browser that started it.",
  removed: "This conversation was removed from the server, so this device no longer opens it.",
  token_expired: "This device's link expired: open a new device link from the browser that started this conversation.",
  unauthorized: "This device link is not valid: open a new device link from the browser that started this conversation.",
  malformed: "This device link is incomplete: open the whole link, or scan its QR code again.",
  missing: "This page opens a conversation on one of its owner's devices: open the device link made for it (Open on another device).",
  unkept: "This browser refused to store the device link (site storage is blocked), so it cannot open the conversation here.",
};
const ended = {
  token_revoked: "This link was revoked by the conversation's owner.",
  removed: "This conversation was removed from the server, so this link no longer opens it.",
  token_expired: "This link expired: ask the owner for a new one.",
  unauthorized: "This link is not valid: ask the conversation's owner for a new one.",
  malformed: "This link is incomplete: open the whole link the conversation's owner sent you.",
  missing: "This page opens a conversation shared with you: open the link the conversation's owner sent you.",
};

// endWith puts the page in its final state: the conversation goes, the
// reason is said, nothing more is asked of the server.
function endWith(code) {
  clearInterval(countdown);
  countdown = null;
  shown.clear();
  els.log.replaceChildren();
  els.log.removeAttribute("aria-busy");
  for (const e of [els.empty, els.waiting, els.jump, els.form, els.readonly, els.others, els.scroller, $("people-open"), $("devices-open"), els.fresh, $("notify"), $("notify-note")]) {
    if (e) e.hidden = true;
  }
  $("people")?.open && $("people").close();
  document.body.dataset.ended = code;
  els.status.dataset.state = "ended";
  setStatusWords(states.ended);
  els.status.title = states.ended;
  const words = devicePage ? endedDevice : ended;
  els.endedText.textContent = words[code] || words.unauthorized;
  els.ended.hidden = false;
  els.ended.focus();
}

chat.addEventListener("ended", (e) => endWith(e.detail.code));

// applyWho shows who the participant is ("Alex · commenter") and who else
// is in the conversation, and what they may do.
function applyWho(w) {
  const p = w.participant;
  if (!p) return;
  ctx.me = `p:${p.id}`;
  ctx.canReact = p.role === "commenter";
  setNames(w.participants); // over what is known: a name learned from a message stays
  // Each name is drawn in its own <bdi>: a right-to-left name (or one
  // stored with bidi controls) never reorders the text around it.
  const bdi = (name) => el("bdi", { textContent: name });
  els.me.replaceChildren(el("bdi", { className: "me-name", textContent: p.name }), el("span", { className: "me-role", textContent: ` · ${p.role}` }));
  els.me.title = `${p.name} · ${p.role}`; // the bar cuts a long name
  els.me.hidden = false;
  document.title = `${p.name} · chatrelay`;
  const others = (w.participants || []).filter((o) => o.id !== p.id).flatMap((o) => [", ", bdi(o.name), ` (${o.role})`]);
  els.others.replaceChildren("Also here: the owner, hermes", ...others, ".");
  els.others.hidden = false;
  const writes = p.role === "commenter";
  els.form.hidden = !writes;
  els.readonly.hidden = writes;
}

function refreshWho() {
  return chat.whoami().then(applyWho, () => {});
}

// join reads who the link is for (retrying while the server is away),
// then connects. A refused link ends the page (the "ended" event).
async function join() {
  if (link.problem) {
    endWith(link.problem);
    return;
  }
  const who = await whoamiRetrying();
  if (!who) return;
  applyWho(who);
  chat.start();
  if (!els.form.hidden) els.text.focus();
}

// whoamiRetrying reads whoami, retrying while the server is away (the
// status says offline meanwhile); null once the page has ended.
async function whoamiRetrying() {
  for (let fails = 0; ; fails++) {
    try {
      return await chat.whoami();
    } catch (err) {
      if (chat.ended) return null;
      els.status.dataset.state = "offline";
      els.statusText.textContent = states.offline;
      els.status.title = states.offline;
      await new Promise((r) => setTimeout(r, Math.min(30000, 500 * 2 ** fails)));
    }
  }
}

// ---- a claim link (chatrelay open): <base>/#t=<token> ----

// t-link.js has adopted a claim link's token before the page ran (or
// refused a malformed one); a claim link opened in a tab already showing
// the page changes only the fragment, and is adopted here.
const malformedClaim = "This link's conversation token is malformed (it is not 64 hex characters), so it was ignored: this page keeps its own conversation. Ask for the link again.";
function claimFromHash() {
  if (location.hash.slice(0, 3) !== "#t=") return;
  const token = location.hash.slice(3);
  history.replaceState(history.state, "", location.pathname + location.search);
  if (!/^[0-9a-f]{64}$/.test(token)) notify(malformedClaim, "error");
  else claim(token);
}

// claim adopts a claim link's token once the person says yes, if this
// browser holds another conversation: any page on the web can open a
// link, and adopting it unasked would make the browser forget its own
// conversation for good (the host keeps no copy of its token) and write
// to the thread of whoever made the link.
function claim(token) {
  if (token !== chat.token) {
    const ok = confirm(
      "Open the conversation of this link?\n\nThis browser will forget its current conversation; it cannot be opened here again. Say no if you did not expect a link from hermes.",
    );
    if (!ok) {
      notify("The link was not opened: this page keeps its own conversation.", "info");
      return;
    }
  }
  chat.adopt(token);
  notify("");
}

// ---- a device's page (/d) ----

// myDevice is this page's device id, once whoami said it.
let myDevice = "";

// startDevice checks the device's link, learns which device it is
// (retrying while the server is away), then connects as the owner. A
// refused link ends the page (the "ended" event).
async function startDevice() {
  if (els.fresh) els.fresh.hidden = true; // a device opens its owner's conversation, not a new one
  if (deviceLink.problem) {
    endWith(deviceLink.problem);
    return;
  }
  setupPeople(chat, (list) => setNames(list));
  setupDevices(chat, () => myDevice);
  const who = await whoamiRetrying();
  if (!who) return;
  myDevice = who.device?.id || "";
  if (declinedDevice) notify("The link was not opened: this device keeps its own conversation.", "info");
  chat.start();
  els.text.focus();
}

// A share or device link opened in a tab that already shows its page
// changes only the fragment, and the page is not loaded again: load it, so
// that p-link.js or t-link.js take the token out of the address bar and
// the tab's history and keep it, as on a first load (a person whose link
// was revoked pastes the new one into the same tab).
if (participantPage || devicePage) {
  window.addEventListener("hashchange", () => location.hash.length > 1 && location.reload());
}

updateCount();
setupPush(chat, { button: $("notify"), note: $("notify-note") });
if (participantPage) {
  join();
} else if (devicePage) {
  startDevice();
} else {
  setupPeople(chat, (list) => setNames(list));
  setupDevices(chat);
  const claimed = document.documentElement.dataset.claim;
  if (claimed === "malformed") notify(malformedClaim, "error");
  if (claimed === "unkept") notify("This browser refused to store the link's conversation token (site storage is blocked), so the link could not be opened here.", "error");
  if (claimed === "pending") {
    const token = window.chatrelayClaim;
    delete window.chatrelayClaim;
    claim(token);
  }
  window.addEventListener("hashchange", claimFromHash);
  chat.start();
  els.text.focus();
}
