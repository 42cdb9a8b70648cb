package policy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Effect is what an action does, as named by an approval rule's "effect".
type Effect string

// The effects an approval rule can name.
const (
	// EffectFormSubmission is an action that submits a form (a click on a
	// submit control, Enter in a field of a form).
	EffectFormSubmission Effect = "form_submission"
	// EffectFileUpload is an upload_file action.
	EffectFileUpload Effect = "file_upload"
	// EffectAnyAction, in a rule, matches every action. Passed to
	// [Policy.NeedsApproval], it describes an action with no more specific
	// effect.
	EffectAnyAction Effect = "any_action"
)

// ErrUnknownEffect is wrapped by the errors [ParseEffect] and [ParsePolicy]
// return for an effect that is not one of [AllEffects].
var ErrUnknownEffect = errors.New("unknown approval effect")

// AllEffects returns every effect an approval rule can name. The caller owns
// the returned slice.
func AllEffects() []Effect {
	return []Effect{EffectFormSubmission, EffectFileUpload, EffectAnyAction}
}

// Valid reports whether e is one of [AllEffects].
func (e Effect) Valid() bool {
	switch e {
	case EffectFormSubmission, EffectFileUpload, EffectAnyAction:
		return true
	default:
		return false
	}
}

// ParseEffect returns the effect named exactly s, or an error wrapping
// [ErrUnknownEffect].
func ParseEffect(s string) (Effect, error) {
	if e := Effect(s); e.Valid() {
		return e, nil
	}
	return "", fmt.Errorf("%w: %q (want form_submission, file_upload or any_action)", ErrUnknownEffect, s)
}

// ApprovalRule is one entry of policy.approval_rules as a client sends it:
// an effect and, optionally, the origin patterns it is limited to.
type ApprovalRule struct {
	// Effect is the effect the rule holds for approval.
	Effect Effect
	// Origins are origin patterns; nil or empty means every origin.
	Origins []string
}

// FieldError locates an error inside the policy object, for a problem
// detail. It wraps the error of the field (a *[PatternError] or an error
// wrapping [ErrUnknownEffect]).
type FieldError struct {
	// Field is the JSON path below "policy", such as "allowed_origins[2]" or
	// "approval_rules[0].origins[1]".
	Field string
	// Err is what is wrong with the field.
	Err error
}

// Error returns "policy.<field>: <error>".
func (e *FieldError) Error() string { return "policy." + e.Field + ": " + e.Err.Error() }

// Unwrap returns the error of the field.
func (e *FieldError) Unwrap() error { return e.Err }

// rule is a parsed approval rule.
type rule struct {
	effect  Effect
	origins []Pattern
}

// Policy is a task's validated policy. It is immutable and safe for
// concurrent use. A nil *Policy allows nothing but about:blank and has no
// approval rules.
type Policy struct {
	allowed []Pattern
	rules   []rule
}

// ParsePolicy validates policy.allowed_origins and policy.approval_rules and
// returns the policy. Every invalid field is reported: the error joins one
// *[FieldError] per field (errors.As finds the first). An empty
// allowedOrigins is valid and allows only about:blank.
func ParsePolicy(allowedOrigins []string, rules []ApprovalRule) (*Policy, error) {
	p := &Policy{
		allowed: make([]Pattern, 0, len(allowedOrigins)),
		rules:   make([]rule, 0, len(rules)),
	}
	var errs []error
	for i, s := range allowedOrigins {
		pat, err := ParsePattern(s)
		if err != nil {
			errs = append(errs, &FieldError{Field: fmt.Sprintf("allowed_origins[%d]", i), Err: err})
			continue
		}
		p.allowed = append(p.allowed, pat)
	}
	for i, r := range rules {
		if _, err := ParseEffect(string(r.Effect)); err != nil {
			errs = append(errs, &FieldError{Field: fmt.Sprintf("approval_rules[%d].effect", i), Err: err})
		}
		parsed := rule{effect: r.Effect}
		for j, s := range r.Origins {
			pat, err := ParsePattern(s)
			if err != nil {
				errs = append(errs, &FieldError{Field: fmt.Sprintf("approval_rules[%d].origins[%d]", i, j), Err: err})
				continue
			}
			parsed.origins = append(parsed.origins, pat)
		}
		p.rules = append(p.rules, parsed)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// AllowedOrigins returns the allowed origin patterns in the order given. The
// caller owns the returned slice.
func (p *Policy) AllowedOrigins() []Pattern {
	if p == nil {
		return nil
	}
	return append([]Pattern(nil), p.allowed...)
}

// ApprovalRules returns the approval rules in the order given, with their
// origins in canonical form. The caller owns the returned slice.
func (p *Policy) ApprovalRules() []ApprovalRule {
	if p == nil {
		return nil
	}
	out := make([]ApprovalRule, len(p.rules))
	for i, r := range p.rules {
		out[i].Effect = r.effect
		for _, o := range r.origins {
			out[i].Origins = append(out[i].Origins, o.String())
		}
	}
	return out
}

// AllowsURL reports whether a task under p may load u, in any frame, as a
// navigation, a redirect target or a subresource. about:blank and
// about:srcdoc are always allowed; http, https, ws and wss URLs are allowed
// when an allowed pattern matches their origin (ws as http, wss as https);
// every other URL (data:, file:, javascript:, blob:, …), a nil URL and a URL
// with a non-canonical host are refused.
func (p *Policy) AllowsURL(u *url.URL) bool {
	if u == nil {
		return false
	}
	if strings.EqualFold(u.Scheme, "about") {
		return u.Opaque == "blank" || u.Opaque == "srcdoc"
	}
	o, ok := originOf(u)
	return ok && p.allowsOrigin(o)
}

// AllowsOrigin reports whether the serialised origin (scheme://host[:port],
// as in an Origin header) is allowed. "null", a wildcard and anything with a
// path are refused.
func (p *Policy) AllowsOrigin(origin string) bool {
	o, ok := parseOrigin(origin)
	return ok && p.allowsOrigin(o)
}

func (p *Policy) allowsOrigin(o Pattern) bool {
	if p == nil {
		return false
	}
	for _, pat := range p.allowed {
		if pat.matches(o) {
			return true
		}
	}
	return false
}

// NeedsApproval reports whether an action with the given effect, run in the
// document at pageURL, is held for approval, and by which rule (its index in
// the rules given to [ParsePolicy]; the first matching rule wins). effect is
// the action's most specific effect: [EffectFormSubmission],
// [EffectFileUpload], or [EffectAnyAction] for an action that has neither.
// A rule with effect any_action matches every action.
//
// It fails safe: a rule limited to origins applies when pageURL has no
// network origin (nil, about:blank, data:, …) because the real origin cannot
// be known here; pass the creator's URL for an about:blank document when you
// know it. An unknown effect matches every rule. It returns -1, false when
// no rule applies.
func (p *Policy) NeedsApproval(effect Effect, pageURL *url.URL) (int, bool) {
	if p == nil {
		return -1, false
	}
	o, known := originOf(pageURL)
	for i, r := range p.rules {
		if r.effect != EffectAnyAction && r.effect != effect && effect.Valid() {
			continue
		}
		if len(r.origins) == 0 || !known {
			return i, true
		}
		for _, pat := range r.origins {
			if pat.matches(o) {
				return i, true
			}
		}
	}
	return -1, false
}
