// sw.js: the service worker of the page (contract Part 5, Push). It is
// registered by push.js when the person turns "Notify me" on, with the
// prefix root as its scope, and it does two things only:
//
//   push               a push from the server ({type, thread, message,
//                      url}): show it as a notification, unless a focused
//                      page of this browser shows that thread already
//   notificationclick  an action (Approve, Deny, a choice) answers the
//                      interaction through POST api/chat/respond with the
//                      credential that subscribed; a click on the
//                      notification itself opens (or focuses) the thread
//   pushsubscriptionchange  the browser's push service replaced or ended
//                      the subscription: subscribe again (unless the
//                      browser did), give the new subscription to the
//                      server for every thread the old one notified
//                      about, with that thread's credential (POST
//                      api/chat/push), keep the new one's id, then
//                      delete the old one there (DELETE
//                      api/chat/push/{id})
//
// It has no fetch handler: it caches nothing, and every request of the
// page (the API's answers above all) goes to the network as if it were
// not there.
//
// The credential. push.js keeps, per thread, the credential that
// subscribed in IndexedDB ("chatrelay-push", store "threads"): the owner's
// token (sent as X-Chat-Token) or a participant's share token (sent as
// Authorization: Bearer). Turning notifications off deletes it. The worker
// keeps there, in "answered", the interactions it answered itself.
//
// A notification's tag is its interaction's id, so the push that closes
// the interaction (answered, expired, canceled) replaces it: "Approved on
// another device", "Expired", and so on. Replies are tagged by thread.

"use strict";

const DB = "chatrelay-push";
const STORE = "threads";
const ANSWERED = "answered";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => event.waitUntil(pushed(event.data)));

// A click runs clicked, the whole of the answer: the worker lives until
// it settles.
self.addEventListener("notificationclick", (event) => {
  const done = clicked(event.notification, event.action);
  event.waitUntil(done);
});

self.addEventListener("pushsubscriptionchange", (event) => event.waitUntil(resubscribe(event)));

// ---- the store of credentials ----

