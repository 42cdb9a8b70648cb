package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Approval lifetimes (an approval rule's `ttl`).
const (
	// DefaultApprovalTTL is how long an approval stays pending when its rule names no ttl.
	DefaultApprovalTTL = 15 * time.Minute
	// MaxApprovalTTL bounds a rule's ttl: a held action waiting longer is better asked for again.
	MaxApprovalTTL = 24 * time.Hour
)

// ErrBadTTL is wrapped by every refusal of ParseTTL.
var ErrBadTTL = errors.New("ttl must be an ISO 8601 duration of hours, minutes and seconds from PT1S to PT24H, e.g. PT15M")

// ParseTTL reads an approval rule's ttl: the ISO 8601 duration subset `PT[nH][nM][nS]` (at least
// one part, decimal integers), between 1 second and MaxApprovalTTL. The spec's pattern admits the
// same strings; this also bounds the value.
func ParseTTL(s string) (time.Duration, error) {
	rest, ok := strings.CutPrefix(s, "PT")
	if !ok || rest == "" || len(s) > 16 {
		return 0, ErrBadTTL
	}
	var total time.Duration
	units := []struct {
		designator byte
		unit       time.Duration
	}{{'H', time.Hour}, {'M', time.Minute}, {'S', time.Second}}
	next := 0 // the smallest unit index still allowed: H before M before S, each once
	for rest != "" {
		i := 0
		var n int64
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			n = n*10 + int64(rest[i]-'0')
			if n > int64(MaxApprovalTTL/time.Second) {
				return 0, ErrBadTTL
			}
			i++
		}
		if i == 0 || i == len(rest) {
			return 0, ErrBadTTL
		}
		k := next
		for k < len(units) && units[k].designator != rest[i] {
			k++
		}
		if k == len(units) {
			return 0, ErrBadTTL
		}
		total += time.Duration(n) * units[k].unit
		next = k + 1
		rest = rest[i+1:]
	}
	if total < time.Second || total > MaxApprovalTTL {
		return 0, fmt.Errorf("%w (got %s)", ErrBadTTL, total)
	}
	return total, nil
}

// FormatTTL writes d (whole seconds) as ParseTTL reads it, e.g. PT15M or PT1H30M5S.
func FormatTTL(d time.Duration) string {
	s := int64(d / time.Second)
	out := "PT"
	if h := s / 3600; h > 0 {
		out += fmt.Sprintf("%dH", h)
	}
	if m := s % 3600 / 60; m > 0 {
		out += fmt.Sprintf("%dM", m)
	}
	if sec := s % 60; sec > 0 || out == "PT" {
		out += fmt.Sprintf("%dS", sec)
	}
	return out
}
