// app.js: the page. It draws what the ChatClient of chat.js reports and
// sends what the person writes. Text is always set with textContent, never
// parsed as HTML.

import { ChatClient, MAX_CHARS, countChars } from "./chat.js";

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
  form: $("composer"),
  text: $("text"),
  count: $("count"),
  send: $("send"),
  notice: $("notice"),
  noticeText: $("notice-text"),
  retry: $("retry"),
};

const authors = { operator: "you", agent: "agent", hermes: "hermes" };
const states = {
  connecting: "connecting…",
  ws: "live · WebSocket",
  sse: "live · SSE",
  polling: "polling",
  offline: "offline",
};

const chat = new ChatClient(); // the server is the one that served this page

// ---- the conversation ----

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const dayFmt = new Intl.DateTimeFormat(undefined, {
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
});
const fullFmt = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });

function when(epoch) {
  const d = new Date(epoch);
  const today = new Date().toDateString() === d.toDateString();
  return { short: (today ? timeFmt : dayFmt).format(d), full: fullFmt.format(d) };
}

function nearBottom() {
  const s = els.scroller;
  return s.scrollHeight - s.scrollTop - s.clientHeight < 48;
}

function toBottom() {
  els.scroller.scrollTop = els.scroller.scrollHeight;
  els.jump.hidden = true;
}

function render(m) {
  const li = document.createElement("li");
  li.className = `msg msg-${authors[m.author] ? m.author : "other"}`;
  li.dataset.id = m.id;
  li.dataset.epoch = m.epoch;

  const meta = document.createElement("div");
  meta.className = "meta";
  const who = document.createElement("span");
  who.className = "author";
  who.textContent = authors[m.author] || String(m.author);
  const t = document.createElement("time");
  const w = when(m.epoch);
  t.dateTime = new Date(m.epoch).toISOString();
  t.textContent = w.short;
  t.title = w.full;
  meta.append(who, " ", t);

  const text = document.createElement("p");
  text.className = "text";
  text.textContent = m.text;

  li.append(meta, text);
  return li;
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
  const stick = nearBottom();
  if (els.log.hasAttribute("aria-busy")) settle();
  els.log.append(render(e.detail.message));
  els.empty.hidden = true;
  // Follow the conversation only if the reader was already at its end;
  // one scrolled up to read is not yanked away, but told.
  if (stick) toBottom();
  else els.jump.hidden = false;
  showWaiting();
});

chat.addEventListener("clear", () => {
  loading();
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

// ---- writing ----

let countdown = null; // the rate-limit timer, while it runs
let sending = false;

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

async function send() {
  const text = els.text.value;
  if (sending || countdown !== null) return;
  if (!text.trim()) {
    notify("Write a message first.", "info");
    return;
  }
  sending = true;
  updateSend();
  els.form.setAttribute("aria-busy", "true");
  try {
    await chat.send(text);
    if (els.text.value === text) els.text.value = "";
    updateCount();
    notify("");
    toBottom();
  } catch (err) {
    // In every failure the text stays in the composer.
    if (err.code === "rate_limited") {
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
