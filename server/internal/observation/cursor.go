package observation

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/originweave/bap/server/internal/page"
)

// A cursor is "oc_" + base64url(payload || HMAC-SHA256(session key, payload)[:16]), payload =
// version 2, offset u32, max_bytes u32, part u16, then length-prefixed observation, context and
// epoch ids. The key is the session keeper's own random key, so a cursor is good only for the
// session that issued it; the context and epoch it names are checked against the request's
// context and that context's current epoch.

const (
	cursorVersion = 2
	cursorMAC     = 16
	// cursorChars is the longest cursor's length after its oc_ prefix.
	cursorChars = 512
)

// errBadCursor is the one refusal of a cursor that is not an intact cursor of this session.
var errBadCursor = fmt.Errorf("%w: cursor is not a continuation cursor of this session", page.ErrInvalidRequest)

// cursorLen is the length (after oc_) of ob's cursors.
func cursorLen(ob *kept) int {
	return base64.RawURLEncoding.EncodedLen(1 + 4 + 4 + 2 + 3 + len(ob.id) + len(ob.contextID) + len(ob.epoch) + cursorMAC)
}

type cursor struct {
	obsID, contextID, epoch string
	offset, maxBytes, part  int
}

func sealCursor(key []byte, c cursor) string {
	p := []byte{cursorVersion}
	p = binary.BigEndian.AppendUint32(p, uint32(c.offset))
	p = binary.BigEndian.AppendUint32(p, uint32(c.maxBytes))
	p = binary.BigEndian.AppendUint16(p, uint16(c.part))
	for _, s := range []string{c.obsID, c.contextID, c.epoch} {
		p = append(p, byte(len(s)))
		p = append(p, s...)
	}
	m := hmac.New(sha256.New, key)
	m.Write(p)
	p = m.Sum(p)[:len(p)+cursorMAC]
	return "oc_" + base64.RawURLEncoding.EncodeToString(p)
}

// openCursor checks a cursor's seal and reads it. A cursor this keeper did not seal, or one
// altered in any byte, is refused with errBadCursor; nothing of it is read before its seal holds.
func openCursor(key []byte, s string) (cursor, error) {
	if len(s) < 4 || len(s) > 3+cursorChars || s[:3] != "oc_" {
		return cursor{}, errBadCursor
	}
	raw, err := base64.RawURLEncoding.DecodeString(s[3:])
	if err != nil || len(raw) < 1+4+4+2+3+cursorMAC {
		return cursor{}, errBadCursor
	}
	p, mac := raw[:len(raw)-cursorMAC], raw[len(raw)-cursorMAC:]
	m := hmac.New(sha256.New, key)
	m.Write(p)
	if !hmac.Equal(mac, m.Sum(nil)[:cursorMAC]) || p[0] != cursorVersion {
		return cursor{}, errBadCursor
	}
	c := cursor{
		offset:   int(binary.BigEndian.Uint32(p[1:5])),
		maxBytes: int(binary.BigEndian.Uint32(p[5:9])),
		part:     int(binary.BigEndian.Uint16(p[9:11])),
	}
	rest := p[11:]
	str := func() (string, bool) {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return "", false
		}
		v := string(rest[1 : 1+int(rest[0])])
		rest = rest[1+int(rest[0]):]
		return v, true
	}
	var ok [3]bool
	c.obsID, ok[0] = str()
	c.contextID, ok[1] = str()
	c.epoch, ok[2] = str()
	if ok != [3]bool{true, true, true} || len(rest) != 0 || !obsIDRe.MatchString(c.obsID) || !ctxIDRe.MatchString(c.contextID) ||
		!epIDRe.MatchString(c.epoch) || c.maxBytes < MinBytes || c.maxBytes > MaxBytes || c.part < 2 {
		return cursor{}, errBadCursor
	}
	return c, nil
}
