// view.js: the page's drawing, as functions from messages to DOM nodes.
// Every string a message carries is set with textContent (or as an
// attribute value), never parsed as HTML; a link is a link only for an
// http or https URL. app.js wires these to the ChatClient and the person.
//
// The drawing takes a ctx that says who reads: me (the author and reactor
// id that is "you": "operator" for the owner, "p:<id>" for a participant),
// canAnswer (the owner answers interactions; a participant sees them
// read-only), canReact (the owner and commenters), names (participant
// author ids to {name, role, kind}, for reactors), now() (the server's
// clock) and busy(key) (a request of this page in flight).

/** The reactions offered under every message, with the names read out. */
export const REACTIONS = [
  ["👍", "thumbs up"],
  ["❤️", "heart"],
  ["😄", "smile"],
  ["🎉", "party"],
  ["👀", "eyes"],
  ["🙏", "thanks"],
];
const reactionName = new Map(REACTIONS);

/** OWNER is the author (and reactor, and answerer) id of the thread's owner. */
export const OWNER = "operator";

const authors = { operator: "the owner", agent: "agent", hermes: "hermes" };

/** guest reports whether an author id is a participant's ("p:<id>"). */
export const guest = (id) => typeof id === "string" && id.startsWith("p:");

/** who names an author or a reactor for the reader: "you" for ctx.me. */
export function who(id, m, ctx) {
  if (id === (ctx?.me ?? OWNER)) return "you";
  if (authors[id]) return authors[id];
  if (m?.author === id && m.author_name) return m.author_name;
  const known = ctx?.names?.get(id)?.name;
  if (known) return known;
  return guest(id) ? `guest ${id.slice(2)}` : String(id);
}

/**
 * reactor names a reactor in a reaction's list: as who does, and a
 * participant (other than the reader) with "(guest)" after the name, as
 * the author line's badge says: a participant named "you" or "the owner"
 * never reads as the reader or the owner.
 */
export function reactor(id, m, ctx) {
  const name = who(id, m, ctx);
  return guest(id) && id !== (ctx?.me ?? OWNER) ? `${name} (guest)` : name;
}

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const dayFmt = new Intl.DateTimeFormat(undefined, {
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
});
const fullFmt = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });

/** when formats an epoch for the reader: short (time, or day and time) and full. */
export function when(epoch) {
  const d = new Date(epoch);
  const today = new Date().toDateString() === d.toDateString();
  return { short: (today ? timeFmt : dayFmt).format(d), full: fullFmt.format(d) };
}

// el makes an element: props are assigned (className, textContent, …),
// except data-*, aria-* and the few that must be attributes; children are
// nodes or strings (text).
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" || k === "rel" || k === "for") {
      e.setAttribute(k, String(v));
    } else {
      e[k] = v;
    }
  }
  e.append(...children.filter((c) => c !== null && c !== undefined && c !== ""));
  return e;
}

/** safeURL returns url as an absolute http(s) URL, or null for anything else. */
export function safeURL(url) {
  try {
    const u = new URL(String(url));
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
  } catch {
    return null;
  }
}

// ---- a message ----

/**
 * messageItem draws a message as a list item: who and when, then its body
 * (an interaction, a card, or its text), then its reactions. ctx has now()
 * (the server's clock) and busy(key) (a request of this page in flight).
 */
export function messageItem(m, ctx) {
  const kind = authors[m.author] ? m.author : guest(m.author) ? "guest" : "other";
  const li = el("li", {
    className: `msg msg-${kind}${m.author === (ctx.me ?? OWNER) ? " mine" : ""}`,
    "data-id": m.id,
    "data-epoch": m.epoch,
    "data-author": m.author,
  });
  li.append(meta(m, ctx), body(m, ctx));
  if (m.attachments?.length) li.append(attachments(m.attachments, ctx));
  li.append(reactionBar(m, ctx));
  return li;
}

// rasters are the types the server serves inline (it decides from the
// bytes; width and height are set only for an image whose header parsed).
const rasters = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

