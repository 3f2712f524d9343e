// chat.js: the chatrelay client, one ES module with no dependencies.
//
// A ChatClient keeps one conversation (one token, so one thread) in sync
// with a chatrelay server and tells its page what changed through events:
//
//   "message"   detail {message}   a new message; oldest first, each exactly once
//   "clear"                        forget every shown message (new conversation, reset)
//   "awaiting"  detail {awaiting}  true while the last message waits for hermes
//   "status"    detail {state, shared}
//               state is "connecting", "ws", "sse", "polling" or "offline";
//               shared is true when another tab holds the connection
//
//   import { ChatClient } from "https://chat.example.com/chat.js";
//   const chat = new ChatClient();   // the server is where chat.js came from
//   chat.addEventListener("message", (e) => show(e.detail.message));
//   chat.start();
//   await chat.send("hello");        // throws a ChatError when not stored
//
// Identity. The token (32 random bytes as 64 lowercase hex) is made here
// with crypto.getRandomValues and kept in localStorage. It travels only in
// the X-Chat-Token header, never in a URL: streams are opened with a
// short-lived, read-only ticket instead.
//
// The live connection climbs down a ladder: a WebSocket with a ticket; if
// that cannot open, Server-Sent Events with a ticket; if neither can, the
// poll route every few seconds, trying the ladder again now and then.
// Reconnects wait a jittered, growing delay, so a server restart does not
// bring every browser back in the same instant. Every transport resumes
// from the cursor (the newest epoch shown) and a message is shown only if
// its epoch is above it, so nothing is shown twice.
//
// Tabs. All tabs of one browser that show the same conversation elect a
// leader with the Web Locks API; only the leader connects, and it hands
// every message to the other tabs over a BroadcastChannel. A browser thus
// holds one stream however many tabs are open (HTTP/1.1 allows only six
// connections per origin). When the leader tab closes, another takes over.

/** The longest message the server accepts, in Unicode code points. */
export const MAX_CHARS = 4000;

const TOKEN = /^[0-9a-f]{64}$/;

const defaults = {
  baseURL: undefined, // the server, with its prefix; defaults to where chat.js was loaded from
  storage: undefined, // defaults to localStorage
  storageKey: "chatrelay.token",
  kind: "operator", // the author of send(); "agent" for an in-page AI
  transports: ["ws", "sse", "poll"], // the rungs of the ladder, in order
  share: true, // one connection per browser, shared by its tabs
  pollMs: 3000, // poll interval of a visible tab
  hiddenPollMs: 15000, // poll interval of a hidden tab
  maxPollMs: 60000, // longest poll interval while polls fail
  backoffMs: 500, // first reconnect delay; doubles, with jitter
  maxBackoffMs: 30000,
  climbMs: 4000, // first try to leave polling for a live transport; doubles
  maxClimbMs: 30000,
  connectTimeoutMs: 10000, // a stream that is not ready by then has failed
  requestTimeoutMs: 15000,
  keep: 500, // messages kept in memory
};

