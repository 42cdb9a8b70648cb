package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// Lifetimes of what the local sign-in hands out.
const (
	// LoginLinkTTL is how long a one-time login URL stays usable.
	LoginLinkTTL = 5 * time.Minute
	// SessionTTL is how long an operator session lasts, however active (then `bap console` again).
	SessionTTL = 12 * time.Hour
	// maxSessions bounds the sessions and links kept: the oldest go first.
	maxSessions = 256
)

// Session is a signed-in console session of the local profile.
type Session struct {
	// Actor is who the session acts as: the local operator.
	Actor app.Actor
	// CSRF is the token every request of the session must carry in the X-BAP-CSRF header.
	CSRF string
	// Expires ends the session.
	Expires time.Time
}

// Sessions keeps the local profile's login links and sessions in memory, each under the SHA-256
// of its token (a memory dump shows no usable token). A restart signs everyone out: `bap
// console` prints a new link. Safe for concurrent use.
type Sessions struct {
	mu       sync.Mutex
	links    map[[32]byte]link
	sessions map[[32]byte]*Session
	now      func() time.Time
}

type link struct {
	actor   app.Actor
	expires time.Time
}

// NewSessions returns an empty store; now is the clock (nil: time.Now).
func NewSessions(now func() time.Time) *Sessions {
	if now == nil {
		now = time.Now
	}
	return &Sessions{links: map[[32]byte]link{}, sessions: map[[32]byte]*Session{}, now: now}
}

func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func key(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// NewLink returns a one-time login token for actor, usable for LoginLinkTTL.
func (s *Sessions) NewLink(actor app.Actor) (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	tok := newToken()
	exp := s.now().Add(LoginLinkTTL)
	s.links[key(tok)] = link{actor: actor, expires: exp}
	return tok, exp
}

// Redeem spends a login token and opens a session: its cookie value and the session. ok is false
// for a token that is unknown, spent or expired.
func (s *Sessions) Redeem(token string) (cookie string, sess *Session, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(token)
	l, found := s.links[k]
	delete(s.links, k) // spent, whatever follows
	if !found || !s.now().Before(l.expires) {
		return "", nil, false
	}
	s.sweep()
	cookie = newToken()
	sess = &Session{Actor: l.actor, CSRF: newToken(), Expires: s.now().Add(SessionTTL)}
	s.sessions[key(cookie)] = sess
	return cookie, sess, true
}

// Lookup returns the live session of a cookie value.
func (s *Sessions) Lookup(cookie string) (*Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[key(cookie)]
	if !ok {
		return nil, false
	}
	if !s.now().Before(sess.Expires) {
		delete(s.sessions, key(cookie))
		return nil, false
	}
	return sess, true
}

// End signs a session out.
func (s *Sessions) End(cookie string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, key(cookie))
}

// sweep drops what expired and, past maxSessions, the sessions that end first. Called locked.
func (s *Sessions) sweep() {
	now := s.now()
	for k, l := range s.links {
		if !now.Before(l.expires) {
			delete(s.links, k)
		}
	}
	for k, v := range s.sessions {
		if !now.Before(v.Expires) {
			delete(s.sessions, k)
		}
	}
	for len(s.sessions) >= maxSessions {
		var oldest [32]byte
		var first time.Time
		for k, v := range s.sessions {
			if first.IsZero() || v.Expires.Before(first) {
				oldest, first = k, v.Expires
			}
		}
		delete(s.sessions, oldest)
	}
	for len(s.links) >= maxSessions {
		for k := range s.links {
			delete(s.links, k)
			break
		}
	}
}

// csrfOK compares a request's CSRF header with the session's in constant time.
func (s *Session) csrfOK(header string) bool {
	return header != "" && subtle.ConstantTimeCompare([]byte(header), []byte(s.CSRF)) == 1
}
