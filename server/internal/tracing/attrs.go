package tracing

import (
	"strings"

	"github.com/originweave/bap/server/internal/ids"
)

// shape checks an attribute value.
type shape func(string) bool

// stringAttrs are the string attributes a span may carry, each with the shape of its values. The
// list is the contract of what leaves the process: a key that is not here is dropped, and so is a
// value of another shape (a URL, a typed text, a header never has the shape of an id or a token).
var stringAttrs = map[string]shape{
	// The HTTP request (the transports).
	"http.request.method": token,
	"http.route":          route,
	// A command (app).
	"bap.operation":         token,
	"bap.via":               token,
	"bap.task_id":           id(ids.Task),
	"bap.command_id":        id(ids.Command),
	"bap.response.replayed": boolean,
	// A browser call (app).
	"bap.session_id":        id(ids.BrowserSession),
	"bap.browser.call":      token,
	"bap.browser.action":    token,
	"db.system.name":        token, // a SQL transaction (store)
	"bap.model.role":        token, // a model call (orchestrator)
	"bap.model.outcome":     token,
	"gen_ai.operation.name": token,
	"gen_ai.request.model":  modelID,
	"gen_ai.response.model": modelID,
}

// intAttrs are the integer attributes a span may carry.
var intAttrs = map[string]bool{
	"http.response.status_code":  true,
	"bap.response.status":        true,
	"bap.tx.attempts":            true,
	"gen_ai.usage.input_tokens":  true,
	"gen_ai.usage.output_tokens": true,
}

func allowedString(key, value string) bool {
	ok, listed := stringAttrs[key]
	return listed && ok(value)
}

func allowedInt(key string) bool { return intAttrs[key] }

// token is a short lower- or upper-case word: an operation, a kind, a method, a problem code.
func token(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func boolean(s string) bool { return s == "true" || s == "false" }

// id accepts ids of prefix p only (ids.Valid: the prefix and a ULID body).
func id(p ids.Prefix) shape { return func(s string) bool { return ids.Valid(p, s) } }

// modelID is a model id as an orchestrator lists it ("vendor/model:tag", "gpt-4o-mini").
func modelID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == ':' || r == '@' }) {
		if !token(part) {
			return false
		}
	}
	return !strings.ContainsAny(s, "?#%&= ")
}

// route is a path template of the API ("/bap/v1/sessions/{session_id}/act", "/mcp"): segments of
// letters, digits, '_', '-', '.' or one {name}. A concrete path (ids, a query) is not a route.
func route(s string) bool {
	if !strings.HasPrefix(s, "/") || len(s) > 200 {
		return false
	}
	for _, seg := range strings.Split(s[1:], "/") {
		if p, ok := strings.CutPrefix(seg, "{"); ok {
			name, ok := strings.CutSuffix(p, "}")
			if !ok || !token(name) {
				return false
			}
			continue
		}
		if seg != "" && !token(seg) {
			return false
		}
		if _, isID := ids.PrefixOf(seg); isID {
			return false
		}
	}
	return true
}

// spanName keeps a name made of a word and a token, a model id or a route ("command act",
// "browser act", "chat gpt-4o", "POST /bap/v1/sessions/{session_id}/act"); another is replaced.
func spanName(name string) string {
	word, rest, _ := strings.Cut(name, " ")
	if token(word) && (rest == "" || token(rest) || modelID(rest) || route(rest)) {
		return name
	}
	return "span"
}