/** sizeText is a file's size for a person: B, KiB or MiB. */
export function sizeText(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(Math.floor((n / 1024) * 10) / 10).toFixed(1)} KiB`;
  return `${(Math.floor((n / 1048576) * 10) / 10).toFixed(1)} MiB`;
}

/**
 * attachments draws a message's files: an image as a thumbnail (drawn by
 * the browser from the served bytes) that opens full size, anything else
 * as a named download chip. Their addresses carry a ticket that opens
 * that one file only (a copied address opens nothing else), asked for
 * through ctx.attachmentURL(id).
 */
export function attachments(list, ctx) {
  const box = el("div", { className: "atts" });
  for (const a of list) {
    const label = `${a.name} (${sizeText(Number(a.size) || 0)})`;
    const image = rasters.has(a.type) && a.width > 0 && a.height > 0;
    const link = el("a", { className: image ? "thumb" : "chip", title: label, rel: "noopener", target: "_blank", "data-att": a.id });
    if (image) {
      link.append(el("img", { alt: a.name, width: Math.min(a.width, 192), loading: "lazy", decoding: "async" }));
      link.setAttribute("aria-label", `${label}, open full size`);
    } else {
      link.textContent = label;
      link.download = a.name;
    }
    ctx.attachmentURL?.(a.id).then(
      (u) => {
        link.href = u;
        link.querySelector("img")?.setAttribute("src", u);
      },
      () => {},
    );
    box.append(link);
  }
  return box;
}

// meta is a message's first line: who wrote it, and when. A participant's
// message is never drawn as the owner's: it carries their name and a badge
// that says they came in by a share link.
function meta(m, ctx) {
  const w = when(m.epoch);
  const t = el("time", { dateTime: new Date(m.epoch).toISOString(), title: w.full, textContent: w.short });
  // dir=auto isolates the name: a right-to-left one (or one stored with
  // bidi controls) never reorders the badge and time after it.
  const line = el("div", { className: "meta" }, el("span", { className: "author", dir: "auto", textContent: who(m.author, m, ctx) }));
  if (guest(m.author)) {
    const agent = ctx.names?.get(m.author)?.kind === "agent";
    const badge = agent ? "guest agent" : "guest";
    line.append(" ", el("span", { className: "badge", title: `invited with a share link (${m.author.slice(2)})`, textContent: badge }));
  }
  line.append(" ", t);
  return line;
}

/**
 * redrawNames draws li's author line and reactions again, once the page
 * has learned who the participants are.
 */
export function redrawNames(li, m, ctx) {
  li.querySelector(":scope > .meta")?.replaceWith(meta(m, ctx));
  redrawReactions(li, m, ctx);
}

function body(m, ctx) {
  if (m.interaction) return interaction(m, ctx);
  if (m.card) return card(m.card);
  return el("p", { className: "text", textContent: m.text });
}

/**
 * updateItem brings li up to m, touching only the parts that changed (so a
 * half-written answer or the focus is not lost to a reaction). It returns
 * the words to announce when an interaction closed, else "".
 */
export function updateItem(li, m, previous, ctx) {
  let said = "";
  const oldBody = li.children[1];
  if (m.interaction) {
    said = refreshInteraction(li, m, ctx);
  } else if (JSON.stringify(m.card) !== JSON.stringify(previous?.card) || m.text !== previous?.text) {
    oldBody.replaceWith(body(m, ctx));
  }
  if (JSON.stringify(m.reactions) !== JSON.stringify(previous?.reactions)) redrawReactions(li, m, ctx);
  return said;
}

/**
 * redrawReactions draws li's reaction bar again (its reactions changed, or
 * the page learned the names of the reactors), keeping the bar's Tab stop
 * and the focus in it.
 */
export function redrawReactions(li, m, ctx) {
  const bar = li.querySelector(":scope > .reactions");
  const focused = bar?.contains(document.activeElement);
  const stop = bar?.querySelector('button[tabindex="0"]')?.dataset.emoji;
  const fresh = reactionBar(m, ctx, stop);
  bar ? bar.replaceWith(fresh) : li.append(fresh);
  if (focused) fresh.querySelector('button[tabindex="0"]')?.focus();
}

// ---- interactions ----

/** stateOf is an interaction's state as the reader should see it: a pending one past its deadline is expired. */
export function stateOf(ix, now) {
  return ix.state === "pending" && Number(ix.deadline) <= now ? "expired" : ix.state;
}

/** countdown says how long until deadline, in whole seconds left. */
export function countdown(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  if (s >= 3600) {
    const h = Math.floor(s / 3600);
    const min = Math.floor((s % 3600) / 60);
    return `Expires in ${h} h ${String(min).padStart(2, "0")} min`;
  }
  if (s >= 60) return `Expires in ${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  return `Expires in ${s} s`;
}

