package bap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// tokenFake is a token endpoint (client credentials) and a BAP API that wants its tokens.
type tokenFake struct {
	mu       sync.Mutex
	issued   int
	forms    []map[string]string
	revoked  map[string]bool
	lifetime int
}

func (f *tokenFake) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /oauth2/token", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id, secret, ok := r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		if !ok || id != "cli_1" || secret != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
			return
		}
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		form := map[string]string{}
		for k := range r.PostForm {
			form[k] = r.PostForm.Get(k)
		}
		f.forms = append(f.forms, form)
		if form["grant_type"] != "client_credentials" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"unsupported_grant_type"}`)
			return
		}
		f.issued++
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("tok-%d", f.issued), "token_type": "bearer", "expires_in": f.lifetime})
	})
	mux.HandleFunc("GET /bap/v1/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		auth := r.Header.Get("Authorization")
		if len(auth) < 8 || f.revoked[auth[7:]] {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"type":"urn:bap:problem:unauthenticated","title":"Unauthenticated","status":401,"detail":"no valid token","code":"unauthenticated"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"task":{"task_id":%q,"state":"admitted","goal":%q,"created_at":"2026-11-20T09:15:00Z","updated_at":"2026-11-20T09:15:00Z","policy":{"allowed_origins":["https://a.example"]}}}`,
			r.PathValue("id"), auth[7:])
	})
	return mux
}

func TestWithClientCredentialsCachesUntilNearExpiry(t *testing.T) {
	f := &tokenFake{lifetime: 900, revoked: map[string]bool{}}
	srv := httptest.NewServer(f.handler(t))
	defer srv.Close()
	now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	c := NewClient(srv.URL, WithClientCredentials(srv.URL+"/oauth2/token", "cli_1", "s3cret", srv.URL, "bap:tasks.read", "bap:tasks.write"))
	c.tokenSourceForTest().Now = func() time.Time { return now }
	ctx := context.Background()

	goal := func() string {
		t.Helper()
		r, err := c.GetTask(ctx, "tsk_1")
		if err != nil {
			t.Fatal(err)
		}
		return r.Task.Goal // the fake echoes the token as the goal
	}
	if g := goal(); g != "tok-1" {
		t.Fatalf("first call used %q", g)
	}
	now = now.Add(869 * time.Second) // 900 s lifetime, renewed 30 s early
	if g := goal(); g != "tok-1" {
		t.Fatalf("a cached token was replaced early: %q", g)
	}
	now = now.Add(2 * time.Second)
	if g := goal(); g != "tok-2" {
		t.Fatalf("near expiry the token was not renewed: %q", g)
	}
	if len(f.forms) != 2 {
		t.Fatalf("%d token requests, want 2", len(f.forms))
	}
	want := map[string]string{"grant_type": "client_credentials", "resource": srv.URL, "scope": "bap:tasks.read bap:tasks.write"}
	if fmt.Sprint(f.forms[0]) != fmt.Sprint(want) {
		t.Fatalf("token request form %v, want %v", f.forms[0], want)
	}

	// A token the server stopped accepting: one fresh token, one retry.
	f.mu.Lock()
	f.revoked["tok-2"] = true
	f.mu.Unlock()
	if g := goal(); g != "tok-3" {
		t.Fatalf("after a 401 the call did not retry with a fresh token: %q", g)
	}
	// A token that is refused again is the caller's problem, not a loop.
	f.mu.Lock()
	f.revoked["tok-3"], f.revoked["tok-4"] = true, true
	f.mu.Unlock()
	if _, err := c.GetTask(ctx, "tsk_1"); !IsProblem(err, ProblemCodeUnauthenticated) {
		t.Fatalf("want 401 unauthenticated, got %v", err)
	}
	if f.issued != 4 {
		t.Fatalf("%d tokens issued, want 4", f.issued)
	}
}

func TestWithClientCredentialsTokenErrors(t *testing.T) {
	f := &tokenFake{lifetime: 900, revoked: map[string]bool{}}
	srv := httptest.NewServer(f.handler(t))
	defer srv.Close()
	c := NewClient(srv.URL, WithClientCredentials(srv.URL+"/oauth2/token", "cli_1", "wrong", srv.URL), WithRetry(1))
	_, err := c.GetTask(context.Background(), "tsk_1")
	var te *TokenError
	if !errors.As(err, &te) || te.Status != 401 || te.Code != "invalid_client" {
		t.Fatalf("want a *TokenError 401 invalid_client, got %v", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("the error %q shows the secret", err)
	}
}

// tokenSourceForTest returns the ClientCredentials behind a client built WithClientCredentials.
func (c *Client) tokenSourceForTest() *ClientCredentials { return c.credentials }
