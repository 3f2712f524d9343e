// t-link.js: the first thing the owner's page runs, before the page is even
// parsed. A claim link (chatrelay open) is <base>/#t=<token>: the token is
// in the fragment, which browsers never send to a server. This takes it
// out of the address bar and out of the tab's history at once, and keeps
// it as the page keeps its own token (localStorage "chatrelay.token"), so
// the page opens that conversation as its owner. A fragment "#t=" that is
// not 64 lowercase hex is never adopted: app.js says so (data-claim).
(function () {
  "use strict";
  if (location.hash.slice(0, 3) !== "#t=") return;
  var token = location.hash.slice(3);
  history.replaceState(history.state, "", location.pathname + location.search);
  var root = document.documentElement;
  if (!/^[0-9a-f]{64}$/.test(token)) {
    root.setAttribute("data-claim", "malformed");
    return;
  }
  try {
    localStorage.setItem("chatrelay.token", token);
    root.setAttribute("data-claim", "adopted");
  } catch (e) {
    root.setAttribute("data-claim", "unkept"); // storage refused: app.js says so
  }
})();
