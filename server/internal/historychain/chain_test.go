package historychain

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCanonicalJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":1,"a":[true,null,"x"]}`, `{"a":[true,null,"x"],"b":1}`},
		{` { "a" : 1.50 } `, `{"a":15e-1}`},
		{`{"n":1e+21}`, `{"n":1e21}`},
		{`{"n":1000000000000000000000}`, `{"n":1e21}`}, {`{"n":100000000000000000000}`, `{"n":100000000000000000000}`},
		{`{"n":1e22}`, `{"n":1e22}`},
		{`{"n":-0}`, `{"n":0}`},
		{`{"n":0.000}`, `{"n":0}`},
		{`{"n":-12.3400e2}`, `{"n":-1234}`},
		{`{"n":9007199254740993}`, `{"n":9007199254740993}`},
		{`{"s":"<a&b>\u00e9\n\u0001\"\\"}`, "{\"s\":\"<a&b>\u00e9\\n\\u0001\\\"\\\\\"}"},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"é":1,"z":2,"Z":3}`, `{"Z":3,"z":2,"é":1}`},
		{`"\ud83d\ude00 \ud83d \u00e9\/"`, "\"\U0001F600 \uFFFD é/\""},
		{"\"\xff\"", "\"\uFFFD\""},
		{` [ 1 , { } , [ ] ] `, `[1,{},[]]`},
	}
	for _, c := range cases {
		got, err := CanonicalJSON([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("CanonicalJSON(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1} {}`, `{"n":1e9999999}`, strings.Repeat("[", 300) + strings.Repeat("]", 300),
		`"\q"`, `"\u12"`, `"\u12zz"`, `{"a" 1}`, `[1 2]`, `{1:2}`, `tru`, `"abc`, `"\ud83d\u12"`, `"a` + "\x01" + `"`, `-x`, `1.e5`} {
		if _, err := CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("CanonicalJSON(%.20q) accepted", bad)
		}
	}
}

// jsonb's respelling of a value (keys reordered by length, ", " separators, numbers respelled)
// gives the same canonical bytes as the value the server sent.
func TestCanonicalOfJSONBRespelling(t *testing.T) {
	sent := `{"url":"https://shop.example/a?b=1&c=2","status":200,"ratio":0.5,"big":1e+21,"nested":{"z":[1,2],"a":"x"}}`
	readBack := `{"big": 1000000000000000000000, "url": "https://shop.example/a?b=1&c=2", "ratio": 0.5, "nested": {"a": "x", "z": [1, 2]}, "status": 200}`
	a, err1 := CanonicalJSON([]byte(sent))
	b, err2 := CanonicalJSON([]byte(readBack))
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatalf("%s != %s", a, b)
	}
}

