package bap

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// WithClientCredentials authenticates the client in the remote profile with the OAuth 2.0
// client credentials grant (RFC 6749 §4.4): before a call it asks tokenURL (the server's
// `/oauth2/token`, e.g. "https://bap.example.com/oauth2/token") for an access token bound to
// resource (RFC 8707; the server's URL, e.g. "https://bap.example.com"), authenticating with
// clientID and secret (client_secret_basic), and caches the token until shortly before it expires
// (a quarter of its lifetime, at most 30 s, early). scopes narrow the token (none: every scope
// the client was registered with). A 401 answer drops the cached token and the call is retried
// once with a fresh one. Errors of the token endpoint fail the call with a *TokenError.
//
//	c := bap.NewClient("https://bap.example.com",
//		bap.WithClientCredentials("https://bap.example.com/oauth2/token", id, secret, "https://bap.example.com"))
func WithClientCredentials(tokenURL, clientID, secret, resource string, scopes ...string) Option {
	return func(c *config) {
		c.credentials = &ClientCredentials{TokenURL: tokenURL, ClientID: clientID, ClientSecret: secret,
			Resource: resource, Scopes: append([]string(nil), scopes...)}
	}
}

// ClientCredentials is an OAuth 2.0 client credentials token source with a cache (see
// WithClientCredentials). Its Token method may be used on its own, e.g. with WithTokenSource.
// It is safe for concurrent use.
type ClientCredentials struct {
	// TokenURL is the authorization server's token endpoint.
	TokenURL string
	// ClientID identifies the OAuth client.
	ClientID string
	// ClientSecret authenticates the client to the token endpoint; it is sent only there.
	ClientSecret string
	// Resource is the RFC 8707 resource indicator (the BAP server's URL).
	Resource string
	// Scopes narrow the token; none asks for every scope the client was registered with.
	Scopes []string
	// HTTPClient sends the token requests (nil: http.DefaultClient).
	HTTPClient *http.Client
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time

	mu      sync.Mutex
	token   string
	refresh time.Time // when the cached token is to be replaced
}

// TokenError is an error answer of the token endpoint (RFC 6749 §5.2).
type TokenError struct {
	// Status is the HTTP status of the answer.
	Status int
	// Code is the OAuth error code ("invalid_client", "invalid_target", …), or "".
	Code string
	// Description is the answer's error_description, or "".
	Description string
}

// Error describes the answer: its status, code and description.
func (e *TokenError) Error() string {
	s := fmt.Sprintf("bap: token endpoint: %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

// Token returns a cached access token, or a new one when none is cached or it is about to expire.
func (cc *ClientCredentials) Token(ctx context.Context) (string, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	now := cc.now()
	if cc.token != "" && now.Before(cc.refresh) {
		return cc.token, nil
	}
	tok, lifetime, err := cc.fetch(ctx)
	if err != nil {
		return "", err
	}
	early := min(lifetime/4, 30*time.Second)
	cc.token, cc.refresh = tok, now.Add(lifetime-early)
	return tok, nil
}

// Invalidate drops the cached token: the next Token call asks for a new one.
func (cc *ClientCredentials) Invalidate() {
	cc.mu.Lock()
	cc.token, cc.refresh = "", time.Time{}
	cc.mu.Unlock()
}

func (cc *ClientCredentials) now() time.Time {
	if cc.Now != nil {
		return cc.Now()
	}
	return time.Now()
}

func (cc *ClientCredentials) fetch(ctx context.Context) (string, time.Duration, error) {
	form := url.Values{"grant_type": {"client_credentials"}}
	if cc.Resource != "" {
		form.Set("resource", cc.Resource)
	}
	if len(cc.Scopes) > 0 {
		form.Set("scope", strings.Join(cc.Scopes, " "))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cc.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("bap: token endpoint: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 §2.3.1: the client id and secret are form-urlencoded before Basic encoding.
	req.SetBasicAuth(url.QueryEscape(cc.ClientID), url.QueryEscape(cc.ClientSecret))
	hc := cc.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("bap: token endpoint: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", 0, fmt.Errorf("bap: token endpoint: %w", err)
	}
	var out struct {
		AccessToken string      `json:"access_token"`
		TokenType   string      `json:"token_type"`
		ExpiresIn   json.Number `json:"expires_in"`
		Error       string      `json:"error"`
		Description string      `json:"error_description"`
	}
	_ = json.Unmarshal(body, &out)
	if resp.StatusCode != http.StatusOK {
		return "", 0, &TokenError{Status: resp.StatusCode, Code: out.Error, Description: out.Description}
	}
	if out.AccessToken == "" || (out.TokenType != "" && !strings.EqualFold(out.TokenType, "bearer")) {
		return "", 0, &TokenError{Status: resp.StatusCode, Description: "the answer holds no bearer access_token"}
	}
	lifetime := 60 * time.Second // RFC 6749 §5.1: expires_in is RECOMMENDED; assume a short life without it
	if s, err := out.ExpiresIn.Float64(); err == nil && s > 0 {
		lifetime = time.Duration(s * float64(time.Second))
	}
	return out.AccessToken, lifetime, nil
}
