// Package redact keeps protected values out of logs: a slog.Handler wrapper that replaces the
// values of protected attribute keys (password, secret, token, authorization, cookie, the value of
// a `fill`, …), strings that look like credentials (JWTs, bearer tokens, BAP client secrets) and
// secrets registered at run time. Standard library only; it must not import any package of this
// module, so every layer may use it.
package redact