/** outcome words an interaction's closed state for the reader ("Approved by you"). */
export function outcome(ix, state, m, ctx) {
  const by = ix.answered_by ? ` by ${who(ix.answered_by, m, ctx)}` : "";
  switch (state) {
    case "approved":
      return `Approved${by}`;
    case "denied":
      return `Denied${by}`;
    case "answered": {
      const v = ix.answer?.value ?? "";
      const choice = (ix.choices || []).find((c) => c.value === v);
      return `Answered${by}: ${choice?.label || v}`;
    }
    case "expired":
      return "Expired: no answer in time";
    case "canceled":
      return `Canceled${by}`;
  }
  return String(state);
}

// interaction draws an interaction message: what is asked, then either the
// ways to answer and the countdown (pending) or the outcome. Its changes
// are not announced where they happen (aria-live off: a countdown would
// speak every second); the page's announcer says an outcome once.
function interaction(m, ctx) {
  const ix = m.interaction;
  const state = stateOf(ix, ctx.now());
  const approval = ix.type === "approval";
  const titleID = `ix-title-${ix.id}`;
  const sec = el("section", {
    className: `ix ix-${approval ? "approval" : "input"}`,
    "data-ix": ix.id,
    "data-state": state,
    "data-deadline": ix.deadline,
    "aria-live": "off",
    "aria-labelledby": titleID,
  });
  sec.append(
    el("p", { className: "ix-kind", textContent: approval ? "Approval requested" : "Question" }),
    el("h2", { className: "ix-title", id: titleID, textContent: ix.title || (approval ? "Approve or deny" : "Your answer") }),
    el("p", { className: "ix-prompt", textContent: ix.prompt }),
  );
  if (ix.details?.length) {
    const dl = el("dl", { className: "ix-details" });
    for (const d of ix.details) dl.append(el("dt", { textContent: d.label }), el("dd", { textContent: d.value }));
    sec.append(dl);
  }
  if (state === "pending") {
    const busy = ctx.busy(ix.id);
    const left = Number(ix.deadline) - ctx.now();
    const local = new Date(Number(ix.deadline) - (ctx.now() - Date.now()));
    // The ticking words are hidden from screen readers; they read the
    // deadline once, as a time.
    sec.append(
      el(
        "p",
        { className: "ix-deadline" },
        el("span", { className: "ix-countdown", "aria-hidden": "true", title: when(local).full, textContent: countdown(left) }),
        el("span", { className: "sr-only", textContent: `Answer by ${when(local).short}.` }),
      ),
    );
    if (!ctx.canAnswer) {
      // A participant sees what is asked and how it ends; the answer is
      // the owner's alone.
      sec.append(el("p", { className: "ix-waiting", textContent: "Waiting for the owner's answer." }));
      if (!approval && ix.choices?.length) {
        const ul = el("ul", { className: "ix-choices", "aria-label": "Choices" });
        for (const c of ix.choices) ul.append(el("li", { textContent: c.label || c.value }));
        sec.append(ul);
      }
    }
    const actions = el("div", { className: "ix-actions", role: "group", "aria-label": approval ? "Approve or deny" : "Choices" });
    if (!ctx.canAnswer) {
      // no buttons
    } else if (approval) {
      actions.append(
        el("button", { type: "button", className: "approve", "data-decision": "approve", textContent: "Approve", "aria-disabled": busy && "true" }),
        el("button", { type: "button", className: "deny quiet", "data-decision": "deny", textContent: "Deny", "aria-disabled": busy && "true" }),
      );
    } else {
      for (const c of ix.choices || []) {
        actions.append(
          el(
            "button",
            { type: "button", className: "choice quiet", "data-choice": c.value, "aria-disabled": busy && "true" },
            el("span", { className: "choice-label", textContent: c.label || c.value }),
            c.description ? el("span", { className: "choice-desc", textContent: c.description }) : null,
          ),
        );
      }
    }
    if (actions.children.length) sec.append(actions);
    if (ctx.canAnswer && !approval && ix.allow_text) {
      const id = `ix-text-${ix.id}`;
      sec.append(
        el(
          "form",
          { className: "ix-text", "data-ix": ix.id, noValidate: true },
          el("label", { for: id, textContent: ix.choices?.length ? "Or write an answer" : "Your answer" }),
          el(
            "div",
            { className: "ix-text-row" },
            el("input", { type: "text", id, name: "value", autocomplete: "off", "aria-disabled": busy && "true" }),
            el("button", { type: "submit", textContent: "Send", "aria-disabled": busy && "true" }),
          ),
        ),
      );
    }
  } else {
    const at = ix.answered_at && state !== "expired" ? ` · ${when(ix.answered_at).short}` : "";
    sec.append(el("p", { className: "ix-outcome", tabIndex: -1, textContent: outcome(ix, state, m, ctx) + at }));
  }
  sec.append(el("p", { className: "ix-error", role: "alert", hidden: true }));
  sec._ix = JSON.stringify(ix);
  sec._busy = ctx.busy(ix.id);
  return sec;
}

