package idempotency

import "testing"

// createTaskBody is a typical create_task request body as a client sends it.
const createTaskBody = `{
  "goal": "order the cart on the shop and pay with the saved card",
  "policy": {
    "allowed_origins": ["https://shop.example.com", "https://*.payments.example.com"],
    "approval_rules": [{"effect": "form_submission", "origins": ["https://pay.example.com"]}]
  },
  "deadline": "2026-12-01T12:00:00Z"
}`

// BenchmarkNewFingerprint measures reducing a create_task request to its fingerprint, which the
// transport does once per mutating request (canonical JSON re-encoding plus HMAC-SHA256).
func BenchmarkNewFingerprint(b *testing.B) {
	fp := testFingerprinter(b, 1)
	body := []byte(createTaskBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fp.Fingerprint("create_task", nil, body); err != nil {
			b.Fatal(err)
		}
	}
}
