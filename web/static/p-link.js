// p-link.js: the first thing the participant page runs, before the page is
// even parsed. A share link is <base>/p#chp_…: the token is in the
// fragment, which browsers never send to a server. This takes it out of
// the address bar and out of the tab's history at once (so it is not
// shown, bookmarked or caught in a screenshot), and keeps it for this tab
// only, in sessionStorage, where app.js reads it.
(function () {
  "use strict";
  var fragment = location.hash.slice(1);
  if (!fragment) return;
  try {
    var token = fragment;
    try {
      token = decodeURIComponent(fragment);
    } catch (e) {
      // not percent-encoded: taken as it is
    }
    sessionStorage.setItem("chatrelay.share", token.trim().slice(0, 200));
  } catch (e) {
    // No sessionStorage (storage refused): the page says it has no link.
  } finally {
    history.replaceState(history.state, "", location.pathname + location.search);
  }
})();
