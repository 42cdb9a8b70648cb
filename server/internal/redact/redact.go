package redact

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
)

// Mask replaces a protected value.
const Mask = "[REDACTED]"

// protectedKeys are attribute keys (compared lower-cased, '-' as '_') whose values are never logged.
var protectedKeys = map[string]bool{
	"password": true, "passwd": true, "secret": true, "client_secret": true, "token": true,
	"access_token": true, "refresh_token": true, "id_token": true, "authorization": true,
	"proxy_authorization": true, "cookie": true, "set_cookie": true, "api_key": true, "apikey": true,
	"private_key": true, "credential": true, "credentials": true, "code_verifier": true, "code": true,
	"value": true, "values": true, "assertion": true, "client_assertion": true,
}

// protectedSuffixes catch composed keys such as `db_password` or `x_api_token`.
var protectedSuffixes = []string{"password", "secret", "token", "authorization", "cookie", "_key", "credential"}

// IsProtectedKey reports whether an attribute or field named key holds a protected value.
func IsProtectedKey(key string) bool {
	k := strings.ReplaceAll(strings.ToLower(key), "-", "_")
	if protectedKeys[k] {
		return true
	}
	for _, s := range protectedSuffixes {
		if strings.HasSuffix(k, s) {
			return true
		}
	}
	return false
}

// patterns match credentials by their shape; each is replaced by its replacement. need reports
// whether a value holds what every match of the pattern contains (a literal, or white space): a
// value without it cannot match, so the pattern is not run. Most logged values (paths, operation
// names, ids) hold none of them, and a regexp scan costs far more than the check (every request's
// log line went through all six; FuzzPatternNeeds checks that need never skips a match).
var patterns = []struct {
	re   *regexp.Regexp
	with string
	need func(string) bool
}{
	// JWS compact serialisation (JWTs, access tokens): base64url header starting with '{"'.
	{regexp.MustCompile(`eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*`), Mask, contains("eyJ")},
	// Authorization header values: the scheme and the credential are separated by white space.
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`), Mask, hasSpace},
	// BAP client secrets and opaque tokens (prefixed so that scanners find them).
	{regexp.MustCompile(`bap_(cs|rt|ac)_[A-Za-z0-9_-]{16,}`), Mask, contains("bap_")},
	// fosite HMAC tokens (authorization codes, refresh tokens): ory_xx_<key>.<signature>.
	{regexp.MustCompile(`ory_(ac|rt|at)_[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}`), Mask, contains("ory_")},
	// URL userinfo passwords: scheme://user:password@host.
	{regexp.MustCompile(`(://[^/\s:@]+:)[^/\s@]+@`), "${1}" + Mask + "@", contains("://")},
	// key=value passwords (libpq connection strings, form bodies).
	{regexp.MustCompile(`(?i)\b(password|passwd|pwd|client_secret)=[^\s&]+`), "${1}=" + Mask, contains("=")},
}

func contains(sub string) func(string) bool {
	return func(v string) bool { return strings.Contains(v, sub) }
}

// hasSpace reports whether v holds a byte that \s matches (RE2's \s is ASCII: \t \n \f \r and
// space; \v is not one of them).
func hasSpace(v string) bool { return strings.ContainsAny(v, " \t\n\f\r") }

// Secrets is a process-wide set of exact strings to redact wherever they appear (a client secret
// just printed by the CLI, a password read from stdin). Safe for concurrent use.
type Secrets struct {
	mu   sync.RWMutex
	list []string
}

// Add registers s (strings shorter than 6 bytes are ignored: too likely to match innocent text).
func (s *Secrets) Add(v string) {
	if len(v) < 6 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.list {
		if x == v {
			return
		}
	}
	s.list = append(s.list, v)
}

func (s *Secrets) scrub(v string) string {
	if s == nil {
		return v
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, x := range s.list {
		if strings.Contains(v, x) {
			v = strings.ReplaceAll(v, x, Mask)
		}
	}
	return v
}

// Global is the set the default handlers consult.
var Global = &Secrets{}

// String returns v with credential-shaped substrings and registered secrets replaced by Mask.
func String(v string) string {
	return scrub(Global, v)
}

func scrub(s *Secrets, v string) string {
	v = s.scrub(v)
	for _, p := range patterns {
		if p.need(v) {
			v = p.re.ReplaceAllString(v, p.with)
		}
	}
	return v
}

// Handler wraps another slog.Handler and redacts every record before passing it on.
type Handler struct {
	next    slog.Handler
	secrets *Secrets
}

// NewHandler wraps next; secrets nil means Global.
func NewHandler(next slog.Handler, secrets *Secrets) *Handler {
	if secrets == nil {
		secrets = Global
	}
	return &Handler{next: next, secrets: secrets}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, scrub(h.secrets, r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a, 0))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a, 0)
	}
	return &Handler{next: h.next.WithAttrs(red), secrets: h.secrets}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), secrets: h.secrets}
}

const maxDepth = 8

func (h *Handler) attr(a slog.Attr, depth int) slog.Attr {
	if IsProtectedKey(a.Key) {
		return slog.String(a.Key, Mask)
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, scrub(h.secrets, v.String()))
	case slog.KindGroup:
		if depth >= maxDepth {
			return slog.String(a.Key, Mask)
		}
		gs := v.Group()
		out := make([]any, len(gs))
		for i, g := range gs {
			out[i] = h.attr(g, depth+1)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, scrub(h.secrets, x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, scrub(h.secrets, x.String()))
		case []byte:
			return slog.String(a.Key, scrub(h.secrets, string(x)))
		case map[string]any:
			out := make([]any, 0, len(x))
			for k, e := range x {
				out = append(out, h.attr(slog.Any(k, e), depth+1))
			}
			return slog.Group(a.Key, out...)
		default:
			// Anything else is formatted once and scrubbed as text: a struct may hold a secret field.
			return slog.String(a.Key, scrub(h.secrets, fmt.Sprintf("%+v", x)))
		}
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}
