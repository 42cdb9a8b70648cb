package api

import (
	"context"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// recordingVerifier accepts every token and remembers the one it was asked about.
type recordingVerifier struct{ got *string }

func (v recordingVerifier) VerifyAccessToken(_ context.Context, token string) (app.Credential, error) {
	*v.got = token
	return app.Credential{Actor: app.Actor{Tenant: "acme", Subject: "client:c"}, ClientID: "c", Scopes: []string{"bap:tasks.read"}}, nil
}

// bearerRefusals are the only details the bearer authenticator refuses with before a token is
// verified: fixed strings, so no refusal can repeat what the caller sent.
var bearerRefusals = map[string]bool{
	errNoToken.Detail:                                          true,
	"more than one Authorization header":                       true,
	"the Authorization header must be `Bearer <access token>`": true,
}

// FuzzBearerHeader feeds arbitrary Authorization headers to the bearer authenticator.
// Properties: nothing panics; the verifier sees a token only for exactly one `Bearer <token>`
// header (scheme case-insensitive), and then the token as sent, without surrounding space; every
// refusal is unauthenticated with one of the fixed details (it never quotes the header), and its
// challenge is one header line.
func FuzzBearerHeader(f *testing.F) {
	for _, s := range []string{"Bearer abc.def.ghi", "bearer x", "BEARER  spaced  ", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ",
		"Bearer a b", " Bearer tok", "Bearer\ttok", "Token abc", "", "Bearer \r\nX-Injected: 1", "Bearer " + strings.Repeat("t", 9000)} {
		f.Add(s, false)
	}
	f.Add("Bearer one", true)
	f.Fuzz(func(t *testing.T, header string, twice bool) {
		got := "\x00unset"
		b := Bearer{Verifier: recordingVerifier{got: &got}, ResourceMetadataURL: "https://bap.example/.well-known/oauth-protected-resource"}
		r := httptest.NewRequest("GET", "/bap/v1/tasks/tsk_x", nil)
		r.Header["Authorization"] = []string{header}
		if twice {
			r.Header["Authorization"] = append(r.Header["Authorization"], header)
		}
		p, err := b.Authenticate(r)
		scheme, rest, hasSpace := strings.Cut(strings.TrimSpace(header), " ")
		wantToken := strings.TrimSpace(rest)
		want := !twice && hasSpace && strings.EqualFold(scheme, "Bearer") && wantToken != ""
		if err == nil {
			if !want || got != wantToken || p.Actor.Tenant != "acme" || !p.Scopes["bap:tasks.read"] {
				t.Fatalf("accepted %q (token %q)", header, got)
			}
			if got != strings.TrimSpace(got) || got == "" {
				t.Fatalf("the verifier got %q", got)
			}
			return
		}
		if want {
			t.Fatalf("refused %q: %v", header, err)
		}
		if got != "\x00unset" {
			t.Fatalf("the verifier was asked about a refused header %q", header)
		}
		e := app.AsError(err)
		if e == nil || e.Code != app.CodeUnauthenticated {
			t.Fatalf("refusal %v is not unauthenticated", err)
		}
		if !bearerRefusals[e.Detail] {
			t.Fatalf("refusal detail %q is not one of the fixed ones (it may quote the header)", e.Detail)
		}
		if ch := b.Challenge(err, ""); strings.ContainsAny(ch, "\r\n") {
			t.Fatalf("the challenge spans lines: %q", ch)
		}
	})
}

// FuzzLastEventID feeds arbitrary Last-Event-ID values of a task stream. Properties: nothing
// panics; an accepted value is a non-negative seq written exactly as the server writes its SSE
// ids, so it re-serialises to itself.
func FuzzLastEventID(f *testing.F) {
	for _, s := range []string{"0", "1", "42", "9223372036854775807", "9223372036854775808", "-1", "+1", "007", " 1", "1 ", "0x1", "", "1e3", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		n, ok := parseLastSeq(h)
		if !ok {
			return
		}
		if n < 0 || strconv.FormatInt(n, 10) != h {
			t.Fatalf("accepted %q as %d", h, n)
		}
	})
}

