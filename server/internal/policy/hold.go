package policy

import (
	"net/url"
	"strings"
)

// SafeMethod reports whether an HTTP method is safe (RFC 9110 §9.2.1: GET, HEAD, OPTIONS,
// TRACE): a request with any other method (POST, PUT, PATCH, DELETE, or a name the page made up)
// is taken to change something at the site.
func SafeMethod(method string) bool {
	switch strings.ToUpper(method) {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// HoldsRequest reports whether a request the page sends must be held for approval, and by which
// rule (its index in the rules given to [ParsePolicy]): a form_submission rule judges what leaves
// the browser, so every request with a non-safe method is held when a form_submission rule
// applies to the origin of its target or of the page that sent it (either, so that a page on
// one origin cannot post to another around a rule). A rule without origins applies everywhere;
// an unknown origin (nil, about:blank) is matched by every rule (fail safe). any_action and
// file_upload rules judge actions before they run, not requests. It returns -1, false when no
// rule applies.
func (p *Policy) HoldsRequest(method string, target, page *url.URL) (int, bool) {
	if p == nil || SafeMethod(method) {
		return -1, false
	}
	to, toKnown := originOf(target)
	from, fromKnown := originOf(page)
	for i, r := range p.rules {
		if r.effect != EffectFormSubmission {
			continue
		}
		if len(r.origins) == 0 || !toKnown || !fromKnown {
			return i, true
		}
		for _, pat := range r.origins {
			if pat.matches(to) || pat.matches(from) {
				return i, true
			}
		}
	}
	return -1, false
}

// HoldsRequests reports whether any rule judges requests (a form_submission rule): only then does
// an act wait for the requests it causes.
func (p *Policy) HoldsRequests() bool {
	if p == nil {
		return false
	}
	for _, r := range p.rules {
		if r.effect == EffectFormSubmission {
			return true
		}
	}
	return false
}
