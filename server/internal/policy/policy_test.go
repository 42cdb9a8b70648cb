package policy_test

import (
	"errors"
	"net/url"
	"slices"
	"testing"

	"github.com/originweave/bap/server/internal/policy"
)

func mustPolicy(t *testing.T, allowed []string, rules []policy.ApprovalRule) *policy.Policy {
	t.Helper()
	p, err := policy.ParsePolicy(allowed, rules)
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	return p
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("url.Parse(%q): %v", s, err)
	}
	return u
}

func TestAllowsURL(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, []string{"https://example.com", "http://127.0.0.1:*", "https://*.shop.test"}, nil)
	empty := mustPolicy(t, nil, nil)
	tests := []struct {
		url       string
		want      bool
		wantEmpty bool // under a policy with no allowed origins
	}{
		{"https://example.com/login", true, false},
		{"https://example.com:443/", true, false},
		{"wss://example.com/live", true, false},
		{"http://example.com/", false, false},
		{"http://127.0.0.1:9000/", true, false},
		{"ws://127.0.0.1:9000/", true, false},
		{"https://eu.shop.test/cart", true, false},
		{"https://shop.test/", false, false},
		{"https://a.eu.shop.test/", false, false},
		{"https://evil.test/", false, false},
		// about:blank loads nothing and is always allowed.
		{"about:blank", true, true},
		{"ABOUT:blank", true, true},
		{"about:blank#frag", true, true},
		{"about:srcdoc", true, true},
		{"about:config", false, false},
		{"about:/blank", false, false},
		// Never, whatever the patterns say.
		{"data:text/html,<script>alert(1)</script>", false, false},
		{"data:,", false, false},
		{"file:///etc/passwd", false, false},
		{"javascript:alert(1)", false, false},
		{"blob:https://example.com/7b1c", false, false},
		{"filesystem:https://example.com/temporary/x", false, false},
		{"chrome://settings", false, false},
		{"view-source:https://example.com/", false, false},
		{"ftp://example.com/", false, false},
		{"", false, false}, // nil URL
	}
	for _, tt := range tests {
		u := mustURL(t, tt.url)
		if got := p.AllowsURL(u); got != tt.want {
			t.Errorf("AllowsURL(%q) = %v, want %v", tt.url, got, tt.want)
		}
		if got := empty.AllowsURL(u); got != tt.wantEmpty {
			t.Errorf("empty policy: AllowsURL(%q) = %v, want %v", tt.url, got, tt.wantEmpty)
		}
	}
	var nilPolicy *policy.Policy
	if !nilPolicy.AllowsURL(mustURL(t, "about:blank")) || nilPolicy.AllowsURL(mustURL(t, "https://example.com/")) {
		t.Error("nil policy must allow about:blank only")
	}
}

func TestAllowsOrigin(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, []string{"https://example.com", "http://127.0.0.1:*", "https://*.shop.test"}, nil)
	tests := []struct {
		origin string
		want   bool
	}{
		{"https://example.com", true},
		{"https://EXAMPLE.com:443", true},
		{"http://127.0.0.1:8080", true},
		{"https://eu.shop.test", true},
		{"https://shop.test", false},
		{"https://example.com/", false},
		{"https://example.com:", false},
		{"https://*.shop.test", false},
		{"http://127.0.0.1:*", false},
		{"wss://example.com", false},
		{"null", false},
		{"", false},
		{"about:blank", false},
	}
	for _, tt := range tests {
		if got := p.AllowsOrigin(tt.origin); got != tt.want {
			t.Errorf("AllowsOrigin(%q) = %v, want %v", tt.origin, got, tt.want)
		}
	}
}

