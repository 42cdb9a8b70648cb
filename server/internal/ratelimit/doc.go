// Package ratelimit holds in-memory token buckets keyed by a string (a client id, a client and
// address pair). It owns no policy: callers choose keys, rates and what a refusal means. Standard
// library only; it must not import any package of this module.
package ratelimit