/** countChars counts code points, as the server does. */
export function countChars(text) {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** makeToken returns a new random token: 32 bytes as 64 lowercase hex. */
export function makeToken() {
  const b = new Uint8Array(32);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** A ChatError is a request the server refused or never answered. */
export class ChatError extends Error {
  constructor(status, body, retryAfterMs) {
    super(body?.error || (status ? `HTTP ${status}` : "the server could not be reached"));
    this.name = "ChatError";
    this.status = status; // 0: no answer (network down, or refused by CORS)
    this.code = body?.code || (status ? `http_${status}` : "network");
    this.retryable = status === 0 || body?.retryable === true;
    this.retryAfterMs = retryAfterMs || 0; // for rate_limited
  }
}

// jitter is the n-th delay of an exponential backoff: base·2ⁿ capped at
// max, then a random point in its upper half.
function jitter(base, n, max) {
  const d = Math.min(max, base * 2 ** Math.min(n, 20));
  return d / 2 + (Math.random() * d) / 2;
}

export class ChatClient extends EventTarget {
  #o;
  #base;
  #token = "";
  #run = null; // the current start(): {ac, wakers, leader}
  #channel = null;
  #ticket = null; // {ticket, expiresAt}
  #status = "offline";
  #shared = false;
  #loaded = false; // the history has been read once

  /** Messages shown, oldest first. */
  messages = [];
  /** The epoch of the newest message shown. */
  cursor = 0;
  /** Whether the last message still waits for a reply from hermes. */
  awaiting = false;
  /** The thread, as the server names it (known after the first answer). */
  thread = "";

  constructor(options = {}) {
    super();
    this.#o = { ...defaults, ...options };
    const base = this.#o.baseURL
      ? new URL(this.#o.baseURL, globalThis.document?.baseURI)
      : new URL(".", import.meta.url);
    if (!base.pathname.endsWith("/")) base.pathname += "/";
    base.search = "";
    base.hash = "";
    this.#base = base;
  }

  /** The server's base URL, ending in "/". */
  get baseURL() {
    return this.#base.href;
  }
  /** The current state: "connecting", "ws", "sse", "polling" or "offline". */
  get status() {
    return this.#status;
  }
  /** Whether another tab holds the live connection for this one. */
  get shared() {
    return this.#shared;
  }
  get #storage() {
    return this.#o.storage ?? globalThis.localStorage;
  }

  /** The identity; made and stored on first use. */
  get token() {
    if (this.#token) return this.#token;
    let t = null;
    try {
      t = this.#storage.getItem(this.#o.storageKey);
    } catch {}
    if (!t || !TOKEN.test(t)) {
      t = makeToken();
      try {
        this.#storage.setItem(this.#o.storageKey, t);
      } catch {}
    }
    return (this.#token = t);
  }

  /** start connects; the events above follow. */
  start() {
    if (this.#run) return;
    // Everything a run owns: stop() ends it, start() makes a new one.
    // catching is its poll in flight; again asks that poll to run once more.
    const run = { ac: new AbortController(), wakers: new Set(), leader: false, catching: null, again: false };
    this.#run = run;
    const token = this.token;
    const signal = run.ac.signal;
    globalThis.addEventListener?.("storage", (e) => this.#onStorage(e), { signal });
    globalThis.addEventListener?.("online", () => this.#wake(), { signal });
    globalThis.document?.addEventListener(
      "visibilitychange",
      () => document.hidden || this.#wake(),
      { signal },
    );
    this.#setStatus("connecting");

    const name = `chatrelay ${this.#base.href} ${token.slice(0, 16)}`;
    const share = this.#o.share && globalThis.BroadcastChannel && globalThis.navigator?.locks;
    if (!share) {
      this.#lead(run);
      return;
    }
    this.#channel = new BroadcastChannel(name);
    this.#channel.onmessage = (e) => this.#onShared(run, e.data);
    this.#channel.postMessage({ type: "hello" });
    this.#follow(run);
    navigator.locks
      .request(name, { signal }, () => this.#lead(run))
      .catch(() => {}); // aborted by stop()
  }

  /** stop closes the connection; start() opens it again. */
  stop() {
    const run = this.#run;
    if (!run) return;
    this.#run = null;
    run.ac.abort();
    for (const w of [...run.wakers]) w();
    this.#channel?.close();
    this.#channel = null;
    this.#ticket = null;
    this.#setStatus("offline");
  }

  /** newConversation forgets this conversation and starts a new one. */
  newConversation() {
    const t = makeToken();
    try {
      this.#storage.setItem(this.#o.storageKey, t);
    } catch {}
    this.#switchTo(t);
  }

  /**
   * send stores text as a message by kind ("operator" unless the client was
   * made with another). It resolves with the server's 201 answer; the message
   * itself arrives as a "message" event, like every other. It throws a
   * ChatError: status 413 (text_too_long), 429 (rate_limited, with
   * retryAfterMs), 0 (no answer), and so on.
   */
  async send(text, kind = this.#o.kind) {
    const answer = await this.#request("POST", "api/chat/post", null, { text, kind });
    const run = this.#run;
    if (run?.leader) {
      if (this.#status === "polling" || this.#status === "offline") this.#wake();
    } else if (run) {
      this.#channel?.postMessage({ type: "poke" });
    }
    return answer;
  }

  // ---- the leader: the ladder ----

  async #lead(run) {
    if (!this.#alive(run)) return;
    run.leader = true;
    this.#shared = false;
    this.#setStatus("connecting");
    // The history read that start() began saves the stream a backlog.
    await run.catching?.catch(() => {});
    const o = this.#o;
    let fails = 0;
    let climbs = 0;
    while (this.#alive(run)) {
      const push = await this.#pushable(run);
      if (!this.#alive(run)) break;
      if (push === null) {
        // The server did not answer: wait, then try again from the top.
        this.#setStatus("offline");
        await this.#sleep(run, jitter(o.backoffMs, fails++, o.maxBackoffMs));
        continue;
      }
      let r = null;
      for (const kind of ["ws", "sse"]) {
        if (!push || !o.transports.includes(kind) || !this.#alive(run)) continue;
        r = await this.#attempt(run, kind);
        if (r.ready) break;
      }
      if (!this.#alive(run)) break;
      if (r?.ready) {
        // A live connection ended: come back after a jittered delay. One
        // that lasted a while starts the backoff over.
        climbs = 0;
        if (r.lived > 30000) fails = 0;
        this.#setStatus("connecting");
        await this.#sleep(run, jitter(o.backoffMs, fails++, o.maxBackoffMs));
        continue;
      }
      if (!o.transports.includes("poll")) {
        this.#setStatus("offline");
        await this.#sleep(run, jitter(o.backoffMs, fails++, o.maxBackoffMs));
        continue;
      }
      fails = 0;
      await this.#pollUntil(run, Date.now() + jitter(o.climbMs, climbs++, o.maxClimbMs));
    }
  }

  // pushable tells whether the server offers streams: true, false (an old
  // server without tickets), or null (no answer).
  async #pushable(run) {
    if (this.#ticket && this.#ticket.expiresAt - Date.now() > 60000) return true;
    try {
      await this.#freshTicket();
      return true;
    } catch (e) {
      if (!this.#alive(run)) return null;
      if (e.status === 0 || e.status >= 500 || e.status === 429) return null;
      return false;
    }
  }

  async #freshTicket() {
    const t = await this.#request("POST", "api/chat/ticket");
    this.thread = t.thread || this.thread;
    this.#ticket = { ticket: t.ticket, expiresAt: Number(t.expires_at) || 0 };
    return this.#ticket;
  }

  // attempt opens one transport and resolves when it ends. A ticket that
  // was reused and fails (it may have expired) is replaced once.
  async #attempt(run, kind) {
    const open = (t) => (kind === "ws" ? this.#ws(run, t.ticket) : this.#sse(run, t.ticket));
    let fresh = false;
    try {
      if (!this.#ticket || this.#ticket.expiresAt - Date.now() < 60000) {
        await this.#freshTicket();
        fresh = true;
      }
      let r = await open(this.#ticket);
      if (!r.ready && !fresh && this.#alive(run)) {
        await this.#freshTicket();
        r = await open(this.#ticket);
      }
      if (!r.ready) this.#ticket = null;
      return r;
    } catch {
      this.#ticket = null;
      return { ready: false, lived: 0 };
    }
  }

  // ws runs one WebSocket until it closes.
  #ws(run, ticket) {
    return this.#stream(run, (on) => {
      const u = this.#url("api/chat/ws", { ticket, since: this.cursor });
      u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
      const ws = new WebSocket(u);
      ws.onmessage = (e) => {
        let f;
        try {
          f = JSON.parse(e.data);
        } catch {
          return;
        }
        if (f.type === "ready") on.ready(f, "ws");
        else if (f.type === "message") this.#accept(f.message);
        else if (f.type === "reset") this.#reset();
      };
      ws.onclose = on.end;
      return () => ws.close(1000);
    });
  }

  // sse runs one EventSource until its first error. It is closed then,
  // rather than left to reconnect by itself, so that every reconnect
  // gets the jittered backoff, a fresh ticket when the old one expired,
  // and the cursor as ?since=.
  #sse(run, ticket) {
    return this.#stream(run, (on) => {
      const es = new EventSource(this.#url("api/chat/stream", { ticket, since: this.cursor }));
      const parse = (fn) => (e) => {
        try {
          fn(JSON.parse(e.data));
        } catch {}
      };
      es.addEventListener("ready", parse((f) => on.ready(f, "sse")));
      es.addEventListener("message", parse((m) => this.#accept(m)));
      es.addEventListener("reset", () => this.#reset());
      es.onerror = on.end;
      return () => es.close();
    });
  }

  // stream runs a transport opened by open(on) until on.end is called, the
  // run stops, or it is not ready in time. It resolves {ready, lived}.
  #stream(run, open) {
    return new Promise((resolve) => {
      let ready = false;
      let since = 0;
      let close = null;
      let timer = null;
      const end = () => {
        if (!close) return;
        const c = close;
        close = null;
        clearTimeout(timer);
        run.ac.signal.removeEventListener("abort", end);
        c();
        resolve({ ready, lived: ready ? Date.now() - since : 0 });
      };
      const on = {
        ready: (f, state) => {
          if (!close) return;
          ready = true;
          since = Date.now();
          clearTimeout(timer);
          this.#onReady(f);
          this.#setStatus(state);
        },
        end,
      };
      close = open(on);
      timer = setTimeout(() => ready || end(), this.#o.connectTimeoutMs);
      run.ac.signal.addEventListener("abort", end);
    });
  }

  #onReady(f) {
    if (f.thread) this.thread = f.thread;
    // With no backlog to come, the server's word on awaiting is current;
    // otherwise the backlog's last message decides it.
    if (Number(f.cursor) === this.cursor) this.#setAwaiting(!!f.awaiting);
  }

  // pollUntil polls until the time to climb comes (or the run stops).
  async #pollUntil(run, climbAt) {
    const o = this.#o;
    let fails = 0;
    while (this.#alive(run)) {
      try {
        await this.#catchUp(run);
        fails = 0;
        this.#setStatus("polling");
      } catch {
        fails++;
        this.#setStatus("offline");
      }
      if (!this.#alive(run)) return;
      const hidden = globalThis.document?.hidden;
      if (Date.now() >= climbAt && !hidden) return;
      const d = fails ? jitter(o.pollMs, fails, o.maxPollMs) : hidden ? o.hiddenPollMs : o.pollMs;
      await this.#sleep(run, d);
    }
  }

  // catchUp polls from the cursor. Calls made while a poll is in flight
  // share it and make it run once more, so none is lost.
  #catchUp(run) {
    if (run.catching) {
      run.again = true;
      return run.catching;
    }
    const once = async () => {
      do {
        run.again = false;
        const since = this.cursor;
        const page = await this.#request("GET", "api/chat/poll", { since });
        if (!this.#alive(run)) return;
        this.thread = page.thread || this.thread;
        for (const m of page.messages || []) this.#accept(m);
        if (Number(page.cursor) === this.cursor) this.#setAwaiting(!!page.awaiting);
        this.#loaded = true;
      } while (run.again && this.#alive(run));
    };
    run.catching = once().finally(() => (run.catching = null));
    return run.catching;
  }

  // ---- the followers ----

  // follow reads the history once (retrying while the server is away), so
  // a tab that is not the leader has something to show.
  async #follow(run) {
    for (let fails = 0; this.#alive(run) && !this.#loaded; fails++) {
      try {
        await this.#catchUp(run);
        return;
      } catch {
        await this.#sleep(run, jitter(this.#o.backoffMs * 4, fails, this.#o.maxBackoffMs));
      }
    }
  }

  #onShared(run, d) {
    if (!this.#alive(run) || !d) return;
    const leader = run.leader;
    switch (d.type) {
      case "hello":
        if (leader) this.#broadcast({ type: "status", state: this.#status });
        break;
      case "status":
        if (!leader) {
          this.#shared = true;
          this.#setStatus(d.state);
        }
        break;
      case "message":
        if (leader || !d.message || !(d.message.epoch > this.cursor)) break;
        // prev is the leader's cursor before this message: above ours
        // means we missed some, so read them instead of skipping them.
        if (!this.#loaded || d.prev > this.cursor) this.#catchUp(run).catch(() => {});
        else this.#accept(d.message);
        break;
      case "reset":
        if (!leader) {
          this.#clear();
          this.#catchUp(run).catch(() => {});
        }
        break;
      case "poke":
        if (leader) this.#wake();
        break;
    }
  }

  #broadcast(m) {
    try {
      this.#channel?.postMessage(m);
    } catch {}
  }

  // ---- state ----

  #accept(m) {
    if (!m || typeof m.epoch !== "number" || !(m.epoch > this.cursor)) return;
    const prev = this.cursor;
    this.cursor = m.epoch;
    this.messages.push(m);
    if (this.messages.length > this.#o.keep) this.messages.splice(0, this.messages.length - this.#o.keep);
    this.dispatchEvent(new CustomEvent("message", { detail: { message: m } }));
    this.#setAwaiting(m.author !== "hermes");
    if (this.#run?.leader) this.#broadcast({ type: "message", message: m, prev });
  }

  // reset: the server dropped messages after our cursor (retention), so
  // what is shown has a hole. The retained backlog follows; show it alone.
  #reset() {
    this.messages = [];
    this.dispatchEvent(new Event("clear"));
    if (this.#run?.leader) this.#broadcast({ type: "reset" });
  }

  #clear() {
    this.messages = [];
    this.cursor = 0;
    this.#loaded = false;
    this.dispatchEvent(new Event("clear"));
    this.#setAwaiting(false);
  }

  #setAwaiting(v) {
    if (this.awaiting === v) return;
    this.awaiting = v;
    this.dispatchEvent(new CustomEvent("awaiting", { detail: { awaiting: v } }));
  }

  #setStatus(state) {
    const shared = !this.#run?.leader && this.#shared && state !== "offline";
    if (this.#status === state && this.#sharedShown === shared) return;
    this.#status = state;
    this.#sharedShown = shared;
    this.dispatchEvent(new CustomEvent("status", { detail: { state, shared } }));
    if (this.#run?.leader) this.#broadcast({ type: "status", state });
  }
  #sharedShown = false;

  #onStorage(e) {
    if (e.key !== this.#o.storageKey || !e.newValue || e.newValue === this.#token) return;
    if (TOKEN.test(e.newValue)) this.#switchTo(e.newValue); // "New conversation" in another tab
  }

  #switchTo(token) {
    this.stop();
    this.#token = token;
    this.thread = "";
    this.#clear();
    this.start();
  }

  // ---- plumbing ----

  #alive(run) {
    return this.#run === run;
  }

  // sleep waits ms, or until woken (a post, the tab shown, the network
  // back) or stopped.
  #sleep(run, ms) {
    return new Promise((resolve) => {
      if (!this.#alive(run)) return resolve();
      const done = () => {
        clearTimeout(t);
        run.wakers.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      run.wakers.add(done);
    });
  }

  #wake() {
    for (const w of [...(this.#run?.wakers ?? [])]) w();
  }

  #url(path, params) {
    const u = new URL(path, this.#base);
    for (const [k, v] of Object.entries(params || {})) u.searchParams.set(k, String(v));
    return u;
  }

  async #request(method, path, params, body) {
    const headers = { "X-Chat-Token": this.token };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(this.#url(path, params), {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        signal: AbortSignal.timeout(this.#o.requestTimeoutMs),
      });
    } catch {
      throw new ChatError(0, null, 0);
    }
    let data = null;
    try {
      data = await res.json();
    } catch {}
    if (!res.ok || !data || data.success === false) {
      let ms = Number(data?.retry_after_ms) || 0;
      if (!ms && res.status === 429) ms = (Number(res.headers.get("Retry-After")) || 1) * 1000;
      throw new ChatError(res.status, data, ms);
    }
    return data;
  }
}
