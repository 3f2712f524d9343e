// t-link.js: the first thing the owner's page runs, before the page is even
// parsed. Two links open it with a token in the fragment, which browsers
// never send to a server; this takes the token out of the address bar and
// out of the tab's history at once, and keeps it:
//
//   <base>/#t=<token>   a claim link (chatrelay open): the token becomes the
//                       page's own (localStorage "chatrelay.token"), so the
//                       page opens that conversation as its owner. A "#t="
//                       that is not 64 lowercase hex is never adopted: app.js
//                       says so (data-claim). A browser that holds another
//                       conversation already adopts it only once the person
//                       says yes (app.js: data-claim="pending", the token in
//                       window.chatrelayClaim, never in the page's storage).
//   <base>/d#chd_…      a device link (contract Part 5): the page at /d is
//                       the owner's page acting as one of the owner's
//                       devices. The device token is kept in this browser's
//                       localStorage ("chatrelay.device": a device is meant
//                       to stay), and /d opened again later uses it. A
//                       browser that keeps another device already adopts
//                       it only once the person says yes (app.js:
//                       data-device="pending", the token in
//                       window.chatrelayDevice). app.js reads
//                       data-page="device" and data-device.
(function () {
  "use strict";
  var root = document.documentElement;
  var hash = location.hash;
  if (/\/d$/.test(location.pathname)) {
    root.setAttribute("data-page", "device");
    if (!hash || hash === "#") return;
    history.replaceState(history.state, "", location.pathname + location.search);
    var token = hash.slice(1);
    try {
      token = decodeURIComponent(token);
    } catch (e) {
      // not percent-encoded: taken as it is
    }
    token = token.trim();
    // A browser that keeps another device already is asked first, as for
    // a claim link (app.js, data-device="pending", the token in
    // window.chatrelayDevice): any page on the web can open a link, and
    // one adopted at once would make this browser forget its device and
    // show, and write to, the link maker's conversation instead.
    var device = /^chd_[A-Za-z0-9_-]{43}$/;
    var kept = null;
    try {
      kept = localStorage.getItem("chatrelay.device");
    } catch (e) {
      // no storage: adopt says so
    }
    if (kept && kept !== token && device.test(kept) && device.test(token)) {
      window.chatrelayDevice = token;
      root.setAttribute("data-device", "pending");
      return;
    }
    adopt(token, device, "chatrelay.device", "data-device");
    return;
  }
  if (hash.slice(0, 3) !== "#t=") return;
  var claim = hash.slice(3);
  history.replaceState(history.state, "", location.pathname + location.search);
  // A browser that holds a conversation already is asked first (app.js,
  // data-claim="pending"): any page on the web can open a link, and one
  // adopted at once would make this browser forget its conversation for
  // good, and write to the link's maker's thread instead.
  var held = null;
  try {
    held = localStorage.getItem("chatrelay.token");
  } catch (e) {
    // no storage: adopt says so
  }
  if (held && held !== claim && /^[0-9a-f]{64}$/.test(held) && /^[0-9a-f]{64}$/.test(claim)) {
    window.chatrelayClaim = claim;
    root.setAttribute("data-claim", "pending");
    return;
  }
  adopt(claim, /^[0-9a-f]{64}$/, "chatrelay.token", "data-claim");

  // adopt keeps token in localStorage under key if it has the form of
  // pattern, and says in the page's attribute attr what became of it:
  // malformed (never kept), adopted, or unkept (storage refused: app.js
  // says so).
  function adopt(token, pattern, key, attr) {
    if (!pattern.test(token)) {
      root.setAttribute(attr, "malformed");
      return;
    }
    try {
      localStorage.setItem(key, token);
      root.setAttribute(attr, "adopted");
    } catch (e) {
      root.setAttribute(attr, "unkept");
    }
  }
})();
