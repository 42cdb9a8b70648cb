package mcpserver

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// MRTR (SEP-2322) hands the client an opaque requestState that it must echo on its retry. The
// client controls what it echoes, so the state is sealed: an HMAC-SHA256 over the payload, its
// expiry, and what it is bound to — the caller, the method, the tool (or prompt) name and a digest
// of the canonical arguments. A state that was altered, has expired, or is presented by another
// caller or with other arguments (a replay elsewhere) is refused with -32602. A state may be
// presented more than once for the same call: a client re-issues a request whose response stream
// broke, with the same state.

// sealer seals and opens request states.
type sealer struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

var errBadState = errors.New("invalid requestState")

// stateBinding is what a request state is bound to.
type stateBinding struct {
	owner, method, name string
	args                json.RawMessage
}

func (b stateBinding) mac(key []byte, head []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range []string{"bap-mcp-request-state/v1", b.owner, b.method, b.name} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	sum := sha256.Sum256(canonicalJSON(b.args))
	m.Write(sum[:])
	m.Write(head)
	return m.Sum(nil)
}

// seal returns the state carrying payload for a request bound to b.
func (s sealer) seal(b stateBinding, payload string) string {
	head := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint64(head, uint64(s.now().Add(s.ttl).Unix()))
	head = append(head, payload...)
	return base64.RawURLEncoding.EncodeToString(head) + "." + base64.RawURLEncoding.EncodeToString(b.mac(s.key, head))
}

// open verifies state for a request bound to b and returns its payload.
func (s sealer) open(b stateBinding, state string) (string, error) {
	h, m, ok := strings.Cut(state, ".")
	if !ok {
		return "", errBadState
	}
	head, err1 := base64.RawURLEncoding.Strict().DecodeString(h)
	mac, err2 := base64.RawURLEncoding.Strict().DecodeString(m)
	if err1 != nil || err2 != nil || len(head) < 8 || !hmac.Equal(mac, b.mac(s.key, head)) {
		return "", errBadState
	}
	if s.now().Unix() > int64(binary.BigEndian.Uint64(head[:8])) {
		return "", errBadState
	}
	return string(head[8:]), nil
}

// stateError is the JSON-RPC error of a refused request state.
func stateError() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
		Message: "invalid requestState: it was altered, has expired, or belongs to another request"}
}

// canonicalJSON re-encodes v with sorted keys and no insignificant space (numbers kept as
// written), so that equal arguments give equal digests. Invalid or empty JSON is itself.
func canonicalJSON(v json.RawMessage) []byte {
	if len(bytes.TrimSpace(v)) == 0 {
		return []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return v
	}
	out, err := json.Marshal(x)
	if err != nil {
		return v
	}
	return out
}
