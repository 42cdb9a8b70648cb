package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// Node credentials (ADR 0012). A node that forwards a request to the node owning its object signs
// what it verified about the caller — tenant, subject, client, scopes — together with the exact
// request it forwards: method, path and query, a digest of the body and of the Idempotency-Key.
// The signature is an HMAC-SHA256 under a key every node derives from the cluster secret kept in
// the shared database. A credential names its audience (the owner node's id), lives 30 seconds
// and carries a random id that the owner accepts once. The client's own token never leaves the
// node that verified it.

// NodeCredentialHeader carries a node credential on a forwarded request.
const NodeCredentialHeader = "Bap-Node-Credential"

const (
	nodeCredentialVersion = 1
	nodeCredentialTTL     = 30 * time.Second
	nodeCredentialLeeway  = 5 * time.Second // clock skew between nodes
	nodeCredentialDomain  = "bap-node-credential/v1"
)

// NodeCredential is the signed content of a node credential.
type NodeCredential struct {
	Version  int      `json:"v"`
	Issuer   string   `json:"iss"` // the forwarding node
	Audience string   `json:"aud"` // the node the request is forwarded to
	Tenant   string   `json:"ten"`
	Subject  string   `json:"sub"`
	ClientID string   `json:"cid,omitempty"`
	Scopes   []string `json:"scp"`
	Via      string   `json:"via,omitempty"` // Principal.Via: a decision records it; it tells an elicited answer
	Method   string   `json:"m"`
	Path     string   `json:"p"`  // request URI: escaped path and query, as sent
	Body     string   `json:"bd"` // SHA-256 (hex) of the body
	Key      string   `json:"ik"` // SHA-256 (hex) of the Idempotency-Key header; "" without one
	IssuedAt int64    `json:"iat"`
	Expires  int64    `json:"exp"`
	ID       string   `json:"jti"`
}

// SignNodeCredential encodes c and signs it with key: base64url(JSON) "." base64url(HMAC).
func SignNodeCredential(key []byte, c NodeCredential) string {
	payload, _ := json.Marshal(c) // plain strings, numbers and a string slice: cannot fail
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + base64.RawURLEncoding.EncodeToString(nodeMAC(key, p))
}

