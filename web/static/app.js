// app.js: the page. It draws what the ChatClient of chat.js reports (with
// the builders of view.js) and sends what the person writes, answers and
// reacts. Text is always set with textContent, never parsed as HTML.

import { ChatClient, MAX_CHARS, countChars } from "./chat.js";
import { ME, messageItem, moveInBar, refreshInteraction, tick, updateItem } from "./view.js";

const $ = (id) => document.getElementById(id);
const els = {
  status: $("status"),
  statusText: $("status-text"),
  fresh: $("new"),
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
};

const states = {
  connecting: "connecting…",
  ws: "live · WebSocket",
  sse: "live · SSE",
  polling: "polling",
  offline: "offline",
};

const chat = new ChatClient(); // the server is the one that served this page

// busy holds the requests of this page in flight: an interaction's id
// while its answer is sent, "<message id> <emoji>" while a reaction is.
const busy = new Set();
const ctx = { now: () => chat.now(), busy: (key) => busy.has(key) };

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

chat.addEventListener("message", (e) => {
  const { message: m, before } = e.detail;
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
els.scroller.addEventListener("scroll", () => {
  if (nearBottom()) els.jump.hidden = true;
});

chat.addEventListener("status", (e) => {
  const { state, shared } = e.detail;
  if (state !== "connecting" && settling === null && els.log.hasAttribute("aria-busy")) settle();
  els.status.dataset.state = state;
  els.statusText.textContent = states[state] || state;
  els.status.title = shared ? "shared with another tab of this browser" : "";
});

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
  try {
    await chat.respond(ixID, ans); // shows the answered message at once
  } catch (err) {
    // interaction_closed: the card now shows who or what came first
    // (chat.respond showed the message the 409 carried).
    if (err.code === "interaction_closed") {
      error = "Your answer was not taken: this had already closed.";
    } else if (err.status === 0) {
      error = "Not sent: the server could not be reached. Try again.";
    } else if (err.code === "rate_limited") {
      error = `Too many requests; try again in ${Math.ceil(err.retryAfterMs / 1000)} s.`;
    } else {
      error = `Not sent: ${err.message}.`;
    }
  } finally {
    busy.delete(ixID);
    redraw(ixID);
    if (error) cardError(ixID, error);
  }
}

// ---- reactions ----

async function toggleReaction(id, emoji, button) {
  const key = `${id} ${emoji}`;
  if (busy.has(key)) return;
  const m = messageOf(id);
  const mine = (m?.reactions?.[emoji] || []).includes(ME);
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
      notify("Reaction not saved: the server could not be reached.", "error");
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
  if (!ixID) return;
  if (b.dataset.decision) answer(ixID, { decision: b.dataset.decision });
  else if (b.dataset.choice !== undefined) answer(ixID, { value: b.dataset.choice });
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
  if (!text.trim()) {
    notify("Write a message first.", "info");
    return;
  }
  if (!pending || pending.text !== text) pending = { text, clientId: chat.newClientId() };
  const p = pending;
  sending = true;
  updateSend();
  els.form.setAttribute("aria-busy", "true");
  try {
    await chat.send(text, { clientId: p.clientId });
    sent(text);
    toBottom();
  } catch (err) {
    // In every failure the text stays in the composer, with its client_id.
    if (err.status === 0 && chat.messages.some((m) => m.client_id === p.clientId)) {
      sent(text); // the answer was lost, the message is shown: it was stored
    } else if (err.code === "rate_limited") {
      startCountdown(err.retryAfterMs);
    } else if (err.status === 413) {
      const n = countChars(text);
      const why = err.code === "text_too_long" ? `${n} characters, ${n - MAX_CHARS} over the limit` : "too large";
      notify(`Not sent: ${err.message}. Your message is ${why}; shorten it and send again.`);
    } else if (err.status === 0) {
      notify("Not sent: the server could not be reached. Your message is kept.", "error", true);
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

els.fresh.addEventListener("click", () => {
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

updateCount();
chat.start();
els.text.focus();
