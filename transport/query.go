package transport

import (
	"net/http"
	"net/url"
	"strings"
)

// query is r's query. A pair that does not decode (a bad %-escape, or a
// ';', which Go's url.ParseQuery refuses) is kept as it was sent rather
// than dropped: a malformed since, v or ticket is then refused with its
// code, never read as absent (a cursor read as absent answers the newest
// 50 again, which a resuming client has already seen).
func query(r *http.Request) url.Values {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		return v
	}
	v = url.Values{}
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if pair == "" {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(key); err == nil && !strings.Contains(key, ";") {
			key = k
		}
		if val, err := url.QueryUnescape(value); err == nil && !strings.Contains(value, ";") {
			value = val
		}
		v[key] = append(v[key], value)
	}
	return v
}

// param is the value of r's query parameter key: "" when absent. A
// parameter sent twice is its values joined by commas, which no cursor,
// version or ticket matches: it is refused with that parameter's code
// (invalid_since, invalid_version, invalid_ticket), never read as one of
// its values (Go's Get reads the first, PHP, whose routes the .php ones
// stand in for, the last: a cursor read either way repeats or loses
// messages).
func param(r *http.Request, key string) string {
	return strings.Join(query(r)[key], ",")
}
