// Package web is the browser page, embedded in the binary and served at the
// prefix root: index.html, app.css, app.js (the page), view.js (its
// drawing), people.js (the owner's People panel), push.js (the "Notify
// me" switch) and chat.js (the client module, which other sites may
// import), with t-link.js (which adopts a claim link's token, <base>/#t=…,
// and a device link's, <base>/d#chd_…) and devices.js (the owner's devices
// panel); at /p the participant page (p.html, with p-link.js) that a share
// link opens; at /d the owner's page again, which a device link opens
// (contract Part 5); and sw.js, the service worker that shows Web Push
// notifications and answers their Approve and Deny. Served from the prefix
// root, the worker's scope is the whole page (no Service-Worker-Allowed
// header is needed), and like every file it is revalidated on each load
// (no-cache).
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Static is the page's files, rooted at the folder that holds index.html.
func Static() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// csp lets the page load only its own files and talk only to its own
// server (its WebSocket included).
const csp = "default-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'"

// Handler serves the page and its assets, the participant page at /p (a
// share link is <base>/p#chp_…), and the owner's page at /d (a device
// link is <base>/d#chd_…).
//
// The files are public and carry no secret, so any origin may read them:
// that lets a site on another origin import chat.js straight from this
// server (module scripts are fetched with CORS). The API routes have their
// own, narrower CORS (--allowed-origin). Browsers revalidate the files on
// each load, so a new binary's page is picked up at once.
//
// Framing: the pages hold a token and buttons such as Approve, so no page
// may frame them (clickjacking) but those of frameAncestors, origins
// ("https://app.example.com") the server trusts with its API: CSP
// frame-ancestors names them, or is 'none', with X-Frame-Options: DENY
// for browsers that predate frame-ancestors (it cannot name an origin,
// so it is left out when some are allowed).
func Handler(frameAncestors ...string) http.Handler {
	policy, xfo := csp+"; frame-ancestors 'none'", "DENY"
	if len(frameAncestors) > 0 {
		policy, xfo = csp+"; frame-ancestors "+strings.Join(frameAncestors, " "), ""
	}
	files := http.FileServerFS(Static())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", policy)
		if xfo != "" {
			h.Set("X-Frame-Options", xfo)
		}
		h.Set("Referrer-Policy", "no-referrer")
		switch r.URL.Path {
		case "/p":
			http.ServeFileFS(w, r, Static(), "p.html")
			return
		case "/d": // the owner's page, as one of the owner's devices (t-link.js)
			http.ServeFileFS(w, r, Static(), "index.html")
			return
		}
		files.ServeHTTP(w, r)
	})
}
