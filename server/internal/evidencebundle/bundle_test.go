package evidencebundle

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/historychain"
)

type fixture struct {
	signer Signer
	keys   historychain.KeySet
	events []historychain.Event
	anchor AnchorLine
}

func newFixture(t testing.TB, n int) *fixture {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := historychain.KeyID(&priv.PublicKey)
	f := &fixture{signer: Signer{Key: priv, KeyID: kid}, keys: historychain.KeySet{kid: &priv.PublicKey}}
	c := historychain.New([]byte("server key"))
	prev, public := historychain.Genesis, historychain.Genesis
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for i := 1; i <= n; i++ {
		e := historychain.Event{Entry: historychain.Entry{Tenant: "local", TaskID: "tsk_a", Seq: int64(i), EventID: fmt.Sprintf("evt_%d", i),
			Type: "command.recorded", Time: at.Add(time.Duration(i) * time.Second), Actor: "agent:local", CommandID: fmt.Sprintf("cmd_%d", i),
			Data: json.RawMessage(fmt.Sprintf(`{"command_id":"cmd_%d","operation":"navigate"}`, i))}}
		canonical, err := e.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		e.PrevDigest, e.Digest = prev, c.Link(canonical, prev)
		prev, public = e.Digest, historychain.PublicLink(public, canonical)
		f.events = append(f.events, e)
	}
	st := historychain.NewStatement("local", "tsk_a", int64(n), prev, public, historychain.ReasonTaskEnded, at)
	jws, err := historychain.Sign(priv, kid, st)
	if err != nil {
		t.Fatal(err)
	}
	f.anchor = AnchorLine{Seq: int64(n), Digest: hex.EncodeToString(prev), HistorySHA256: hex.EncodeToString(public),
		Reason: historychain.ReasonTaskEnded, KeyID: kid, Statement: jws, AnchoredAt: at.Format(time.RFC3339Nano)}
	return f
}

func (f *fixture) bundle(t testing.TB, edit func(members []Member) []Member) []byte {
	t.Helper()
	history, err := HistoryJSONL(f.events)
	if err != nil {
		t.Fatal(err)
	}
	anchors, _ := AnchorsJSON([]AnchorLine{f.anchor})
	prov, err := BuildProvenance(TaskFacts{TaskID: "tsk_a", CreatedBy: "agent:local"}, f.events, nil)
	if err != nil {
		t.Fatal(err)
	}
	members := []Member{{HistoryName, history}, {AnchorsName, anchors}, {ProvenanceName, prov}, {ArtifactMember("art_1"), []byte("png")}}
	if edit != nil {
		members = edit(members)
	}
	var b bytes.Buffer
	if err := Write(&b, "local", "tsk_a", time.Now(), members, f.signer); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestVerifyBundle(t *testing.T) {
	f := newFixture(t, 4)
	other := newFixture(t, 4)
	cases := []struct {
		name    string
		build   func() []byte
		keys    historychain.KeySet
		problem string // "" valid; else the first problem's member
	}{
		{name: "valid", build: func() []byte { return f.bundle(t, nil) }, keys: f.keys},
		{name: "signed by a key not in the set", build: func() []byte { return f.bundle(t, nil) }, keys: other.keys, problem: SignatureName},
		{name: "an edited history, re-manifested by the server's key: the anchor catches it", keys: f.keys, problem: HistoryName, build: func() []byte {
			return f.bundle(t, func(m []Member) []Member {
				m[0].Data = bytes.Replace(m[0].Data, []byte(`"navigate"`), []byte(`"act"`), 1)
				return m
			})
		}},
		{name: "an unanchored tail", keys: f.keys, problem: HistoryName, build: func() []byte {
			g := *f
			g.events = append([]historychain.Event(nil), f.events...)
			more := newFixture(t, 5)
			g.events = more.events // five events, but the anchor pins the fixture's fourth
			g.anchor = f.anchor
			return g.bundle(t, nil)
		}},
		{name: "a member added after signing", keys: f.keys, problem: "extra.txt", build: func() []byte {
			return appendMember(t, f.bundle(t, nil), "extra.txt", []byte("x"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Verify(bytes.NewReader(c.build()), c.keys)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.problem == "" && !rep.Valid:
				t.Fatalf("problems %+v, want valid", rep.Problems)
			case c.problem != "" && (rep.Valid || rep.Problems[0].Member != c.problem):
				t.Fatalf("report %+v, want a problem with %s first", rep, c.problem)
			}
		})
	}
}

func TestWriteRefusesUnsafeNames(t *testing.T) {
	f := newFixture(t, 1)
	for _, name := range []string{"../x", "/etc/passwd", "a/../../b", "", ManifestName, "a\\b", "a//b"} {
		err := Write(&bytes.Buffer{}, "local", "tsk_a", time.Now(), []Member{{name, nil}}, f.signer)
		if err == nil || !strings.Contains(err.Error(), "member name") {
			t.Errorf("Write with member %q: %v", name, err)
		}
	}
}

// appendMember rewrites a bundle with one more member at its end (the manifest unchanged).
func appendMember(t testing.TB, bundle []byte, name string, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(bundle)), tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(tr)
		_ = tw.WriteHeader(h)
		_, _ = tw.Write(body.Bytes())
	}
	_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(data)
	_ = tw.Close()
	return out.Bytes()
}

// A bundle handed to `bap bundle verify` is untrusted input.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f, 3)
	f.Add(fx.bundle(f, nil))
	f.Add([]byte{})
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = Verify(bytes.NewReader(raw), fx.keys)
	})
}

func FuzzReadHistory(f *testing.F) {
	fx := newFixture(f, 2)
	h, _ := HistoryJSONL(fx.events)
	f.Add(h)
	f.Add([]byte(`{"seq":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = ReadHistory(raw)
	})
}
