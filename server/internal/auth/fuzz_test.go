package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// FuzzVerifyJWT feeds arbitrary strings to the resource-server check of access tokens, seeded
// with a genuine token and forgeries of it (signed with another key, or with this server's key
// but a header or lifetime it refuses). Properties: nothing panics; every refusal is an
// *app.Error with code unauthenticated whose detail never quotes the token; and anything
// accepted carries exactly the genuine token's signed header and claims (only a signature
// segment written differently can decode to the same signature — and revocation, keyed by the
// signature as sent, refuses that one).
func FuzzVerifyJWT(f *testing.F) {
	b := setupWith(f, time.Minute, 0, nil)
	c := b.client("acme", "bap:tasks.read")
	genuine := b.accessToken(c)
	signed := genuine[:strings.LastIndexByte(genuine, '.')]
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.Add(genuine)
	f.Add(b.forge(genuine, other, nil, nil))
	f.Add(b.forge(genuine, nil, func(h map[string]any) { h["alg"] = "none" }, nil))
	f.Add(b.forge(genuine, nil, func(h map[string]any) { h["typ"] = "JWT" }, nil))
	f.Add(b.forge(genuine, nil, func(h map[string]any) { h["crit"] = []string{"exp"} }, nil))
	f.Add(b.forge(genuine, other, nil, func(cl map[string]any) { cl["tenant"] = "victim" }))
	f.Add(b.forge(genuine, other, nil, func(cl map[string]any) { cl["aud"] = []string{"https://elsewhere.example"} }))
	f.Add(b.forge(genuine, nil, nil, func(cl map[string]any) { cl["exp"] = 1e300 }))
	f.Add(b.forge(genuine, nil, nil, func(cl map[string]any) { delete(cl, "exp") }))
	f.Add(signed + ".")
	f.Add("a.b.c")
	f.Add("..")
	f.Add(strings.Repeat("A", 9000))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","typ":"at+jwt","kid":"x"}`)) + ".e30.AAAA")
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, token string) {
		claims, err := b.srv.verifyJWT(ctx, token)
		if err != nil {
			e := app.AsError(err)
			if e == nil || e.Code != app.CodeUnauthenticated {
				t.Fatalf("refusal %v is not unauthenticated", err)
			}
			if len(token) >= 8 && strings.Contains(e.Detail, token) {
				t.Fatalf("the refusal quotes the token")
			}
			return
		}
		if got := token[:strings.LastIndexByte(token, '.')]; got != signed {
			t.Fatalf("accepted a token whose signed part differs from the genuine one: %q", got)
		}
		if claims.Tenant != "acme" || claims.ClientID != c.ClientID {
			t.Fatalf("accepted claims %+v", claims)
		}
		if token != genuine {
			// Same signature, written differently: the full check refuses it (revocation is keyed
			// by the signature exactly as issued).
			if _, err := b.srv.VerifyAccessToken(ctx, token); err == nil {
				t.Fatalf("a re-encoded signature passed the full check")
			}
		}
	})
}
