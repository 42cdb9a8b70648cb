package auth

import (
	"context"
	"testing"
	"time"
)

// BenchmarkVerifyAccessToken is the per-request cost of the remote profile's resource-server check
// with the "active" answer cached (the common case): ES256 verification and claim checks.
func BenchmarkVerifyAccessToken(b *testing.B) {
	benchVerify(b, time.Minute)
}

// BenchmarkVerifyAccessTokenUncached adds the revocation lookup in PostgreSQL to every call.
func BenchmarkVerifyAccessTokenUncached(b *testing.B) {
	benchVerify(b, -time.Nanosecond) // negative: every answer is stale at once
}

func benchVerify(b *testing.B, cacheTTL time.Duration) {
	bd := setupBench(b, cacheTTL)
	tok := bd.accessToken(bd.client("acme", "bap:tasks.read"))
	ctx := context.Background()
	if _, err := bd.srv.VerifyAccessToken(ctx, tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := bd.srv.VerifyAccessToken(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}
