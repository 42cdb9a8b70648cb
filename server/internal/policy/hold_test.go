package policy

import (
	"net/url"
	"testing"
)

func TestHoldsRequest(t *testing.T) {
	t.Parallel()
	mustURL := func(s string) *url.URL {
		if s == "" {
			return nil
		}
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	shopOnly, err := ParsePolicy([]string{"https://shop.example.com", "https://pay.example.net"},
		[]ApprovalRule{{Effect: EffectFormSubmission, Origins: []string{"https://shop.example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	everywhere, err := ParsePolicy([]string{"https://shop.example.com"}, []ApprovalRule{{Effect: EffectFileUpload}, {Effect: EffectFormSubmission}})
	if err != nil {
		t.Fatal(err)
	}
	anyAction, err := ParsePolicy([]string{"https://shop.example.com"}, []ApprovalRule{{Effect: EffectAnyAction}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name         string
		p            *Policy
		method       string
		target, page string
		rule         int
		held         bool
	}{
		{"POST to the rule's origin", shopOnly, "POST", "https://shop.example.com/order", "https://shop.example.com/cart", 0, true},
		{"GET is safe", shopOnly, "GET", "https://shop.example.com/order", "https://shop.example.com/cart", -1, false},
		{"HEAD is safe", shopOnly, "head", "https://shop.example.com/", "https://shop.example.com/", -1, false},
		{"DELETE", shopOnly, "DELETE", "https://shop.example.com/cart/1", "https://shop.example.com/cart", 0, true},
		{"a made-up method is not safe", shopOnly, "BREW", "https://shop.example.com/pot", "https://shop.example.com/", 0, true},
		{"the page's origin is the rule's, the target another", shopOnly, "POST", "https://pay.example.net/charge", "https://shop.example.com/cart", 0, true},
		{"neither origin is the rule's", shopOnly, "POST", "https://pay.example.net/charge", "https://pay.example.net/", -1, false},
		{"an unknown page origin matches (fail safe)", shopOnly, "POST", "https://pay.example.net/charge", "", 0, true},
		{"a rule without origins holds every POST", everywhere, "PUT", "https://shop.example.com/x", "https://shop.example.com/", 1, true},
		{"any_action judges actions, not requests", anyAction, "POST", "https://shop.example.com/x", "https://shop.example.com/", -1, false},
	} {
		rule, held := tt.p.HoldsRequest(tt.method, mustURL(tt.target), mustURL(tt.page))
		if rule != tt.rule || held != tt.held {
			t.Errorf("%s: HoldsRequest = %d, %v; want %d, %v", tt.name, rule, held, tt.rule, tt.held)
		}
	}
	if !shopOnly.HoldsRequests() || !everywhere.HoldsRequests() || anyAction.HoldsRequests() {
		t.Error("HoldsRequests: only policies with a form_submission rule judge requests")
	}
	var nilPolicy *Policy
	if nilPolicy.HoldsRequests() {
		t.Error("a nil policy judges no requests")
	}
	if _, held := nilPolicy.HoldsRequest("POST", mustURL("https://a.example/"), nil); held {
		t.Error("a nil policy holds nothing")
	}
}