func nodeMAC(key []byte, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(nodeCredentialDomain))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// NewNodeCredential is the credential for forwarding one request of p from node iss to node aud.
func NewNodeCredential(iss, aud string, p Principal, method, requestURI string, body []byte, idempotencyKey string, now time.Time) NodeCredential {
	scopes := make([]string, 0, len(p.Scopes))
	for _, s := range AllScopes { // a stable order
		if p.Scopes[s] {
			scopes = append(scopes, s)
		}
	}
	var jti [16]byte
	_, _ = rand.Read(jti[:])
	return NodeCredential{
		Version: nodeCredentialVersion, Issuer: iss, Audience: aud,
		Tenant: p.Actor.Tenant, Subject: p.Actor.Subject, ClientID: p.ClientID, Scopes: scopes, Via: p.Via,
		Method: method, Path: requestURI, Body: sha256Hex(body), Key: keyDigest(idempotencyKey),
		IssuedAt: now.Unix(), Expires: now.Add(nodeCredentialTTL).Unix(),
		ID: base64.RawURLEncoding.EncodeToString(jti[:]),
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func keyDigest(k string) string {
	if k == "" {
		return ""
	}
	return sha256Hex([]byte(k))
}

// errNodeCredential is every refusal of a node credential: the caller learns nothing about which
// check failed (the log does).
var errNodeCredential = &app.Error{Code: app.CodeUnauthenticated, Detail: "the node credential is not valid for this request"}

// nodeVerifier checks the node credentials this node receives. Safe for concurrent use.
type nodeVerifier struct {
	self string
	key  []byte
	now  func() time.Time

	mu        sync.Mutex
	seen      map[string]time.Time // credential id → when it may be forgotten
	lastSweep time.Time
}

func newNodeVerifier(self string, key []byte, now func() time.Time) *nodeVerifier {
	return &nodeVerifier{self: self, key: key, now: now, seen: map[string]time.Time{}}
}

// verify checks a credential presented for the request (method, requestURI, body, Idempotency-Key)
// and returns the caller it vouches for. A credential for a read is accepted once. One for a
// command (a mutating operation, which has an Idempotency-Key) is a delivery: the Principal carries it, and the
// inbox records it with the command (app/inbox.go), so the same credential presented again — the
// forwarding node's redelivery after a lost answer — is answered with the first response and
// never runs the command twice.
func (v *nodeVerifier) verify(raw, method, requestURI string, body []byte, idempotencyKey string, command bool) (Principal, error) {
	command = command && idempotencyKey != ""
	c, err := v.check(raw, method, requestURI, body, idempotencyKey, command)
	if err != nil {
		return Principal{}, fmt.Errorf("%w (%s)", errNodeCredential, err.Error())
	}
	scopes := make(map[string]bool, len(c.Scopes))
	for _, s := range c.Scopes {
		scopes[s] = true
	}
	p := Principal{Actor: app.Actor{Tenant: c.Tenant, Subject: c.Subject}, Scopes: scopes, ClientID: c.ClientID, Via: c.Via}
	if command {
		id, err := app.ParseDeliveryID(c.ID)
		if err != nil {
			return Principal{}, fmt.Errorf("%w (%s)", errNodeCredential, err.Error())
		}
		p.delivery = &app.Delivery{Source: app.NodeSource(c.Issuer), ID: id, Digest: c.deliveryDigest()}
	}
	return p, nil
}

// deliveryDigest is the digest of what a credential delivers: the caller it vouches for and the
// exact request. Every copy of one credential has it; a credential id that came again with
// another digest is refused by the inbox.
func (c *NodeCredential) deliveryDigest() [sha256.Size]byte {
	h := sha256.New()
	for _, f := range []string{c.Tenant, c.Subject, c.ClientID, c.Via, strings.Join(c.Scopes, " "), c.Method, c.Path, c.Body, c.Key} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

func (v *nodeVerifier) check(raw, method, requestURI string, body []byte, idempotencyKey string, command bool) (*NodeCredential, error) {
	p, m, ok := strings.Cut(raw, ".")
	if !ok {
		return nil, errors.New("malformed")
	}
	mac, err := base64.RawURLEncoding.Strict().DecodeString(m)
	if err != nil || !hmac.Equal(mac, nodeMAC(v.key, p)) {
		return nil, errors.New("bad signature")
	}
	payload, err := base64.RawURLEncoding.Strict().DecodeString(p)
	if err != nil {
		return nil, errors.New("malformed payload")
	}
	var c NodeCredential
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, errors.New("malformed payload")
	}
	now := v.now()
	switch {
	case c.Version != nodeCredentialVersion:
		return nil, errors.New("unknown version")
	case c.Audience != v.self:
		return nil, errors.New("issued for another node")
	case c.Issuer == "" || c.Issuer == v.self:
		return nil, errors.New("bad issuer")
	case c.Tenant == "" || c.Subject == "" || c.ID == "":
		return nil, errors.New("incomplete")
	case c.Expires-c.IssuedAt > int64(nodeCredentialTTL/time.Second):
		return nil, errors.New("lifetime too long")
	case now.After(time.Unix(c.Expires, 0).Add(nodeCredentialLeeway)):
		return nil, errors.New("expired")
	case time.Unix(c.IssuedAt, 0).After(now.Add(nodeCredentialLeeway)):
		return nil, errors.New("issued in the future")
	case c.Method != method || c.Path != requestURI:
		return nil, errors.New("issued for another request")
	case !hmac.Equal([]byte(c.Body), []byte(sha256Hex(body))):
		return nil, errors.New("issued for another body")
	case c.Key != keyDigest(idempotencyKey):
		return nil, errors.New("issued for another idempotency key")
	}
	if !v.once(c.ID, time.Unix(c.Expires, 0).Add(2*nodeCredentialLeeway), now) && !command {
		return nil, errors.New("replayed") // a read; a command's redelivery is the inbox's to answer
	}
	return &c, nil
}

// once records id until forget and reports whether it was new.
func (v *nodeVerifier) once(id string, forget, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if now.Sub(v.lastSweep) > time.Second {
		for k, until := range v.seen {
			if now.After(until) {
				delete(v.seen, k)
			}
		}
		v.lastSweep = now
	}
	if _, dup := v.seen[id]; dup {
		return false
	}
	v.seen[id] = forget
	return true
}
