// chat.js: the chatrelay client, an ES module whose one dependency is
// limits.js, which the server makes from its limits table (MAX_CHARS).
//
// A ChatClient keeps one conversation (one token, so one thread) in sync
// with a chatrelay server and tells its page what changed through events.
// It reads the server's v2 view (contract Part 4): a message can change
// after it is written (an interaction answered, expired or canceled, a
// reaction added or removed), and each message carries its `rev`, the
// epoch of its latest change.
//
//   "message"   detail {message, before}
//               a message first seen; before is the id of the shown message
//               it goes before (null: at the end). Each id once.
//   "update"    detail {message, previous}
//               a shown message changed: message replaces previous (same id)
//   "clear"                        forget every shown message (new conversation, reset)
//   "awaiting"  detail {awaiting}  true while the last message waits for hermes
//   "status"    detail {state, shared}
//               state is "connecting", "ws", "sse", "polling", "offline" or
//               "ended"; shared is true when another tab holds the connection
//   "ended"     detail {code}
//               the server refused this client's credential for good
//               (token_revoked, token_expired, or unauthorized for a share
//               token it does not know; removed when a link's streams
//               ended because the server removed its conversation): the
//               client has stopped and will not reconnect
//
//   import { ChatClient } from "https://chat.example.com/chat.js";
//   const chat = new ChatClient();   // the server is where chat.js came from
//   chat.addEventListener("message", (e) => show(e.detail.message));
//   chat.addEventListener("update", (e) => redraw(e.detail.message));
//   chat.start();
//   await chat.send("hello");        // throws a ChatError when not stored
//   await chat.respond(message.interaction.id, { decision: "approve" });
//   await chat.react(message.id, "👍");
//
// Identity. The token (32 random bytes as 64 lowercase hex) is made here
// with crypto.getRandomValues and kept in localStorage. It travels only in
// the X-Chat-Token header, never in a URL: streams are opened with a
// short-lived, read-only ticket instead.
//
// A participant (contract Part 3) is made with the share token of its link
// instead: new ChatClient({ shareToken: "chp_…" }). It is sent only as
// Authorization: Bearer (tickets are minted with it the same way), and the
// owner's token is then neither made nor read. When the owner revokes the
// link, or it expires, the server ends the streams (SSE "revoked", a
// WebSocket closed 1008) and refuses every request (401): the client stops
// for good and says why with an "ended" event.
//
// One of the owner's devices (contract Part 5) is made with the device
// token of its link: new ChatClient({ deviceToken: "chd_…" }). It acts as
// the owner (it posts, answers, reacts and manages people) but is sent as
// a Bearer token, as a participant's, and ends the same way when revoked
// or expired.
//
// The live connection climbs down a ladder: a WebSocket with a ticket; if
// that cannot open, Server-Sent Events with a ticket; if neither can, the
// poll route every few seconds, trying the ladder again now and then.
// Reconnects wait a jittered, growing delay, so a server restart does not
// bring every browser back in the same instant. Every transport resumes
// from the cursor, the newest change this client holds (every change up
// to it has been applied), and messages are upserted by id: a change is
// applied only if its rev is newer than the one shown, so nothing is shown
// twice and no change goes back in time.
//
// Tabs. All tabs of one browser that show the same conversation elect a
// leader with the Web Locks API; only the leader connects, and it hands
// every change to the other tabs over a BroadcastChannel. A browser thus
// holds one stream however many tabs are open (HTTP/1.1 allows only six
// connections per origin). When the leader tab closes, another takes over.
//
// Posts are idempotent: each carries a client_id (see send), so a post
// sent again after a network failure is stored once.

import { LIMITS } from "./limits.js";

/** The longest message the server accepts, in Unicode code points: its limits table's post.text. */
export const MAX_CHARS = LIMITS["post.text"];

const TOKEN = /^[0-9a-f]{64}$/;

/** SHARE_TOKEN is the form of a share link's token: chp_ and 43 base64url characters. */
export const SHARE_TOKEN = /^chp_[A-Za-z0-9_-]{43}$/;