// FuzzNodeCredential feeds arbitrary node credentials (the header another node sends on a
// forwarded request), seeded with genuine ones and forgeries. Properties: nothing panics; every
// refusal wraps errNodeCredential (one answer, whatever failed); a credential is accepted only as
// signed for exactly this request, once for a read (again for a command only as the same delivery,
// which the inbox answers), and vouches for exactly whom it names.
func FuzzNodeCredential(f *testing.F) {
	key := []byte(strings.Repeat("k", 32))
	now := time.Unix(1_800_000_000, 0)
	p := Principal{Actor: app.Actor{Tenant: "acme", Subject: "client:c"}, ClientID: "c", Scopes: map[string]bool{"bap:browser.act": true, "bap:tasks.read": true}}
	const method, uri, body, idem = "POST", "/bap/v1/browser-sessions/bs_1/act", `{"action":"click"}`, "key-1"
	// A fixed credential id: the fuzzing workers are other processes, and must agree on the seed.
	cred := NewNodeCredential("node_a", "node_b", p, method, uri, []byte(body), idem, now)
	cred.ID = "fuzz-seed-credential-id"
	genuine := SignNodeCredential(key, cred)
	f.Add(genuine, method, uri, body, idem)
	f.Add(SignNodeCredential([]byte(strings.Repeat("x", 32)), NewNodeCredential("node_a", "node_b", p, method, uri, []byte(body), idem, now)), method, uri, body, idem)
	f.Add(SignNodeCredential(key, NewNodeCredential("node_b", "node_b", p, method, uri, []byte(body), idem, now)), method, uri, body, idem)
	f.Add(SignNodeCredential(key, NewNodeCredential("node_a", "node_c", p, method, uri, []byte(body), idem, now)), method, uri, body, idem)
	f.Add(SignNodeCredential(key, NewNodeCredential("node_a", "node_b", p, method, uri, []byte(body), idem, now.Add(-time.Hour))), method, uri, body, idem)
	f.Add(genuine, method, uri, `{"action":"fill"}`, idem)
	f.Add(genuine, method, uri+"?x=1", body, idem)
	f.Add(genuine, method, uri, body, "")
	f.Add("e30.", method, uri, body, idem)
	f.Add("..", "", "", "", "")
	f.Fuzz(func(t *testing.T, raw, m, u, bd, k string) {
		v := newNodeVerifier("node_b", key, func() time.Time { return now })
		got, err := v.verify(raw, m, u, []byte(bd), k, false)
		if err != nil {
			if !errors.Is(err, errNodeCredential) {
				t.Fatalf("refusal %v does not wrap errNodeCredential", err)
			}
			return
		}
		if raw != genuine || m != method || u != uri || bd != body || k != idem {
			t.Fatalf("accepted a credential not signed for this request: %q", raw)
		}
		if got.Actor != p.Actor || got.ClientID != p.ClientID || len(got.Scopes) != len(p.Scopes) {
			t.Fatalf("vouches for %+v", got)
		}
		if _, err := v.verify(raw, m, u, []byte(bd), k, false); !errors.Is(err, errNodeCredential) {
			t.Fatalf("a credential was accepted twice for a read")
		}
		// For a command it passes again as the same delivery (the inbox answers it), and only then.
		again, err := v.verify(raw, m, u, []byte(bd), k, true)
		switch {
		case k == "" && (err == nil || again.delivery != nil):
			t.Fatalf("a credential without a key was accepted twice: %+v", again)
		case k != "" && (err != nil || again.delivery == nil || again.delivery.ID != cred.ID || again.delivery.Source != "node:node_a"):
			t.Fatalf("a command's redelivery: %+v, %v", again.delivery, err)
		}
	})
}