/**
 * refreshInteraction redraws an interaction whose object, shown state or
 * busy state changed; the rest (a pending card's countdown) is tick()'s.
 * It keeps the focus in the card and a half-written answer, and returns
 * the outcome to announce when the card stopped being pending.
 */
export function refreshInteraction(li, m, ctx) {
  const sec = li.querySelector(":scope > .ix");
  const state = stateOf(m.interaction, ctx.now());
  if (sec && sec.dataset.state === state && sec._ix === JSON.stringify(m.interaction) && sec._busy === ctx.busy(m.interaction.id)) {
    return "";
  }
  const typed = sec?.querySelector(".ix-text input")?.value ?? "";
  const hadFocus = sec?.contains(document.activeElement) ? document.activeElement : null;
  const error = sec?.querySelector(".ix-error");
  const fresh = interaction(m, ctx);
  if (sec) sec.replaceWith(fresh);
  else li.children[1].replaceWith(fresh);
  const input = fresh.querySelector(".ix-text input");
  if (input) input.value = typed;
  if (error && !error.hidden && state === "pending") {
    const e = fresh.querySelector(".ix-error");
    e.textContent = error.textContent;
    e.hidden = false;
  }
  if (hadFocus) {
    // The same control if it is still there, else the outcome.
    const same =
      (hadFocus.dataset.decision && fresh.querySelector(`[data-decision="${hadFocus.dataset.decision}"]`)) ||
      (hadFocus.dataset.choice !== undefined && fresh.querySelector(`[data-choice="${CSS.escape(hadFocus.dataset.choice)}"]`)) ||
      (hadFocus.matches("input") && input) ||
      (hadFocus.matches(".ix-text button") && fresh.querySelector(".ix-text button")) ||
      fresh.querySelector(".ix-outcome");
    same?.focus();
  }
  if (sec?.dataset.state === "pending" && state !== "pending") {
    return `${m.interaction.title || (m.interaction.type === "approval" ? "Approval" : "Question")}: ${outcome(m.interaction, state, m, ctx)}.`;
  }
  return "";
}

/** tick updates a pending card's countdown; it returns true when the card must be redrawn (its deadline passed). */
export function tick(sec, now) {
  const left = Number(sec.dataset.deadline) - now;
  if (left <= 0) return true;
  const c = sec.querySelector(".ix-countdown");
  const words = countdown(left);
  if (c && c.textContent !== words) c.textContent = words;
  return false;
}

// ---- cards ----

/**
 * card draws a card: its title, then each block (text, fields, link,
 * code), all as text. A link is an <a> only for an http or https URL,
 * opened in a new tab with rel="noopener noreferrer", its text the label
 * (followed by the site it opens) or else the address as the browser
 * opens it; any other URL is shown as plain text.
 */
