package auth

import (
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/token/jwt"
)

// Session is what fosite keeps with every authorization code and token: who the grant is for.
// It builds fresh JWT claims for each access token (so a refreshed token never inherits the `iat`
// of the first one) with the RFC 9068 claims `client_id` and our `tenant`.
type Session struct {
	Subject   string                         `json:"sub"`
	Tenant    string                         `json:"tenant"`
	ClientID  string                         `json:"client_id"`
	Username  string                         `json:"username,omitempty"`
	ExpiresAt map[fosite.TokenType]time.Time `json:"expires_at,omitempty"`
}

var _ oauth2.JWTSessionContainer = (*Session)(nil)

// SetExpiresAt implements fosite.Session.
func (s *Session) SetExpiresAt(key fosite.TokenType, exp time.Time) {
	if s.ExpiresAt == nil {
		s.ExpiresAt = map[fosite.TokenType]time.Time{}
	}
	s.ExpiresAt[key] = exp
}

// GetExpiresAt implements fosite.Session.
func (s *Session) GetExpiresAt(key fosite.TokenType) time.Time {
	if s == nil || s.ExpiresAt == nil {
		return time.Time{}
	}
	return s.ExpiresAt[key]
}

// GetUsername implements fosite.Session.
func (s *Session) GetUsername() string {
	if s == nil {
		return ""
	}
	return s.Username
}

// GetSubject implements fosite.Session.
func (s *Session) GetSubject() string {
	if s == nil {
		return ""
	}
	return s.Subject
}

// Clone implements fosite.Session.
func (s *Session) Clone() fosite.Session {
	if s == nil {
		return nil
	}
	c := *s
	c.ExpiresAt = make(map[fosite.TokenType]time.Time, len(s.ExpiresAt))
	for k, v := range s.ExpiresAt {
		c.ExpiresAt[k] = v
	}
	return &c
}

// GetJWTClaims implements oauth2.JWTSessionContainer: new claims every time (fosite fills exp,
// scope, aud, iat and iss; an empty JTI makes it generate a random one per token).
func (s *Session) GetJWTClaims() jwt.JWTClaimsContainer {
	return &jwt.JWTClaims{
		Subject: s.Subject,
		Extra:   map[string]any{"client_id": s.ClientID, "tenant": s.Tenant},
	}
}

// GetJWTHeader implements oauth2.JWTSessionContainer: RFC 9068 §2.1 `typ`.
func (s *Session) GetJWTHeader() *jwt.Headers {
	return &jwt.Headers{Extra: map[string]any{"typ": "at+jwt"}}
}
