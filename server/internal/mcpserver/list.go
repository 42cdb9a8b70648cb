package mcpserver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// lister answers tools/list for the catalog: the tools whose capability the caller holds, in
// catalog (name) order, pageSize at a time. The next page is named by a cursor the server issued:
// an offset bound by HMAC to the caller, the scopes that shaped the list and the catalog build;
// any other cursor — unissued, tampered, another caller's or another build's — is -32602. The
// list depends on the caller's scopes, so it is cacheScope "private".
type lister struct {
	tools    []*mcp.Tool // catalog order
	scopes   map[string]string
	pageSize int
	ttlMs    int
	key      []byte
	build    string // digest of the catalog the offsets refer to
}

func (l *lister) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/list" {
			return next(ctx, method, req)
		}
		caller, _ := CallerFrom(ctx)
		var cursor string
		if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && p != nil {
			cursor = p.Cursor
		}
		return l.list(caller, cursor)
	}
}

func (l *lister) visible(c Caller) []*mcp.Tool {
	out := make([]*mcp.Tool, 0, len(l.tools))
	for _, t := range l.tools {
		if c.Scopes[l.scopes[t.Name]] {
			out = append(out, t)
		}
	}
	return out
}

func (l *lister) list(c Caller, cursor string) (*mcp.ListToolsResult, error) {
	tools := l.visible(c)
	offset := 0
	if cursor != "" {
		n, err := l.openCursor(c, cursor)
		if err != nil || n > len(tools) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor: use a nextCursor this server issued to you"}
		}
		offset = n
	}
	end := min(offset+l.pageSize, len(tools))
	res := &mcp.ListToolsResult{Tools: slices.Clone(tools[offset:end]), Cacheable: mcp.Cacheable{TTLMs: l.ttlMs, CacheScope: "private"}}
	if end < len(tools) {
		res.NextCursor = l.sealCursor(c, end)
	}
	return res, nil
}

// cursorMAC binds an offset to the caller, its scopes and the catalog build.
func (l *lister) cursorMAC(c Caller, offset []byte) []byte {
	scopes := make([]string, 0, len(c.Scopes))
	for s, ok := range c.Scopes {
		if ok {
			scopes = append(scopes, s)
		}
	}
	slices.Sort(scopes)
	m := hmac.New(sha256.New, l.key)
	for _, part := range []string{"bap-mcp-cursor/v1", "tools/list", c.owner(), strings.Join(scopes, " "), l.build} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	m.Write(offset)
	return m.Sum(nil)[:16]
}

func (l *lister) sealCursor(c Caller, offset int) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(offset))
	return base64.RawURLEncoding.EncodeToString(append(b[:], l.cursorMAC(c, b[:])...))
}

var errBadCursor = errors.New("invalid cursor")

func (l *lister) openCursor(c Caller, cursor string) (int, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil || len(raw) != 4+16 {
		return 0, errBadCursor
	}
	if !hmac.Equal(raw[4:], l.cursorMAC(c, raw[:4])) {
		return 0, errBadCursor
	}
	return int(binary.BigEndian.Uint32(raw[:4])), nil
}