/** DEVICE_TOKEN is the form of a device link's token: chd_ and 43 base64url characters. */
export const DEVICE_TOKEN = /^chd_[A-Za-z0-9_-]{43}$/;

// The codes that end a client for good: its credential will never work again.
const ENDS = new Set(["token_revoked", "token_expired"]);

const defaults = {
  baseURL: undefined, // the server, with its prefix; defaults to where chat.js was loaded from
  storage: undefined, // defaults to localStorage
  storageKey: "chatrelay.token",
  shareToken: "", // a participant's share token (chp_…): then the owner's token is not used
  deviceToken: "", // one of the owner's devices (chd_…): the owner, by a Bearer token; the owner's token is not used
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
    // A 502, 503 or 504 without the server's error code is a reverse
    // proxy's (nginx, Caddy) whose server did not answer, as while it
    // restarts: no answer from the server, as a connection refused.
    if (status >= 502 && status <= 504 && !body?.code) status = 0;
    super(body?.error || (status ? `HTTP ${status}` : "the server could not be reached"));
    this.name = "ChatError";
    this.status = status; // 0: no answer (network down, or refused by CORS)
    this.code = body?.code || (status ? `http_${status}` : "network");
    this.retryable = status === 0 || body?.retryable === true;
    this.retryAfterMs = retryAfterMs || 0; // for rate_limited
    // The message the refusal is about, in its current state (a 409
    // interaction_closed or client_id_conflict), or null.
    this.current = body?.message && typeof body.message === "object" ? body.message : null;
  }
}

// jitter is the n-th delay of an exponential backoff: base·2ⁿ capped at
// max, then a random point in its upper half.
function jitter(base, n, max) {
  const d = Math.min(max, base * 2 ** Math.min(n, 20));
  return d / 2 + (Math.random() * d) / 2;
}

// revOf is a message's change epoch (a v1 object has only its epoch).
const revOf = (m) => (typeof m.rev === "number" ? m.rev : m.epoch);

// valid tells whether m looks like a message object.
const valid = (m) => !!m && typeof m.id === "string" && typeof m.epoch === "number";

export class ChatClient extends EventTarget {
  #o;
  #base;
  #token = "";
  #run = null; // the current start(): {ac, wakers, leader, catching, again, full}
  #channel = null;
  #ticket = null; // {ticket, expiresAt}: the thread's, for the streams only
  #files = new Map(); // attachment id → {url: Promise, expiresAt}: each file's own ticket
  #status = "offline";
  #shared = false;
  #loaded = false; // the history has been read once
  #byId = new Map(); // id → the message shown
  #floor = 0; // messages older than this epoch are not shown (before the first page)
  #tab = ""; // this client's part of every client_id it makes
  #posts = 0;
  #skew = { lo: -Infinity, hi: Infinity }; // server clock − ours, in ms, as far as known
  #ended = ""; // the code that ended this client for good, once it has