function openDB() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => {
      req.result.createObjectStore(STORE, { keyPath: "thread" });
      req.result.createObjectStore(ANSWERED, { keyPath: "ix" });
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function inStore(store, mode, fn) {
  const db = await openDB();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(store, mode);
      const req = fn(tx.objectStore(store));
      tx.oncomplete = () => resolve(req.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

// recordOf is what push.js keeps for thread: {thread, scheme, token,
// push, endpoint}, or null.
const recordOf = (thread) => inStore(STORE, "readonly", (s) => s.get(String(thread))).then((r) => r || null);
const allRecords = () => inStore(STORE, "readonly", (s) => s.getAll()).then((r) => r || []);
const putRecord = (rec) => inStore(STORE, "readwrite", (s) => s.put(rec));

// The interactions this worker answered itself, for a day (so that the
// closing push does not say "on another device"). Kept here rather than
// read back from the notification: getNotifications while Chromium is
// still drawing another notification can lose that one (seen in the
// browser tests).
const DAY = 86400000;
function answeredHere(ix) {
  return inStore(ANSWERED, "readonly", (s) => s.get(ix)).then((r) => !!r && Date.now() - r.at < DAY, () => false);
}
function noteAnswered(ix) {
  return inStore(ANSWERED, "readwrite", (s) => {
    const req = s.put({ ix, at: Date.now() });
    // Forget the old ones as it goes.
    s.openCursor().onsuccess = (e) => {
      const c = e.target.result;
      if (!c) return;
      if (Date.now() - c.value.at >= DAY) c.delete();
      c.continue();
    };
    return req;
  }).catch(() => {});
}

// ---- push ----

// pushed shows what a push says. A payload that is not the server's
// shape still shows something: a push the user was promised must be
// visible (userVisibleOnly).
async function pushed(data) {
  let p = null;
  try {
    p = data ? data.json() : null;
  } catch {}
  if (!p || typeof p !== "object" || typeof p.thread !== "string") {
    return self.registration.showNotification("chatrelay", { body: "Something new in a conversation." });
  }
  if (await shownInFocus(p)) return;
  const ix = p.type === "interaction_closed" ? p.message?.interaction?.id : "";
  const n = notificationOf(p, !!ix && (await answeredHere(String(ix))));
  if (n) return self.registration.showNotification(n.title, n.options);
}

// shownInFocus reports whether a focused window of this browser shows the
// push's thread: one on the page the push names (its url, without query
// or fragment) that says so when asked (push.js answers "thread?").
async function shownInFocus(p) {
  const page = pathOf(p.url);
  const wins = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const c of wins) {
    if (!c.focused || pathOf(c.url) !== page) continue;
    if ((await ask(c, { type: "chatrelay.thread?" }, 500))?.thread === p.thread) return true;
  }
  return false;
}

function pathOf(u) {
  try {
    const x = new URL(u, self.registration.scope);
    return x.origin + x.pathname;
  } catch {
    return "";
  }
}

// ask posts msg to a window and resolves with its answer, or null after ms.
function ask(client, msg, ms) {
  return new Promise((resolve) => {
    const ch = new MessageChannel();
    const t = setTimeout(() => resolve(null), ms);
    ch.port1.onmessage = (e) => {
      clearTimeout(t);
      resolve(e.data);
    };
    client.postMessage(msg, [ch.port2]);
  });
}

const closedWords = {
  approved: ["Approved", "Approved on another device"],
  denied: ["Denied", "Denied on another device"],
  answered: ["Answered", "Answered on another device"],
  expired: ["Expired: no answer in time", "Expired: no answer in time"],
  canceled: ["Canceled by hermes", "Canceled by hermes"],
};

// titleOf is the title of an interaction's notification, the same while
// it is open and once it closed.
function titleOf(ix) {
  return ix.title || (ix.type === "approval" ? "hermes asks for your approval" : "hermes asks you");
}

// notificationOf is the notification of a push: {title, options}.
function notificationOf(p, here) {
  const m = p.message || {};
  const ix = m.interaction;
  const data = { thread: p.thread, url: p.url || self.registration.scope, type: p.type };
  if (p.type === "interaction" && ix?.id) {
    const title = titleOf(ix);
    const options = {
      tag: ix.id,
      body: ix.prompt || m.text || "",
      requireInteraction: true,
      renotify: true,
      timestamp: m.epoch || Date.now(),
      data: { ...data, ix: ix.id, kind: ix.type, title, choices: [] },
    };
    if (ix.type === "approval") {
      options.actions = [
        { action: "approve", title: "Approve" },
        { action: "deny", title: "Deny" },
      ];
    } else if (ix.type === "input" && Array.isArray(ix.choices) && ix.choices.length >= 1 && ix.choices.length <= 2) {
      options.data.choices = ix.choices.map((c) => String(c.value));
      options.actions = ix.choices.map((c, i) => ({ action: `choice:${i}`, title: String(c.label || c.value) }));
    }
    return { title, options };
  }
  if (p.type === "interaction_closed" && ix?.id) {
    const title = titleOf(ix);
    const words = closedWords[ix.state] || ["Closed", "Closed"];
    let body = words[here ? 0 : 1];
    if (ix.state === "answered" && ix.answer?.value !== undefined) body += `: ${ix.answer.value}`;
    return {
      title,
      options: { tag: ix.id, body, silent: true, data: { ...data, ix: ix.id, closed: ix.state } },
    };
  }
  // A reply (hermes's message or card), or a type this worker does not
  // know yet: said in the thread's one notification.
  const who = m.author_name || (m.author === "hermes" || !m.author ? "hermes" : m.author);
  return {
    title: `${who} wrote`,
    options: { tag: `thread:${p.thread}`, body: m.text || m.card?.title || filesOf(m), renotify: true, timestamp: m.epoch || Date.now(), data },
  };
}

// filesOf names a message's files ("📎 build.log, 📎 shot.png"): the body
// of a message that is only files.
function filesOf(m) {
  return (Array.isArray(m.attachments) ? m.attachments : []).map((a) => `\u{1F4CE} ${a.name}`).join(", ");
}

// ---- clicks ----

// clicked handles a click on notification n: with an action, the answer;
// on the notification itself, the thread's page.
async function clicked(n, action) {
  const d = n.data || {};
  if (!action || !d.ix) {
    n.close();
    return openThread(d);
  }
  let answer = null;
  if (action === "approve" || action === "deny") answer = { decision: action };
  else if (action.startsWith("choice:")) {
    const v = d.choices?.[Number(action.slice(7))];
    if (v !== undefined) answer = { value: v };
  }
  if (!answer) return openThread(d);
  return respond(n, d, answer);
}

// respond answers the interaction of notification n with the credential
// that subscribed, and replaces n with the outcome.
async function respond(n, d, answer) {
  const say = (body, extra = {}) =>
    self.registration.showNotification(d.title || n.title, {
      tag: d.ix,
      body,
      silent: true,
      data: { thread: d.thread, url: d.url, ix: d.ix, ...extra },
    });
  const rec = await recordOf(d.thread).catch(() => null);
  if (!rec?.token) return say("Open the conversation to answer: this device no longer holds its token.");
  const headers = { "Content-Type": "application/json" };
  if (rec.scheme === "owner") headers["X-Chat-Token"] = rec.token;
  else headers.Authorization = `Bearer ${rec.token}`;
  let res, body;
  try {
    res = await fetch(new URL("api/chat/respond", self.registration.scope), {
      method: "POST",
      headers,
      body: JSON.stringify({ interaction_id: d.ix, ...answer }),
      cache: "no-store",
      credentials: "omit",
    });
    body = await res.json().catch(() => null);
  } catch {
    return say("Not sent: the server could not be reached. Open the conversation to answer.");
  }
  if (res.ok && body?.success) {
    const state = body.message?.interaction?.state;
    await noteAnswered(d.ix);
    return say(closedWords[state]?.[0] || "Answered", { closed: state });
  }
  if (res.status === 409 && body?.code === "interaction_closed") {
    const state = body.message?.interaction?.state;
    const how = state === "expired" ? "it expired" : state === "canceled" ? "hermes canceled it" : (closedWords[state]?.[0] || "answered").toLowerCase();
    return say(`Already answered: ${how}.`, { closed: state });
  }
  // Retention dropped the interaction (or its thread) before this answer:
  // nothing can answer it now, so nothing is offered.
  if (res.status === 404 && body?.code === "not_found") {
    return say("Not sent: this request is no longer in the conversation.", { closed: "gone" });
  }
  // A credential the server no longer takes (a revoked or expired device
  // or share link): its page cannot answer either, and the server's words
  // say what to do instead.
  if (res.status === 401 && body?.error) return say(`Not sent: ${body.error.replace(/\.$/, "")}.`);
  return say(`Not sent: ${body?.error || `the server answered ${res.status}`}. Open the conversation to answer.`);
}

// openThread focuses a window on the thread's page, or opens one. A
// participant's page keeps its share token in its tab only
// (sessionStorage), so a new one is opened with the token the worker
// keeps for the thread in its fragment, as the share link has it (never
// sent to a server; p-link.js takes it out of the address bar at once):
// else it would know no link and show nothing.
async function openThread(d) {
  const url = d.url || self.registration.scope;
  const page = pathOf(url);
  const wins = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const w = wins.find((c) => pathOf(c.url) === page);
  if (w && "focus" in w) return w.focus();
  const rec = await recordOf(d.thread).catch(() => null);
  const share = rec?.scheme !== "owner" && /^chp_[A-Za-z0-9_-]{43}$/.test(rec?.token || "");
  if (share && new URL(page).pathname.endsWith("/p") && new URL(page).origin === self.location.origin) {
    return self.clients.openWindow(`${page}#${rec.token}`);
  }
  return self.clients.openWindow(url);
}

// ---- a subscription the browser replaced ----

// api calls the server's route path with the credential of rec.
function api(method, path, rec, body) {
  const headers = {};
  if (rec.scheme === "owner") headers["X-Chat-Token"] = rec.token;
  else headers.Authorization = `Bearer ${rec.token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(new URL(path, self.registration.scope), {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
}

// resubscribe follows a pushsubscriptionchange: the new subscription (the
// event's, or a fresh one with the server's VAPID key) replaces the old
// one on the server for every thread whose record names the old endpoint
// (every thread, if the browser does not say which one it ended). A
// thread whose server refuses keeps its record: the page finds it off
// when next opened and can turn it on again.
async function resubscribe(event) {
  const old = event.oldSubscription || null;
  let sub = event.newSubscription || null;
  if (!sub) {
    let key = old?.options?.applicationServerKey;
    if (!key) {
      const res = await fetch(new URL("api/push/key", self.registration.scope), { cache: "no-store", credentials: "omit" });
      const b64 = (await res.json()).public_key;
      const bin = atob(b64.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((b64.length + 3) % 4));
      key = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    }
    sub = await self.registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
  }
  const json = sub.toJSON();
  const recs = await allRecords();
  for (const rec of recs) {
    if (!rec.token || rec.endpoint === json.endpoint) continue;
    if (old && rec.endpoint !== old.endpoint) continue;
    try {
      const res = await api("POST", "api/chat/push", rec, { subscription: json });
      const body = await res.json().catch(() => null);
      if (!res.ok || !body?.success) continue;
      // The new id kept first: a worker stopped between the two still
      // knows its subscription (the old one, left on the server, ends at
      // its push service's 404 or 410).
      await putRecord({ ...rec, endpoint: json.endpoint, push: body.push.id });
      if (rec.push && rec.push !== body.push.id) await api("DELETE", `api/chat/push/${encodeURIComponent(rec.push)}`, rec).catch(() => {});
    } catch {}
  }
}
