package web

import (
	"net/http"

	"github.com/chatrelay/chatrelay"
)

// PageLimits are the rows of the limits table the page states.
var PageLimits = pageLimits

// HandlerStating is Handler stating limits instead of the table's rows:
// a test serves other values, to see that the page states the server's.
func HandlerStating(limits []chatrelay.Limit) http.Handler { return handler(limits) }
