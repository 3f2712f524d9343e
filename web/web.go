// Package web is the browser page, embedded in the binary and served at the
// prefix root: index.html, app.css, app.js (the page), view.js (its
// drawing), people.js (the owner's People panel), push.js (the "Notify
// me" switch) and chat.js (the client module, which other sites may
// import), with t-link.js (which adopts a claim link's token, <base>/#t=…,
// and a device link's, <base>/d#chd_…), devices.js (the owner's devices
// panel) and linkpanel.js (what the People and devices panels share); at /p the participant page (p.html, with p-link.js) that a share
// link opens; at /d the owner's page again, which a device link opens
// (contract Part 5); and sw.js, the service worker that shows Web Push
// notifications and answers their Approve and Deny. Served from the prefix
// root, the worker's scope is the whole page (no Service-Worker-Allowed
// header is needed), and like every file it is revalidated on each load
// (no-cache).
//
// The limits the page states (a post's text, a message's files, a thread's
// active devices) are rows of the limits table (limits.go), written nowhere
// in static: the server makes limits.js from them and fills them in
// index.html and p.html when it builds its pages (see Handler).
package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
)

//go:embed static
var static embed.FS

// parts is the markup that pages share, each part/<name>.html put in a
// page where it has the mark {{part:<name>}} (see withParts).
//
//go:embed parts
var parts embed.FS

// Static is the page's files as embedded, rooted at the folder that holds
// index.html: index.html and p.html with their part marks
// ({{part:composer}}) and limit marks ({{post.text}}) not yet filled in,
// and no limits.js (Handler makes both).
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
//
// Opening: a page of another origin may open them (window.open), but
// Cross-Origin-Opener-Policy: same-origin takes the window out of its
// hold once they load: it cannot send the window to a look-alike page,
// nor learn when it loaded (to time a click on Approve).
//
// The pages state the limits of pageLimits, made once here from the
// limits table: limits.js, a module that exports LIMITS and LEAST (each
// row's most and least, by its name in GET /api/limits.json:
// LIMITS["post.text"]), which chat.js, app.js, people.js and devices.js
// import, so that another site's page that imports chat.js reads them
// from this server too; and index.html and p.html with each mark {{name}}
// replaced by that row's most (so the counter reads "0 / {{post.text}}"
// filled in before any script runs).
func Handler(frameAncestors ...string) http.Handler {
	return handler(pageLimits, frameAncestors...)
}

// pageLimits are the rows of the limits table the page states. A limit the
// page shows is added here, and read in the page as LIMITS["its.name"]
// (limits.js) or {{its.name}} (index.html, p.html).
var pageLimits = []chatrelay.Limit{
	chatrelay.LimitPostText,        // the composer's counter (chat.js's MAX_CHARS)
	chatrelay.LimitAttachments,     // "A message carries at most … files." (app.js)
	chatrelay.LimitActiveDevices,   // device_limit's sentence (devices.js)
	chatrelay.LimitDeviceExpiresIn, // invalid_expiry's sentence (devices.js)
	chatrelay.LimitName,            // the name fields' data-max-chars (index.html), in code points
	chatrelay.LimitActiveGrants,    // participant_limit's sentence (people.js)
	chatrelay.LimitCap,             // invalid_cap's sentence (people.js)
	chatrelay.LimitExpiresIn,       // invalid_expiry's sentence (people.js)
}

// made is a file Handler makes from the embedded ones and the limits.
type made struct {
	name string // the file's name, for its Content-Type
	body []byte
}

// build makes limits.js and fills index.html's and p.html's marks, their
// parts' (withParts) and then their limits', by the paths they are served
// at. The marks are fixed at build
// time, so one with no row panics.
func build(limits []chatrelay.Limit) map[string]made {
	most, least := map[string]int{}, map[string]int{}
	for _, l := range limits {
		most[l.Name], least[l.Name] = l.Max, l.Min
	}
	js, err := json.Marshal(most) // encoding/json sorts the names
	if err != nil {
		panic(err)
	}
	leastJS, err := json.Marshal(least)
	if err != nil {
		panic(err)
	}
	b := map[string]made{}
	add := func(body []byte, name string, paths ...string) {
		for _, p := range paths {
			b[p] = made{name, body}
		}
	}
	add([]byte("// limits.js: made by the chatrelay server from its limits table (limits.go):\n"+
		"// each limit the page states, its most (LIMITS) and its least (LEAST) by its\n"+
		"// name in GET /api/limits.json, in the row's unit.\n"+
		"export const LIMITS = Object.freeze("+string(js)+");\n"+
		"export const LEAST = Object.freeze("+string(leastJS)+");\n"), "limits.js", "/limits.js")
	for _, page := range []struct {
		file  string
		paths []string
	}{
		{"index.html", []string{"", "/", "/d"}}, // /d: the owner's page, which a device link opens (t-link.js)
		{"p.html", []string{"/p", "/p.html"}},
	} {
		body, err := fs.ReadFile(Static(), page.file)
		if err != nil {
			panic(err)
		}
		body = withParts(page.file, body)
		for name, n := range most {
			body = bytes.ReplaceAll(body, []byte("{{"+name+"}}"), []byte(strconv.Itoa(n)))
		}
		if i := bytes.Index(body, []byte("{{")); i >= 0 {
			end := min(len(body), i+40)
			panic(fmt.Sprintf("web: %s has a limit mark with no row of pageLimits: %q", page.file, body[i:end]))
		}
		add(body, page.file, page.paths...)
	}
	return b
}

// withParts puts in body (the page file) each part its marks
// {{part:<name>}} name: parts/<name>.html, whose own limit marks are then
// filled in with the page's. The marks are fixed at build time, so one
// with no part panics.
func withParts(file string, body []byte) []byte {
	mark := []byte("{{part:")
	for {
		i := bytes.Index(body, mark)
		if i < 0 {
			return body
		}
		n := bytes.Index(body[i:], []byte("}}"))
		if n < 0 {
			panic(fmt.Sprintf("web: %s has an unclosed part mark at byte %d", file, i))
		}
		name := string(body[i+len(mark) : i+n])
		part, err := fs.ReadFile(parts, "parts/"+name+".html")
		if err != nil {
			panic(fmt.Sprintf("web: %s marks a part with no file: %v", file, err))
		}
		body = slices.Concat(body[:i], bytes.TrimSuffix(part, []byte("\n")), body[i+n+2:])
	}
}

// handler is Handler stating limits.
func handler(limits []chatrelay.Limit, frameAncestors ...string) http.Handler {
	pages := build(limits)
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
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if f, ok := pages[r.URL.Path]; ok {
			http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.body))
			return
		}
		files.ServeHTTP(w, r)
	})
}
