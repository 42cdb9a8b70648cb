package evidencebundle

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
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
	members := []Member{{Name: HistoryName, Data: history}, {Name: AnchorsName, Data: anchors}, {Name: ProvenanceName, Data: prov},
		{Name: ArtifactMember("art_1"), Data: []byte("png")}}
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
		err := Write(&bytes.Buffer{}, "local", "tsk_a", time.Now(), []Member{{Name: name}}, f.signer)
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

// opened is a member read through Open from what *content holds at each call.
func opened(name string, content *[]byte, opens *int) Member {
	return Member{Name: name, Open: func() (io.ReadCloser, error) {
		*opens++
		return io.NopCloser(bytes.NewReader(*content)), nil
	}}
}

// TestOpenedMembersAreStreamedAndChecked: a member given as a way to read it (the archive, the
// artifacts: what is too large to hold) is read once for its digest and once per write; the
// bundle is the same bytes every write, and verifies; a member that reads differently the second
// time fails the write with ErrMemberChanged, whether it changed, grew or shrank.
func TestOpenedMembersAreStreamedAndChecked(t *testing.T) {
	f := newFixture(t, 3)
	history, err := HistoryJSONL(f.events)
	if err != nil {
		t.Fatal(err)
	}
	anchors, _ := AnchorsJSON([]AnchorLine{f.anchor})
	archive := bytes.Repeat([]byte("WARC/1.1\r\n"), 50_000)
	opens := 0
	members := []Member{{Name: HistoryName, Data: history}, {Name: AnchorsName, Data: anchors},
		opened(ArchiveMember("sessions.warc"), &archive, &opens)}
	b, err := Prepare("local", "tsk_a", time.Now(), members, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	var first, second bytes.Buffer
	n1, err1 := b.WriteTo(&first)
	n2, err2 := b.WriteTo(&second)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if n1 != int64(first.Len()) || !bytes.Equal(first.Bytes(), second.Bytes()) || opens != 3 {
		t.Fatalf("two writes: %d and %d bytes (counted %d, %d), equal %v, opened %d times (want 3)",
			first.Len(), second.Len(), n1, n2, bytes.Equal(first.Bytes(), second.Bytes()), opens)
	}
	rep, err := Verify(bytes.NewReader(first.Bytes()), f.keys)
	if err != nil || !rep.Valid {
		t.Fatalf("the streamed bundle does not verify: %+v, %v", rep, err)
	}
	members2, err := readTar(bytes.NewReader(first.Bytes()))
	if err != nil || members2[ArchiveMember("sessions.warc")].sum != sha256.Sum256(archive) {
		t.Fatalf("the archive member is not the archive's bytes (%v)", err)
	}

	for _, c := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"changed", func(b []byte) []byte { c := bytes.Clone(b); c[10] ^= 1; return c }},
		{"grew", func(b []byte) []byte { return append(bytes.Clone(b), 'x') }},
		{"shrank", func(b []byte) []byte { return b[:len(b)-1] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			content := archive
			b, err := Prepare("local", "tsk_a", time.Now(), []Member{{Name: HistoryName, Data: history},
				opened(ArchiveMember("sessions.warc"), &content, new(int))}, f.signer)
			if err != nil {
				t.Fatal(err)
			}
			content = c.edit(archive)
			if _, err := b.WriteTo(io.Discard); !errors.Is(err, ErrMemberChanged) {
				t.Fatalf("write after the member %s: %v, want ErrMemberChanged", c.name, err)
			}
		})
	}

	// An append-only member that grew is written as it was digested; one whose digested bytes
	// changed still fails.
	content := archive
	grows := opened(ArchiveMember("sessions.warc"), &content, new(int))
	grows.AppendOnly = true
	b, err = Prepare("local", "tsk_a", time.Now(), []Member{{Name: HistoryName, Data: history}, grows}, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	var before bytes.Buffer
	if _, err := b.WriteTo(&before); err != nil {
		t.Fatal(err)
	}
	content = append(bytes.Clone(archive), "WARC/1.1 appended"...)
	var after bytes.Buffer
	if _, err := b.WriteTo(&after); err != nil || !bytes.Equal(before.Bytes(), after.Bytes()) {
		t.Fatalf("an append-only member that grew: %v, same bytes %v", err, bytes.Equal(before.Bytes(), after.Bytes()))
	}
	content = bytes.Clone(archive)
	content[0] ^= 1
	if _, err := b.WriteTo(io.Discard); !errors.Is(err, ErrMemberChanged) {
		t.Fatalf("an append-only member whose digested bytes changed: %v, want ErrMemberChanged", err)
	}
}

// TestVerifyDigestsWhatItDoesNotParse: Verify holds in memory only the members it parses
// (manifest, signature, history, anchors); an archive or artifact streams through its digest, so
// `bap bundle verify` of a large bundle needs little memory. A verifier that held the members
// allocated at least the archive's size.
func TestVerifyDigestsWhatItDoesNotParse(t *testing.T) {
	f := newFixture(t, 3)
	archive := bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32 MiB
	raw := f.bundle(t, func(m []Member) []Member {
		return append(m, Member{Name: ArchiveMember("sessions.warc"), Data: archive})
	})
	archive = nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rep, err := Verify(bytes.NewReader(raw), f.keys)
	runtime.ReadMemStats(&after)
	if err != nil || !rep.Valid {
		t.Fatalf("Verify: %+v, %v", rep, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("Verify of a bundle with a 32 MiB archive allocated %.1f MiB", float64(alloc)/(1<<20))
	}
}
