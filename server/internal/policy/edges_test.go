package policy_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/policy"
)

// TestNilPolicyAllowsNothing: a task without a policy has no origins and no rules, and names no
// host explicitly.
func TestNilPolicyAllowsNothing(t *testing.T) {
	var p *policy.Policy
	if got := p.AllowedOrigins(); got != nil {
		t.Errorf("AllowedOrigins = %v, want nil", got)
	}
	if got := p.ApprovalRules(); got != nil {
		t.Errorf("ApprovalRules = %v, want nil", got)
	}
}

// TestNamesExplicitlyRefusesAURLWithoutAnOrigin: a URL that has no web origin (no host, another
// scheme) is never named by a policy.
func TestNamesExplicitlyRefusesAURLWithoutAnOrigin(t *testing.T) {
	p := mustPolicy(t, []string{"http://127.0.0.1:*"}, nil)
	for _, raw := range []string{"file:///etc/passwd", "ftp://127.0.0.1/", "mailto:a@127.0.0.1"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if p.NamesExplicitly(u) {
			t.Errorf("NamesExplicitly(%s) = true, want false", raw)
		}
	}
}

// TestPatternErrorShortensALongPattern: a refused pattern is quoted in the error, cut at 100 bytes
// so that a huge input does not make a huge problem detail.
func TestPatternErrorShortensALongPattern(t *testing.T) {
	long := "https://" + strings.Repeat("a", 300) + ".example/*"
	_, err := policy.ParsePolicy([]string{long}, nil)
	var pe *policy.PatternError
	if !errors.As(err, &pe) {
		t.Fatalf("ParsePolicy(long) = %v, want a PatternError", err)
	}
	msg := pe.Error()
	if strings.Contains(msg, long) || !strings.Contains(msg, "…") || len(msg) > 100+len(pe.Reason)+40 {
		t.Errorf("PatternError.Error() = %q, want the pattern shortened", msg)
	}
	if !errors.Is(err, policy.ErrInvalidPattern) {
		t.Errorf("errors.Is(%v, ErrInvalidPattern) = false", err)
	}
}

// TestParseTTLRefusesANumberPastTheBound: digits that already exceed MaxApprovalTTL in seconds
// are refused while reading, before any unit.
func TestParseTTLRefusesANumberPastTheBound(t *testing.T) {
	if d, err := policy.ParseTTL("PT9999999999S"); !errors.Is(err, policy.ErrBadTTL) {
		t.Errorf("ParseTTL(PT9999999999S) = %v, %v; want ErrBadTTL", d, err)
	}
}
