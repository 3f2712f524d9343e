// push.js: the page's "Notify me" switch (contract Part 5, Push). Turned
// on, it asks the browser's permission to notify (only then, never on
// load), registers the service worker sw.js, subscribes through the
// browser's PushManager with the server's VAPID key (GET api/push/key),
// gives the subscription to the server (POST api/chat/push) and keeps, for
// the worker, the credential that subscribed in IndexedDB. Turned off, it
// deletes the server's subscription (DELETE api/chat/push/{id}), forgets
// the credential and, when no other thread of this browser still uses it,
// ends the browser's subscription (PushSubscription.unsubscribe).
//
// The switch is per thread: the browser has one push subscription (one
// endpoint) for this origin, which the server holds once per thread that
// asked. Its state is data-state on the button: "on", "off", "blocked"
// (the browser's permission is denied: only its settings can change that),
// "unsupported" (no service worker, Push API or Notification here, or
// a server with push turned off), "busy" while it works; and aria-checked.
// A sentence under the header says why when it is not simply on or off.

const DB = "chatrelay-push";
const STORE = "threads";
/** How long a PushManager subscription may take before it is given up. */
const SUBSCRIBE_MS = 20000;

// ---- the store the worker reads ----

function openDB() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => {
      req.result.createObjectStore(STORE, { keyPath: "thread" });
      req.result.createObjectStore("answered", { keyPath: "ix" }); // the worker's (sw.js)
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function inStore(mode, fn) {
  const db = await openDB();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const req = fn(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(req?.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

const getRecord = (thread) => inStore("readonly", (s) => s.get(thread)).then((r) => r || null);
const allRecords = () => inStore("readonly", (s) => s.getAll()).then((r) => r || []);
const putRecord = (rec) => inStore("readwrite", (s) => s.put(rec));
const deleteRecord = (thread) => inStore("readwrite", (s) => s.delete(thread));

// ---- helpers ----

/**
 * outranks reports whether the kept record rec is the owner's (its own
 * token, or a device's), which this page's credential must not replace:
 * a participant's page never takes the owner's or a device's, a device's
 * page never the owner's own.
 */
function outranks(rec, chat) {
  if (rec.scheme === "owner") return true;
  return Boolean(chat?.participant) && String(rec.token).startsWith("chd_");
}

function supported() {
  return (
    window.isSecureContext &&
    "serviceWorker" in navigator &&
    "PushManager" in window &&
    "Notification" in window &&
    "indexedDB" in window
  );
}

function keyBytes(b64url) {
  const s = atob(b64url.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((b64url.length + 3) % 4));
  return Uint8Array.from(s, (c) => c.charCodeAt(0));
}

function sameKey(a, b) {
  if (!a || !b) return false;
  const x = new Uint8Array(a);
  return x.length === b.length && x.every((v, i) => v === b[i]);
}

function within(p, ms, what) {
  return Promise.race([
    p,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${ms / 1000} s`)), ms)),
  ]);
}

// activeWorker waits until the registration has an active worker.
async function activeWorker(reg) {
  if (reg.active) return reg;
  const w = reg.installing || reg.waiting;
  if (w) {
    await new Promise((resolve) => {
      const check = () => w.state === "activated" || w.state === "redundant";
      if (check()) resolve();
      else w.addEventListener("statechange", () => check() && resolve());
    });
  }
  return reg;
}

// ---- the switch ----

const words = {
  on: "Notifications on",
  off: "Notify me",
  blocked: "Notifications blocked",
  unsupported: "No notifications here",
  busy: "Notify me…",
};

/**
 * setupPush draws the switch (button, a role="switch" <button>) and its
 * sentence (note) for chat's thread, and answers the worker's question
 * "which thread do you show?".
 */
export function setupPush(chat, { button, note }) {
  const swURL = new URL("sw.js", chat.baseURL);
  let state = "off";
  let thread = "";
  let working = false;

  function show(s, sentence = "") {
    state = s;
    button.dataset.state = s;
    button.setAttribute("aria-checked", s === "on" ? "true" : "false");
    button.setAttribute("aria-disabled", s === "unsupported" || s === "busy" ? "true" : "false");
    // The visible label stays "Notify me", the accessible name: the state
    // is aria-checked, the bell, and this tooltip.
    button.title = words[s];
    note.textContent = sentence;
    note.hidden = !sentence;
  }

  function fail(sentence) {
    show(Notification.permission === "denied" ? "blocked" : "off", sentence);
  }

  // refresh reads the state for the current thread: on only if this
  // browser is subscribed, keeps the thread's credential, and the server
  // still holds its subscription.
  async function refresh() {
    if (!chat.thread || working || state === "unsupported") return;
    if (Notification.permission === "denied") return show("blocked");
    let rec = null;
    try {
      rec = await getRecord(thread);
    } catch {}
    if (!rec?.push) return show("off");
    // A record another page's credential made (the owner's, seen from a
    // device's page of the same thread in the same browser) is not this
    // page's: this page is not subscribed, and leaves the record be.
    if (rec.token !== chat.credential.token) return show("off");
    const reg = await navigator.serviceWorker.getRegistration(swURL.href).catch(() => null);
    const sub = await reg?.pushManager.getSubscription().catch(() => null);
    const held = sub && sub.endpoint === rec.endpoint && (await chat.pushSubscriptions().then((l) => l.some((x) => x.id === rec.push), () => true));
    if (thread !== chat.thread) return;
    if (held) return show("on");
    await deleteRecord(thread).catch(() => {});
    show("off");
  }

  async function turnOn() {
    // The browser has one endpoint, which the server holds once per
    // thread: a share link's page (or a device's) opened in the browser
    // that gets this conversation's notifications as its owner would take
    // them over, and the owner would lose its approvals. It leaves them be.
    const kept = await getRecord(chat.thread).catch(() => null);
    if (kept && kept.token !== chat.credential.token && outranks(kept, chat)) {
      return show("off", "This browser already gets this conversation's notifications as its owner: this page leaves them on, and adds none of its own.");
    }
    if (Notification.permission === "denied") {
      return show("blocked", "Notifications are blocked for this site: allow them in the browser's site settings, then press again.");
    }
    const perm = await Notification.requestPermission();
    if (perm !== "granted") {
      return perm === "denied"
        ? show("blocked", "Notifications are blocked for this site: allow them in the browser's site settings, then press again.")
        : show("off", "Notifications were not allowed: press again to be asked again.");
    }
    let key;
    try {
      key = keyBytes(await chat.pushKey());
    } catch (err) {
      if (err.code === "push_disabled") {
        why = "This server does not send notifications (push is turned off).";
        return show("unsupported", why);
      }
      return fail(`Not turned on: ${err.status === 0 ? "the server could not be reached" : err.message}.`);
    }
    let sub;
    try {
      const reg = await activeWorker(await navigator.serviceWorker.register(swURL.href, { scope: chat.baseURL }));
      sub = await reg.pushManager.getSubscription();
      if (sub && !sameKey(sub.options?.applicationServerKey, key)) {
        await sub.unsubscribe(); // made with an older key (chatrelay push rotate-key)
        sub = null;
      }
      sub ||= await within(reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }), SUBSCRIBE_MS, "the browser's push service");
    } catch (err) {
      return fail(`This browser could not subscribe to notifications (${err.name === "Error" ? err.message : `${err.name}: ${err.message}`}).`);
    }
    const t = chat.thread;
    const json = sub.toJSON();
    // The worker may be asked to answer before the server's answer comes
    // back: the credential is kept first.
    await putRecord({ thread: t, ...chat.credential, endpoint: json.endpoint, push: "" });
    try {
      const p = await chat.pushSubscribe(json);
      await putRecord({ thread: t, ...chat.credential, endpoint: json.endpoint, push: p.id });
    } catch (err) {
      await deleteRecord(t).catch(() => {});
      return fail(`Not turned on: ${err.status === 0 ? "the server could not be reached" : err.message}.`);
    }
    show("on");
  }

  async function turnOff() {
    const t = chat.thread;
    const rec = await getRecord(t).catch(() => null);
    if (rec?.push) {
      try {
        await chat.pushUnsubscribe(rec.push);
      } catch (err) {
        if (err.code !== "not_found") {
          return show("on", `Still on: ${err.status === 0 ? "the server could not be reached" : err.message}.`);
        }
      }
    }
    await deleteRecord(t).catch(() => {});
    // The browser's subscription goes when no other thread uses it.
    const reg = await navigator.serviceWorker.getRegistration(swURL.href).catch(() => null);
    const sub = await reg?.pushManager.getSubscription().catch(() => null);
    const others = await allRecords().catch(() => []);
    if (sub && !others.some((r) => r.endpoint === sub.endpoint)) await sub.unsubscribe().catch(() => {});
    show("off");
  }

  const cannot = "This browser cannot show notifications for this page: it needs a service worker, the Push API and a secure address (https, or localhost).";
  let why = supported() ? "" : cannot; // what "unsupported" means here

  button.addEventListener("click", async () => {
    if (working) return;
    if (state === "unsupported") return show("unsupported", why);
    if (!chat.thread) return;
    working = true;
    const was = state;
    show("busy");
    try {
      if (was === "on") await turnOff();
      else await turnOn();
    } catch (err) {
      fail(`Something went wrong: ${err.message}.`);
    } finally {
      working = false;
    }
  });

  // The worker asks, before it shows a push, whether this page shows the
  // push's thread (then the page itself is the notification).
  navigator.serviceWorker?.addEventListener("message", (e) => {
    if (e.data?.type === "chatrelay.thread?" && e.ports[0]) {
      e.ports[0].postMessage({ thread: document.visibilityState === "visible" ? chat.thread : "" });
    }
  });
  navigator.serviceWorker?.startMessages();

  show(supported() ? "off" : "unsupported");
  // A conversation this browser no longer holds (the owner's page started
  // a new one, or adopted a claim link: the old token is gone from it)
  // notifies no more: its subscription is deleted with the old token,
  // which is then forgotten here too. Only the owner's own page leaves
  // conversations: a participant's or a device's page (a share or device
  // link opened in the owner's browser) holds its own token beside the
  // owner's, which it never drops.
  async function forgetOthers() {
    if (chat.participant || chat.device) return;
    const mine = chat.credential.token;
    for (const rec of await allRecords().catch(() => [])) {
      if (rec.scheme !== "owner" || rec.token === mine) continue;
      if (rec.push) {
        await fetch(new URL(`api/chat/push/${encodeURIComponent(rec.push)}`, chat.baseURL), {
          method: "DELETE",
          headers: { "X-Chat-Token": rec.token },
          cache: "no-store",
        }).catch(() => {});
      }
      await deleteRecord(rec.thread).catch(() => {});
    }
    const reg = await navigator.serviceWorker.getRegistration(swURL.href).catch(() => null);
    const sub = await reg?.pushManager.getSubscription().catch(() => null);
    const left = await allRecords().catch(() => []);
    if (sub && !left.some((r) => r.endpoint === sub.endpoint)) await sub.unsubscribe().catch(() => {});
  }

  const again = () => {
    if (!chat.thread || chat.thread === thread) return;
    thread = chat.thread;
    (state === "unsupported" ? Promise.resolve() : forgetOthers()).then(refresh);
  };
  chat.addEventListener("status", again);
  chat.addEventListener("title", again);
}