func testKey(t *testing.T) (*ecdsa.PrivateKey, string, KeySet) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := KeyID(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := PublicJWK(kid, &priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(JWKS{Keys: []JWK{{Kty: "RSA", Kid: "other"}, jwk}})
	keys, err := ParseKeySet(raw)
	if err != nil {
		t.Fatal(err)
	}
	return priv, kid, keys
}

// history builds n chained events of one task under key, and an anchor of the head.
func history(t *testing.T, key []byte, n int, priv *ecdsa.PrivateKey, kid string) ([]Event, []Anchor) {
	t.Helper()
	c := New(key)
	prev, public := Genesis, Genesis
	var evs []Event
	at := time.Date(2026, 12, 7, 10, 0, 0, 123456789, time.UTC)
	for i := 1; i <= n; i++ {
		e := Event{Entry: Entry{Tenant: "local", TaskID: "tsk_a", Seq: int64(i), EventID: fmt.Sprintf("evt_%d", i),
			Type: "task.state_changed", Time: at.Add(time.Duration(i) * time.Second), Actor: "agent:local", Cause: "act",
			CommandID: "cmd_x", Data: json.RawMessage(fmt.Sprintf(`{"to":"running","n":%d}`, i))}}
		canonical, err := e.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		e.PrevDigest, e.Digest = prev, c.Link(canonical, prev)
		prev, public = e.Digest, PublicLink(public, canonical)
		evs = append(evs, e)
	}
	st := NewStatement("local", "tsk_a", int64(n), prev, public, ReasonTaskEnded, at)
	jws, err := Sign(priv, kid, st)
	if err != nil {
		t.Fatal(err)
	}
	return evs, []Anchor{{Seq: int64(n), Digest: prev, HistorySHA256: public, Statement: jws}}
}

func TestVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	priv, kid, keys := testKey(t)
	_, _, otherKeys := testKey(t)
	type tc struct {
		name   string
		edit   func(evs []Event, as []Anchor) ([]Event, []Anchor, int64)
		key    []byte
		keys   KeySet
		seq    int64 // 0: valid
		reason string
	}
	cases := []tc{
		{name: "valid", key: key, keys: keys},
		{name: "valid offline", keys: keys},
		{name: "edited data", key: key, keys: keys, seq: 3, reason: BreakDigest, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			e[2].Data = json.RawMessage(`{"to":"succeeded","n":3}`)
			return e, a, 5
		}},
		{name: "edited data, offline: the anchor's public hash catches it", keys: keys, seq: 5, reason: BreakAnchor, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			e[2].Actor = "operator:local"
			return e, a, 5
		}},
		{name: "edited time", key: key, keys: keys, seq: 2, reason: BreakDigest, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			e[1].Time = e[1].Time.Add(time.Microsecond)
			return e, a, 5
		}},
		{name: "nanoseconds below the stored precision do not count", key: key, keys: keys, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			e[1].Time = e[1].Time.Truncate(time.Microsecond)
			return e, a, 5
		}},
		{name: "dropped event", key: key, keys: keys, seq: 2, reason: BreakMissing, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			return append(e[:1:1], e[2:]...), a, 5
		}},
		{name: "truncated tail against the anchor", key: key, keys: keys, seq: 4, reason: BreakMissing, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			return e[:3], a, 0
		}},
		{name: "truncated tail against the task's last seq", key: key, seq: 5, reason: BreakMissing, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			return e[:4], nil, 5
		}},
		{name: "re-linked after an edit", key: key, seq: 3, reason: BreakLink, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			e[2].PrevDigest = Genesis
			return e, nil, 5
		}},
		{name: "unchained after chained", key: key, seq: 4, reason: BreakUnchained, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			e[3].Digest, e[3].PrevDigest = nil, nil
			return e, nil, 5
		}},
		{name: "anchor signed by an unknown key", key: key, keys: otherKeys, seq: 5, reason: BreakAnchorSignature},
		{name: "anchor statement of another head", key: key, keys: keys, seq: 5, reason: BreakAnchorSignature, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			st := NewStatement("local", "tsk_a", 5, Genesis, Genesis, ReasonTaskEnded, time.Now())
			a[0].Statement, _ = Sign(priv, kid, st)
			return e, a, 5
		}},
		{name: "anchor statement of another task", key: key, keys: keys, seq: 5, reason: BreakAnchorSignature, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			st := NewStatement("local", "tsk_b", 5, a[0].Digest, a[0].HistorySHA256, ReasonTaskEnded, time.Now())
			a[0].Statement, _ = Sign(priv, kid, st)
			return e, a, 5
		}},
		{name: "tampered signature", key: key, keys: keys, seq: 5, reason: BreakAnchorSignature, edit: func(e []Event, a []Anchor) ([]Event, []Anchor, int64) {
			s := []byte(a[0].Statement)
			s[len(s)-2] ^= 1
			a[0].Statement = string(s)
			return e, a, 5
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, anchors := history(t, key, 5, priv, kid)
			last := int64(5)
			if c.edit != nil {
				evs, anchors, last = c.edit(evs, anchors)
			}
			r := Verify(c.key, evs, last, anchors, c.keys)
			switch {
			case c.seq == 0 && !r.Valid():
				t.Fatalf("broken at %d (%s: %s), want valid", r.Break.Seq, r.Break.Reason, r.Break.Detail)
			case c.seq == 0:
				if r.HeadSeq != 5 || r.ChainedFrom != 1 || len(r.Anchors) != 1 || !r.Anchors[0].Valid {
					t.Fatalf("report %+v", r)
				}
			case r.Valid():
				t.Fatalf("valid, want a break at %d (%s)", c.seq, c.reason)
			case r.Break.Seq != c.seq || r.Break.Reason != c.reason:
				t.Fatalf("broken at %d (%s: %s), want %d (%s)", r.Break.Seq, r.Break.Reason, r.Break.Detail, c.seq, c.reason)
			}
		})
	}
}

// Events from before the chain existed lead a task's history; the chain starts after them.
func TestVerifyLegacyPrefix(t *testing.T) {
	key := []byte("k")
	priv, kid, keys := testKey(t)
	evs, _ := history(t, key, 3, priv, kid)
	legacy := Event{Entry: Entry{Tenant: "local", TaskID: "tsk_a", Seq: 1, EventID: "evt_0", Type: "task.created", Data: json.RawMessage(`{}`)}}
	for i := range evs {
		evs[i].Seq++
	}
	// Relink: the seqs moved, so the digests are recomputed from the genesis.
	c, prev := New(key), Genesis
	for i := range evs {
		canonical, _ := evs[i].Canonical()
		evs[i].PrevDigest, evs[i].Digest = prev, c.Link(canonical, prev)
		prev = evs[i].Digest
	}
	r := Verify(key, append([]Event{legacy}, evs...), 4, nil, keys)
	if !r.Valid() || r.ChainedFrom != 2 || r.HeadSeq != 4 {
		t.Fatalf("report %+v break %+v", r, r.Break)
	}
}