  /** Messages shown, oldest (by epoch) first, each in its newest known state. */
  messages = [];
  /** The v2 cursor: every change up to this epoch has been applied. */
  cursor = 0;
  /** Whether the last message still waits for a reply from hermes. */
  awaiting = false;
  /** The thread, as the server names it (known after the first answer). */
  thread = "";
  /** The thread's title (chatrelay open), "" if it has none (known after a read). */
  title = "";

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
    const r = new Uint8Array(6);
    crypto.getRandomValues(r);
    this.#tab = "tab-" + Array.from(r, (x) => x.toString(16).padStart(2, "0")).join("");
  }

  /** The server's base URL, ending in "/". */
  get baseURL() {
    return this.#base.href;
  }
  /** The current state: "connecting", "ws", "sse", "polling", "offline" or "ended". */
  get status() {
    return this.#status;
  }
  /** Whether this client is a participant, holding a share token. */
  get participant() {
    return !!this.#o.shareToken;
  }
  /** Whether this client is one of the owner's devices, holding a device token. */
  get device() {
    return !this.participant && !!this.#o.deviceToken;
  }
  // bearer is the Bearer token this client sends (a share or device
  // token), or "" for the owner's own token (X-Chat-Token).
  get #bearer() {
    return this.#o.shareToken || this.#o.deviceToken || "";
  }
  /**
   * The code that ended this client for good ("token_revoked",
   * "token_expired", "unauthorized", or "removed": its conversation is
   * gone from the server), or "".
   */
  get ended() {
    return this.#ended;
  }
  /** Whether another tab holds the live connection for this one. */
  get shared() {
    return this.#shared;
  }
  get #storage() {
    return this.#o.storage ?? globalThis.localStorage;
  }

  /** The identity: the owner's token, made and stored on first use; or a participant's share token. */
  get token() {
    if (this.#bearer) return this.#bearer;
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

  /**
   * now is the server's clock, in epoch ms, as well as this client can
   * tell it: its own clock, corrected only when the Date headers of the
   * server's answers prove the two differ (by a second or more). Deadlines
   * are the server's epochs: count down to them with now().
   */
  now() {
    const { lo, hi } = this.#skew;
    const skew = lo > 0 ? lo : hi < 0 ? hi : 0;
    return Date.now() + skew;
  }

  /** start connects; the events above follow. An ended client stays ended. */
  start() {
    if (this.#run || this.#ended) return;
    // Everything a run owns: stop() ends it, start() makes a new one.
    // catching is its poll in flight; again asks that poll to run once
    // more, full to read from the start (after a reset).
    const run = {
      ac: new AbortController(),
      wakers: new Set(),
      leader: false,
      catching: null,
      again: false,
      full: false,
      online: false, // the browser said it is online again: try a live transport now
    };
    this.#run = run;
    const signal = run.ac.signal;
    if (!this.#bearer) globalThis.addEventListener?.("storage", (e) => this.#onStorage(e), { signal });
    globalThis.addEventListener?.(
      "online",
      () => {
        run.online = true;
        this.#wake();
      },
      { signal },
    );
    globalThis.document?.addEventListener(
      "visibilitychange",
      () => document.hidden || this.#wake(),
      { signal },
    );
    this.#setStatus("connecting");

    // The name carries the version of what the tabs tell each other
    // (v2: changes), so a tab still running an older chat.js (open since
    // before a deploy) keeps to its own group and leader.
    const who = this.#bearer ? this.#bearer.slice(0, 20) : this.token.slice(0, 16);
    const name = `chatrelay/2 ${this.#base.href} ${who}`;
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
    this.#setStatus(this.#ended ? "ended" : "offline");
  }

  // end stops this client for good: the server refused its credential
  // with code, which no retry can change. The other tabs are told, and
  // the page hears "ended". A link's streams end with token_revoked when
  // the owner revokes it and when the server removes its conversation
  // (past its retention), so a revoke is asked about once more: a link
  // the server no longer knows at all (401 unauthorized) went with its
  // conversation, and the code said is then "removed".
  #end(code) {
    if (this.#ended) return;
    this.#ended = code;
    this.stop();
    const tell = (code) => {
      this.#ended = code;
      this.#broadcast({ type: "ended", code });
      this.#setStatus("ended");
      this.dispatchEvent(new CustomEvent("ended", { detail: { code } }));
    };
    if (code !== "token_revoked" || !this.#bearer) return tell(code);
    this.#removed().then((removed) => tell(removed ? "removed" : code));
  }

  // removed reports whether the server answers this client's link with
  // 401 unauthorized: it knows no such link (any other answer, or none,
  // is false).
  async #removed() {
    try {
      const res = await fetch(this.#url("api/chat/whoami"), {
        headers: { Authorization: `Bearer ${this.#bearer}` },
        cache: "no-store",
        signal: AbortSignal.timeout(this.#o.requestTimeoutMs),
      });
      return res.status === 401 && (await res.json())?.code === "unauthorized";
    } catch {
      return false;
    }
  }

  /**
   * adopt makes token (a claim link's: 64 lowercase hex) this page's own,
   * as newConversation does with a new one. It returns false, changing
   * nothing, for a token of another shape.
   */
  adopt(token) {
    if (!TOKEN.test(token)) return false;
    try {
      this.#storage.setItem(this.#o.storageKey, token);
    } catch {}
    if (token !== this.#token) this.#switchTo(token);
    return true;
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
   * newClientId makes a client_id for a post: this client's random part
   * and a counter ("tab-3f9a0c7e21b4:7"). Keep it with the text while the
   * post is not known to be stored, and send it again with the text.
   */
  newClientId() {
    return `${this.#tab}:${++this.#posts}`;
  }

  /**
   * send stores text as a message. options: kind ("operator" unless the
   * client was made with another; a string is taken as the kind), clientId
   * (one from newClientId(); made when absent). A post sent again with
   * the same clientId and text is stored once: the server answers the
   * first message's 201 again, so a retry after a network failure never
   * doubles a message. It resolves with the server's 201 answer plus
   * client_id (and replayed: true for such a repeat); the message itself
   * arrives as a "message" event, like every other. It throws a
   * ChatError: status 413 (text_too_long), 429 (rate_limited, with
   * retryAfterMs), 0 (no answer), and so on.
   */
  async send(text, options = {}) {
    if (typeof options === "string") options = { kind: options };
    const kind = options.kind ?? this.#o.kind;
    const clientId = options.clientId ?? this.newClientId();
    // A participant's author is its grant: the server refuses a kind.
    const body = this.participant ? { text, client_id: clientId } : { text, kind, client_id: clientId };
    // Uploads of this thread (upload()) the message carries; the text may then be empty.
    if (options.attachments?.length) body.attachments = options.attachments;
    const { data, res } = await this.#request("POST", "api/chat/post", null, body, true);
    this.#poke();
    const replayed = res.headers.get("Idempotent-Replayed") === "true";
    return { ...data, client_id: clientId, replayed };
  }

  /**
   * upload stores a file (a File or Blob; name defaults to its own) as an
   * attachment of the thread, for a later send({attachments: [id]}).
   * onProgress(fraction) is called as the bytes go out. It resolves with
   * the attachment object ({id, name, type, size, sha256, width?,
   * height?}) and throws a ChatError (413 attachment_too_large, …).
   */
  upload(file, onProgress, name = file.name || "file") {
    return new Promise((resolve, reject) => {
      const x = new XMLHttpRequest();
      x.open("POST", this.#url("api/chat/attachments"));
      // A share or device token is a Bearer token, as on every request
      // (#request): never X-Chat-Token, which the server reads as the
      // owner's own token and refuses.
      if (this.#bearer) x.setRequestHeader("Authorization", `Bearer ${this.#bearer}`);
      else x.setRequestHeader("X-Chat-Token", this.token);
      x.setRequestHeader("X-Filename", encodeURIComponent(name));
      x.setRequestHeader("Content-Type", file.type || "application/octet-stream");
      x.upload.onprogress = (e) => e.lengthComputable && onProgress?.(e.loaded / e.total);
      x.onload = () => {
        let data = null;
        try {
          data = JSON.parse(x.responseText);
        } catch {}
        if (x.status === 201 && data?.attachment) resolve(data.attachment);
        else reject(new ChatError(x.status, data, 0));
      };
      x.onerror = () => reject(new ChatError(0, null, 0));
      x.send(file);
    });
  }

  /**
   * attachmentURL resolves with the address of an attachment's bytes,
   * carrying a ticket (an <img> or a link cannot send headers). The
   * server serves raster images inline and everything else as a download.
   *
   * The ticket is the file's own (POST api/chat/ticket with {attachment}):
   * it opens that one file and nothing else, never the conversation's
   * stream, because a person may copy the address ("Copy image address",
   * the full-size tab's address bar) and paste it anywhere. Each file's
   * ticket is asked for once and used until a minute before it expires.
   */
  attachmentURL(id) {
    const had = this.#files.get(id);
    if (had && (!had.expiresAt || had.expiresAt - Date.now() >= 60000)) return had.url;
    const entry = { expiresAt: 0 };
    entry.url = this.#request("POST", "api/chat/ticket", null, { attachment: id }).then(
      (t) => {
        entry.expiresAt = Number(t.expires_at) || 1;
        return this.#url(`api/chat/attachments/${encodeURIComponent(id)}`, { ticket: t.ticket }).href;
      },
      (e) => {
        if (this.#files.get(id) === entry) this.#files.delete(id);
        throw e;
      },
    );
    this.#files.set(id, entry);
    return entry.url;
  }

  /**
   * respond answers an interaction as the owner: answer is {decision:
   * "approve" | "deny"} (an approval) or {value} (an input). It resolves
   * with the answered message, which is shown at once. The first answer
   * wins: when another came first (or the deadline, or a cancel), it
   * throws a ChatError with code "interaction_closed" whose current is
   * the message as it stands, also shown at once. An interaction no
   * longer in the thread (retention dropped it) throws code "not_found",
   * and the conversation is read again without it.
   */
  async respond(interactionId, answer) {
    const body = { interaction_id: interactionId, ...answer };
    try {
      const data = await this.#request("POST", "api/chat/respond", null, body);
      this.#upsert(data.message, false);
      return data.message;
    } catch (e) {
      if (e.current) this.#upsert(e.current, false);
      // not_found: retention dropped the interaction's message while it
      // was shown (a live stream is told nothing of a drop before its
      // cursor): read the conversation again, as after a reset.
      else if (e.code === "not_found" && this.#run) this.#reset(this.#run);
      throw e;
    }
  }

  /**
   * react adds this client's reaction emoji to a message (the owner's, or
   * a commenter's), or removes it (remove true). It resolves with the
   * message, which is shown at once; a 429 throws a ChatError with
   * retryAfterMs, as send does.
   */
  async react(messageId, emoji, remove = false) {
    const body = { message_id: messageId, emoji };
    if (remove) body.remove = true;
    const data = await this.#request("POST", "api/chat/react", null, body);
    this.#upsert(data.message, false);
    return data.message;
  }

  // ---- participants (contract Part 3) ----

  /**
   * whoami resolves with who this client is in its conversation:
   * {thread, role ("owner", "viewer" or "commenter"), participant (the
   * participant object, or null for the owner), participants (the active
   * grants: {id, name, kind, role})}.
   */
  async whoami() {
    const data = await this.#request("GET", "api/chat/whoami");
    this.thread = data.thread || this.thread;
    return data;
  }

  /**
   * invite asks the server for a share link (the owner only): name, role
   * ("viewer" or "commenter"), expiresIn (seconds), cap, kind ("human" or
   * "agent"); those left out take the server's defaults. It resolves with
   * {participant, token, link, qr}: the link (and its token) is shown this
   * once, and qr is the link as a QR code (a PNG data URL).
   */
  async invite({ name, role, expiresIn, cap, kind } = {}) {
    const body = { name };
    if (role !== undefined) body.role = role;
    if (expiresIn !== undefined) body.expires_in = expiresIn;
    if (cap !== undefined) body.cap = cap;
    if (kind !== undefined) body.kind = kind;
    const data = await this.#request("POST", "api/chat/participants", null, body);
    return { participant: data.participant, token: data.token, link: data.link, qr: data.qr || "" };
  }

  /** participants resolves with every grant of the conversation, newest first (the owner only). */
  async participants() {
    const data = await this.#request("GET", "api/chat/participants");
    return Array.isArray(data.participants) ? data.participants : [];
  }

  /**
   * revoke ends a participant's link (the owner only): their open streams
   * end within a second. It resolves with the participant, now revoked;
   * revoking again answers the same.
   */
  async revoke(id) {
    const data = await this.#request("DELETE", `api/chat/participants/${encodeURIComponent(id)}`);
    return data.participant;
  }

  // ---- devices (contract Part 5) ----

  /**
   * makeDevice asks the server for a device link (the owner's own token
   * only): name, expiresIn (seconds; left out, the server's default). It
   * resolves with {device, token, link, qr}: the link (and its token) is
   * shown this once, and qr is the link as a QR code (a PNG data URL).
   */
  async makeDevice({ name, expiresIn } = {}) {
    const body = { name };
    if (expiresIn !== undefined) body.expires_in = expiresIn;
    const data = await this.#request("POST", "api/chat/devices", null, body);
    return { device: data.device, token: data.token, link: data.link, qr: data.qr || "" };
  }

  /** devices resolves with every device of the conversation, newest first (the owner or a device). */
  async devices() {
    const data = await this.#request("GET", "api/chat/devices");
    return Array.isArray(data.devices) ? data.devices : [];
  }

  /**
   * revokeDevice ends a device (the owner or a device, itself included):
   * its open streams end within a second. It resolves with the device,
   * now revoked.
   */
  async revokeDevice(id) {
    const data = await this.#request("DELETE", `api/chat/devices/${encodeURIComponent(id)}`);
    return data.device;
  }

  // ---- Web Push (contract Part 5) ----

  /**
   * pushKey resolves with the server's VAPID public key (base64url), the
   * applicationServerKey of a PushManager subscription. A server with push
   * turned off throws a ChatError with code "push_disabled".
   */
  async pushKey() {
    const data = await this.#request("GET", "api/push/key");
    return data.public_key;
  }

  /**
   * pushSubscribe gives the server a PushSubscription (its toJSON(): the
   * endpoint and keys) for this client's thread, for events (["interaction",
   * "reply"] when left out). It resolves with {id, events, created_at}; the
   * same endpoint subscribed again answers the same id.
   */
  async pushSubscribe(subscription, events) {
    const body = { subscription };
    if (events !== undefined) body.events = events;
    const data = await this.#request("POST", "api/chat/push", null, body);
    return data.push;
  }

  /** pushSubscriptions resolves with this client's own subscriptions in its thread. */
  async pushSubscriptions() {
    const data = await this.#request("GET", "api/chat/push");
    return Array.isArray(data.subscriptions) ? data.subscriptions : [];
  }

  /** pushUnsubscribe deletes one of this client's subscriptions by id. */
  async pushUnsubscribe(id) {
    await this.#request("DELETE", `api/chat/push/${encodeURIComponent(id)}`);
  }

  /**
   * credential is what the service worker (sw.js) answers with on this
   * client's behalf: the owner's token (sent as X-Chat-Token), or a
   * participant's share token or a device's token (sent as
   * Authorization: Bearer).
   */
  get credential() {
    const bearer = this.#bearer;
    return bearer ? { scheme: "bearer", token: bearer } : { scheme: "owner", token: this.token };
  }

  // poke has the live connection catch up soon after this tab wrote: the
  // leader polls at once if it is polling; another tab asks the leader.
  #poke() {
    const run = this.#run;
    if (run?.leader) {
      if (this.#status === "polling" || this.#status === "offline") this.#wake();
    } else if (run) {
      this.#channel?.postMessage({ type: "poke" });
    }
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
      run.online = false; // this turn tries the live transports anyway
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
      if (run.online) climbs = 0; // the network came back: climb at once, and soon again
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
      const u = this.#url("api/chat/ws", { v: 2, ticket, since: this.cursor });
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
        else if (f.type === "message" || f.type === "update") on.change(f.message);
        else if (f.type === "reset") this.#reset(run);
      };
      ws.onclose = (e) => {
        // 1008 with the reason token_revoked or token_expired: a
        // participant's link ended while the socket was open.
        if (e.code === 1008 && ENDS.has(e.reason)) this.#end(e.reason);
        on.end();
      };
      return () => ws.close(1000);
    });
  }

  // sse runs one EventSource until its first error. It is closed then,
  // rather than left to reconnect by itself, so that every reconnect
  // gets the jittered backoff, a fresh ticket when the old one expired,
  // and the cursor as ?since=.
  #sse(run, ticket) {
    return this.#stream(run, (on) => {
      const es = new EventSource(this.#url("api/chat/stream", { v: 2, ticket, since: this.cursor }));
      const parse = (fn) => (e) => {
        try {
          fn(JSON.parse(e.data));
        } catch {}
      };
      es.addEventListener("ready", parse((f) => on.ready(f, "sse")));
      es.addEventListener("message", parse((m) => on.change(m)));
      es.addEventListener("update", parse((m) => on.change(m)));
      es.addEventListener("reset", () => this.#reset(run));
      // A participant's link ended while the stream was open.
      es.addEventListener("revoked", parse((f) => this.#end(ENDS.has(f.code) ? f.code : "token_revoked")));
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
      // A stream opened without a cursor starts with the newest messages:
      // the first is where the shown conversation begins.
      let first = this.cursor === 0;
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
        change: (m) => {
          if (!close || !valid(m)) return;
          if (first && this.messages.length === 0) this.#floor = m.epoch;
          first = false;
          this.#upsert(m, true);
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
      if ((Date.now() >= climbAt || run.online) && !hidden) return;
      const d = fails ? jitter(o.pollMs, fails, o.maxPollMs) : hidden ? o.hiddenPollMs : o.pollMs;
      await this.#sleep(run, d);
    }
  }

  // catchUp polls the v2 view from the cursor. Calls made while a poll is
  // in flight share it and make it run once more, so none is lost. A page
  // that says reset (retention dropped a message changed after the
  // cursor) redraws: the conversation is read again from the start.
  #catchUp(run) {
    if (run.catching) {
      run.again = true;
      return run.catching;
    }
    const once = async () => {
      do {
        run.again = false;
        const full = run.full || this.cursor === 0;
        run.full = false;
        const since = full ? 0 : this.cursor;
        const page = await this.#request("GET", "api/chat/poll", { v: 2, since });
        if (!this.#alive(run)) return;
        this.thread = page.thread || this.thread;
        const title = typeof page.title === "string" ? page.title : "";
        if (title !== this.title) {
          this.title = title;
          this.dispatchEvent(new CustomEvent("title", { detail: { title } }));
        }
        if (page.reset && since > 0) {
          this.#redraw(run);
          continue;
        }
        const msgs = (page.messages || []).filter(valid);
        // A read without a cursor is the newest messages: the conversation
        // shown starts at the first (a change of an older one is not shown).
        if (full && msgs.length) this.#floor = msgs[0].epoch;
        for (const m of msgs) this.#upsert(m, true);
        // The page is one read of the thread: its cursor covers every
        // change it could have listed.
        const cursor = Number(page.cursor) || 0;
        if (cursor > this.cursor) this.#advance(cursor, null);
        if (cursor === this.cursor) this.#setAwaiting(!!page.awaiting);
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
      case "change":
        if (leader) break;
        // prev is the leader's cursor before this change: above ours
        // means we missed some, so read them instead of skipping them.
        if (!this.#loaded || d.prev > this.cursor) {
          this.#catchUp(run).catch(() => {});
          break;
        }
        if (d.message) this.#upsert(d.message, false);
        if (d.cursor > this.cursor) this.cursor = d.cursor;
        break;
      case "reset":
        if (!leader) this.#redraw(run);
        break;
      case "poke":
        if (leader) this.#wake();
        break;
      case "ended":
        if (ENDS.has(d.code) || d.code === "unauthorized" || d.code === "removed") this.#end(d.code);
        break;
    }
  }

  #broadcast(m) {
    try {
      this.#channel?.postMessage(m);
    } catch {}
  }

  // ---- state ----

  // upsert shows m: a message first seen is inserted in epoch order, one
  // shown is replaced if m is a newer change of it. advance says m came
  // from the thread's change sequence (a stream, a poll, the leader), so
  // the cursor moves to its rev; an answer to this tab's own request
  // (respond, react) shows the change at once but does not move the
  // cursor, since the changes before it may still be on their way.
  #upsert(m, advance) {
    if (!valid(m)) return;
    const rev = revOf(m);
    const old = this.#byId.get(m.id);
    if (old) {
      if (rev > revOf(old)) {
        const i = this.messages.lastIndexOf(old);
        if (i >= 0) this.messages[i] = m;
        this.#byId.set(m.id, m);
        this.dispatchEvent(new CustomEvent("update", { detail: { message: m, previous: old } }));
      }
    } else if (m.epoch >= this.#floor) {
      this.#insert(m);
    }
    if (advance) this.#advance(rev, m);
  }

  #insert(m) {
    const list = this.messages;
    let i = list.length;
    while (i > 0 && list[i - 1].epoch > m.epoch) i--;
    list.splice(i, 0, m);
    this.#byId.set(m.id, m);
    const before = i + 1 < list.length ? list[i + 1].id : null;
    if (list.length > this.#o.keep) {
      for (const gone of list.splice(0, list.length - this.#o.keep)) this.#byId.delete(gone.id);
      this.#floor = list[0].epoch;
    }
    this.dispatchEvent(new CustomEvent("message", { detail: { message: m, before } }));
    if (before === null) this.#setAwaiting(m.author !== "hermes");
  }

  // advance moves the cursor up to rev (a read without a cursor lists
  // messages by epoch, so revs may come in any order) and, in the leader,
  // hands the change (m, or none for a poll's cursor) to the other tabs,
  // with the cursor before and after it.
  #advance(rev, m) {
    const prev = this.cursor;
    if (rev > prev) this.cursor = rev;
    if (this.#run?.leader && (m || rev > prev)) {
      this.#broadcast({ type: "change", message: m, cursor: this.cursor, prev });
    }
  }

  // reset: the server dropped a message changed after our cursor
  // (retention), so what is shown may have a hole. Read the conversation
  // again from the start; a stream's backlog, which follows, is upserted
  // as usual.
  #reset(run) {
    if (this.#run?.leader) this.#broadcast({ type: "reset" });
    this.#redraw(run);
  }

  #redraw(run) {
    this.#clear();
    run.full = true;
    this.#catchUp(run).catch(() => {});
  }

  #clear() {
    this.messages = [];
    this.#byId.clear();
    this.#floor = 0;
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
    if (this.title) {
      this.title = "";
      this.dispatchEvent(new CustomEvent("title", { detail: { title: "" } }));
    }
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

  // clock narrows what is known of the server's clock from an answer's
  // Date header (whole seconds), sent after t0 and received at t1.
  #clock(res, t0, t1) {
    const d = Date.parse(res.headers.get("Date") || "");
    if (!Number.isFinite(d)) return; // not exposed to another origin's page
    let lo = d - t1;
    let hi = d + 1000 - t0;
    const k = this.#skew;
    if (lo > k.hi || hi < k.lo) k.lo = k.hi = NaN; // a clock was set: start over
    k.lo = Number.isNaN(k.lo) ? lo : Math.max(k.lo, lo);
    k.hi = Number.isNaN(k.hi) ? hi : Math.min(k.hi, hi);
  }

  async #request(method, path, params, body, withResponse = false) {
    if (this.#ended) throw new ChatError(401, { code: this.#ended, error: "this link no longer gives access" }, 0);
    const headers = this.#bearer ? { Authorization: `Bearer ${this.#bearer}` } : { "X-Chat-Token": this.token };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    const t0 = Date.now();
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
    this.#clock(res, t0, Date.now());
    let data = null;
    try {
      data = await res.json();
    } catch {}
    if (!res.ok || !data || data.success === false) {
      let ms = Number(data?.retry_after_ms) || 0;
      if (!ms && res.status === 429) ms = (Number(res.headers.get("Retry-After")) || 1) * 1000;
      const err = new ChatError(res.status, data, ms);
      // A credential that will never work again ends the client: a
      // revoked or expired link, or a share token the server does not know.
      if (res.status === 401 && (ENDS.has(err.code) || (this.#bearer && err.code === "unauthorized"))) {
        this.#end(err.code);
      }
      throw err;
    }
    return withResponse ? { data, res } : data;
  }
}