export function card(c) {
  const box = el("div", { className: "card" });
  if (c.title) box.append(el("h2", { className: "card-title", textContent: c.title }));
  for (const b of Array.isArray(c.blocks) ? c.blocks : []) {
    switch (b?.type) {
      case "text":
        box.append(el("p", { className: "card-text", textContent: b.text }));
        break;
      case "fields": {
        const dl = el("dl", { className: "card-fields" });
        for (const f of b.fields || []) dl.append(el("dt", { textContent: f.label }), el("dd", { textContent: f.value }));
        box.append(dl);
        break;
      }
      case "link": {
        const href = safeURL(b.url);
        // With no label, the address as the browser opens it (href): bidi
        // controls or invisible characters in the URL are shown
        // percent-encoded, as the address bar shows them, never applied
        // (an RLO would draw the rest of the address reversed, as another
        // site's).
        const label = b.label || href || String(b.url ?? "");
        // A label is hermes's words, and may name another address: the
        // site the link opens is said beside it, as the address bar names
        // it (an internationalized name in its xn-- form), since a phone
        // shows no address on hover.
        const site = href && b.label ? el("span", { className: "card-site", textContent: ` (${new URL(href).host})` }) : null;
        box.append(
          el(
            "p",
            { className: "card-link" },
            href
              ? el("a", { href, target: "_blank", rel: "noopener noreferrer", textContent: label })
              : el("span", { className: "card-url", textContent: b.label ? `${b.label} (${b.url})` : label }),
            site,
          ),
        );
        break;
      }
      case "code":
        box.append(
          el(
            "pre",
            { className: "card-code" },
            el("code", { "data-language": b.language || null, textContent: b.text }),
          ),
        );
        break;
    }
  }
  if (!box.children.length) box.append(el("p", { className: "card-text", textContent: c.fallback_text }));
  return box;
}

// ---- reactions ----

/**
 * reactionBar draws the reactions of a message: the set above, then any
 * other emoji someone used, each a toggle button with its count,
 * aria-pressed when this page's person reacted with it. The bar is a
 * toolbar: one Tab stop (the button of emoji stop, else the first), the
 * arrow keys move between its buttons (moveInBar), so the keyboard does
 * not cross six buttons per message. A reader who may not react (a
 * viewer) sees the reactions used, as text.
 */
export function reactionBar(m, ctx, stop) {
  const r = m.reactions && typeof m.reactions === "object" ? m.reactions : {};
  if (ctx.canReact === false) {
    const list = el("ul", { className: "reactions read-only", "aria-label": "Reactions", "aria-live": "off" });
    for (const [e, by] of Object.entries(r)) {
      if (!Array.isArray(by) || !by.length) continue;
      const name = reactionName.get(e) || e;
      list.append(
        el(
          "li",
          { className: "react", title: `${name}: ${by.map((x) => reactor(x, m, ctx)).join(", ")}` },
          el("span", { className: "emoji", "aria-hidden": "true", textContent: e }),
          el("span", { className: "n", "aria-hidden": "true", textContent: String(by.length) }),
          el("span", { className: "sr-only", textContent: `${name}, ${by.length}` }),
        ),
      );
    }
    return list;
  }
  const me = ctx.me ?? OWNER;
  const bar = el("div", { className: "reactions", role: "toolbar", "aria-label": "Reactions", "aria-live": "off" });
  const emojis = [...REACTIONS.map(([e]) => e), ...Object.keys(r).filter((e) => !reactionName.has(e))];
  for (const e of emojis) {
    const by = Array.isArray(r[e]) ? r[e] : [];
    const mine = by.includes(me);
    const name = reactionName.get(e) || e;
    const b = el(
      "button",
      {
        type: "button",
        className: `react${by.length ? "" : " unused"}`,
        "data-emoji": e,
        "aria-pressed": mine ? "true" : "false",
        "aria-label": by.length ? `${name}, ${by.length}` : name,
        title: by.length ? `${name}: ${by.map((x) => reactor(x, m, ctx)).join(", ")}` : `React with ${name}`,
        "aria-disabled": ctx.busy(`${m.id} ${e}`) && "true",
      },
      el("span", { className: "emoji", "aria-hidden": "true", textContent: e }),
      by.length ? el("span", { className: "n", "aria-hidden": "true", textContent: String(by.length) }) : null,
    );
    b.tabIndex = -1;
    bar.append(b);
  }
  (bar.querySelector(`button[data-emoji="${CSS.escape(stop || "")}"]`) || bar.firstElementChild).tabIndex = 0;
  return bar;
}

/**
 * moveInBar moves the focus within a reaction toolbar for the arrow keys,
 * Home and End, and makes the button it lands on the bar's Tab stop. It
 * returns whether it handled key.
 */
export function moveInBar(button, key) {
  const bar = button.closest(".reactions");
  const all = [...bar.querySelectorAll("button")];
  const i = all.indexOf(button);
  const j = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: all.length - 1 }[key];
  if (j === undefined) return false;
  const to = all[(j + all.length) % all.length];
  for (const b of all) b.tabIndex = b === to ? 0 : -1;
  to.focus();
  return true;
}