func TestNeedsApproval(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, []string{"https://example.com", "https://*.bank.test"}, []policy.ApprovalRule{
		{Effect: policy.EffectFormSubmission, Origins: []string{"https://*.bank.test"}},  // 0
		{Effect: policy.EffectFileUpload},                                                // 1
		{Effect: policy.EffectAnyAction, Origins: []string{"https://admin.example.com"}}, // 2
	})
	tests := []struct {
		name     string
		effect   policy.Effect
		url      string
		wantRule int
		want     bool
	}{
		{"form on bank", policy.EffectFormSubmission, "https://www.bank.test/pay", 0, true},
		{"form elsewhere", policy.EffectFormSubmission, "https://example.com/", -1, false},
		{"upload anywhere", policy.EffectFileUpload, "https://example.com/", 1, true},
		{"upload on bank", policy.EffectFileUpload, "https://www.bank.test/", 1, true},
		{"plain click elsewhere", policy.EffectAnyAction, "https://example.com/", -1, false},
		{"plain click on admin", policy.EffectAnyAction, "https://admin.example.com/users", 2, true},
		{"form on admin", policy.EffectFormSubmission, "https://admin.example.com/", 2, true},
		{"click on bank", policy.EffectAnyAction, "https://www.bank.test/", -1, false},
		// Unknown origin: every rule whose effect matches applies.
		{"form on about:blank", policy.EffectFormSubmission, "about:blank", 0, true},
		{"click on about:blank", policy.EffectAnyAction, "about:blank", 2, true},
		{"form, nil url", policy.EffectFormSubmission, "", 0, true},
		// Unknown effect: every rule applies.
		{"unknown effect", "drag_and_drop", "https://example.com/", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			i, ok := p.NeedsApproval(tt.effect, mustURL(t, tt.url))
			if i != tt.wantRule || ok != tt.want {
				t.Fatalf("NeedsApproval(%s, %q) = %d, %v; want %d, %v", tt.effect, tt.url, i, ok, tt.wantRule, tt.want)
			}
		})
	}

	anyAction := mustPolicy(t, nil, []policy.ApprovalRule{{Effect: policy.EffectAnyAction, Origins: []string{}}})
	for _, e := range policy.AllEffects() {
		if i, ok := anyAction.NeedsApproval(e, mustURL(t, "https://anything.test/")); i != 0 || !ok {
			t.Errorf("any_action rule: NeedsApproval(%s) = %d, %v; want 0, true", e, i, ok)
		}
	}
	none := mustPolicy(t, []string{"https://example.com"}, nil)
	if i, ok := none.NeedsApproval(policy.EffectFormSubmission, mustURL(t, "https://example.com/")); i != -1 || ok {
		t.Errorf("no rules: NeedsApproval = %d, %v", i, ok)
	}
	var nilPolicy *policy.Policy
	if i, ok := nilPolicy.NeedsApproval(policy.EffectAnyAction, nil); i != -1 || ok {
		t.Errorf("nil policy: NeedsApproval = %d, %v", i, ok)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	t.Parallel()
	_, err := policy.ParsePolicy(
		[]string{"https://ok.test", "https://bad.test/", "ws://x.test"},
		[]policy.ApprovalRule{
			{Effect: "submit"},
			{Effect: policy.EffectFileUpload, Origins: []string{"https://ok.test", "*"}},
		},
	)
	if err == nil {
		t.Fatal("ParsePolicy accepted invalid fields")
	}
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "allowed_origins[1]" || !errors.Is(fe, policy.ErrInvalidPattern) {
		t.Fatalf("first FieldError = %+v", fe)
	}
	if fe.Error() == "" {
		t.Error("empty FieldError message")
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("error %T does not join the field errors", err)
	}
	var fields []string
	for _, e := range joined.Unwrap() {
		var fe *policy.FieldError
		if errors.As(e, &fe) {
			fields = append(fields, fe.Field)
		}
	}
	want := []string{"allowed_origins[1]", "allowed_origins[2]", "approval_rules[0].effect", "approval_rules[1].origins[1]"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields = %q, want %q", fields, want)
	}
	if !errors.Is(err, policy.ErrUnknownEffect) || !errors.Is(err, policy.ErrInvalidPattern) {
		t.Errorf("joined error %v does not wrap both sentinels", err)
	}
}

func TestParsePolicyCanonical(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t,
		[]string{"HTTPS://Example.com:443", "http://127.0.0.1:*"},
		[]policy.ApprovalRule{{Effect: policy.EffectFormSubmission, Origins: []string{"https://*.Bank.test:443"}}, {Effect: policy.EffectAnyAction}},
	)
	var allowed []string
	for _, pat := range p.AllowedOrigins() {
		allowed = append(allowed, pat.String())
	}
	if !slices.Equal(allowed, []string{"https://example.com", "http://127.0.0.1:*"}) {
		t.Errorf("AllowedOrigins() = %q", allowed)
	}
	rules := p.ApprovalRules()
	if len(rules) != 2 || rules[0].Effect != policy.EffectFormSubmission ||
		!slices.Equal(rules[0].Origins, []string{"https://*.bank.test"}) ||
		rules[1].Effect != policy.EffectAnyAction || rules[1].Origins != nil {
		t.Errorf("ApprovalRules() = %+v", rules)
	}
	// The accessors return copies.
	p.AllowedOrigins()[0] = policy.Pattern{}
	p.ApprovalRules()[0].Origins[0] = "mutated"
	if p.AllowedOrigins()[0].String() != "https://example.com" || p.ApprovalRules()[0].Origins[0] != "https://*.bank.test" {
		t.Error("accessors share state with the policy")
	}
}

func TestParseEffect(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"form_submission", "file_upload", "any_action"} {
		if e, err := policy.ParseEffect(name); err != nil || string(e) != name || !e.Valid() {
			t.Errorf("ParseEffect(%q) = %q, %v", name, e, err)
		}
	}
	for _, bad := range []string{"", "Form_Submission", "click", "any"} {
		if e, err := policy.ParseEffect(bad); !errors.Is(err, policy.ErrUnknownEffect) || e != "" {
			t.Errorf("ParseEffect(%q) = %q, %v", bad, e, err)
		}
	}
	if len(policy.AllEffects()) != 3 {
		t.Errorf("AllEffects() = %v", policy.AllEffects())
	}
}
