// Package evidencebundle writes and checks evidence bundles (issue #20 item 3, ADR 0036): one
// POSIX tar file holding everything a third party needs to check what a finished task did — its
// history with the hash chain, the anchors, receipts, the task and its result, every artifact,
// the WARC archive of its sessions when it was recorded, and a W3C PROV-JSON document — and a
// manifest listing the SHA-256 of every member, signed with the server's audit key.
//
// Verify needs nothing but the bundle and the server's public audit keys (a JWKS): it checks the
// manifest's signature, every member against the manifest (naming a member that changed, is
// missing or was added), the history's chain links and public hash against the signed anchors,
// and that the last anchor pins the last event.
//
// The package is pure (standard library and historychain), so the use-cases build bundles with it
// and `bap bundle verify` checks them with the same code.
package evidencebundle

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/historychain"
)

// Format names the bundle layout; a reader refuses another.
const Format = "bap.evidence_bundle.v1"

// The members every bundle has, besides artifacts/ and archive/.
const (
	ManifestName    = "manifest.json"
	SignatureName   = "manifest.jws"
	HistoryName     = "history.jsonl"
	AnchorsName     = "anchors.json"
	TaskName        = "task.json"
	ReceiptsName    = "receipts.json"
	ArtifactsName   = "artifacts.json"
	ProvenanceName  = "prov.json"
	artifactsPrefix = "artifacts/"
	archivePrefix   = "archive/"
)

// manifestJWSType is the JWS "typ" of a manifest's signature.
const manifestJWSType = "bap-bundle-manifest+jws"

// Member is one file of a bundle: its bytes, or, for one too large to hold in memory (the
// archive, artifacts), a way to read them. Open is called once to digest the member in Prepare
// and once more each time the bundle is written; it must give the same bytes every time.
type Member struct {
	Name string
	Data []byte
	Open func() (io.ReadCloser, error)
	// SHA256 (hex) and Size, when set with Open, are the member's known digest and length (an
	// artifact's: content-addressed); Prepare then does not read it, and each write checks it.
	SHA256 string
	Size   int64
	// AppendOnly marks an opened member that may grow while the bundle is written (the archive of
	// a session still closing): each write carries its first Size bytes, the ones Prepare
	// digested, and only a change to those fails it.
	AppendOnly bool
}

// ErrMemberChanged reports a member whose bytes, read again to be written, are not the ones its
// manifest entry was made from: the bundle written so far is not to be used.
var ErrMemberChanged = errors.New("a bundle member changed while the bundle was written")

// Entry is one member as the manifest lists it.
type Entry struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Manifest lists a bundle's members.
type Manifest struct {
	Format     string  `json:"format"`
	Tenant     string  `json:"tenant_id"`
	TaskID     string  `json:"task_id"`
	ExportedAt string  `json:"exported_at"`
	Members    []Entry `json:"members"`
}

// manifestStatement is what the manifest's signature signs.
type manifestStatement struct {
	Type           string `json:"typ"`
	Tenant         string `json:"tenant_id"`
	TaskID         string `json:"task_id"`
	ManifestSHA256 string `json:"manifest_sha256"`
}

const manifestStatementType = "bap.bundle_manifest.v1"

// Signer is the audit key that signs a bundle's manifest.
type Signer struct {
	Key   *ecdsa.PrivateKey
	KeyID string
}

// Bundle is a bundle ready to be written: its members' digests, its manifest and the manifest's
// signature, made once by Prepare. WriteTo writes the same bytes every time, so a caller can
// write it once to learn its length and digest and once more to send it, holding no more than
// one member's bytes in memory when the members are opened rather than given.
type Bundle struct {
	at       time.Time
	manifest []byte
	jws      string
	members  []Member
	entries  []Entry
}

// Prepare checks the member names as Verify checks them, digests every member (reading the
// opened ones through once), and makes and signs the manifest of a bundle of members (in their
// order, after the manifest and its signature) for a task of tenant.
func Prepare(tenant, taskID string, at time.Time, members []Member, sign Signer) (*Bundle, error) {
	m := Manifest{Format: Format, Tenant: tenant, TaskID: taskID, ExportedAt: at.UTC().Format(time.RFC3339Nano)}
	seen := map[string]bool{}
	for _, mb := range members {
		if err := checkName(mb.Name); err != nil {
			return nil, err
		}
		if seen[mb.Name] {
			return nil, fmt.Errorf("member %s twice", mb.Name)
		}
		seen[mb.Name] = true
		sum, size, err := digest(mb)
		if err != nil {
			return nil, err
		}
		m.Members = append(m.Members, Entry{Name: mb.Name, SHA256: sum, Size: size})
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(manifest)
	jws, err := historychain.SignJWS(sign.Key, sign.KeyID, manifestJWSType,
		manifestStatement{Type: manifestStatementType, Tenant: tenant, TaskID: taskID, ManifestSHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		return nil, err
	}
	return &Bundle{at: at.UTC(), manifest: manifest, jws: jws, members: members, entries: m.Members}, nil
}

// digest returns a member's SHA-256 (hex) and size.
func digest(mb Member) (string, int64, error) {
	switch {
	case mb.Open == nil:
		sum := sha256.Sum256(mb.Data)
		return hex.EncodeToString(sum[:]), int64(len(mb.Data)), nil
	case mb.SHA256 != "":
		return mb.SHA256, mb.Size, nil
	}
	r, err := mb.Open()
	if err != nil {
		return "", 0, fmt.Errorf("reading member %s: %w", mb.Name, err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, fmt.Errorf("reading member %s: %w", mb.Name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// WriteTo writes the bundle as a tar file to w and returns the bytes written. A member that
// reads differently from when Prepare digested it fails with ErrMemberChanged.
func (b *Bundle) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	tw := tar.NewWriter(cw)
	header := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: b.at, Typeflag: tar.TypeReg, Format: tar.FormatPAX})
	}
	put := func(name string, data []byte) error {
		if err := header(name, int64(len(data))); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put(ManifestName, b.manifest); err != nil {
		return cw.n, err
	}
	if err := put(SignatureName, []byte(b.jws)); err != nil {
		return cw.n, err
	}
	for i, mb := range b.members {
		if mb.Open == nil {
			if err := put(mb.Name, mb.Data); err != nil {
				return cw.n, err
			}
			continue
		}
		if err := header(mb.Name, b.entries[i].Size); err != nil {
			return cw.n, err
		}
		if err := copyMember(tw, mb, b.entries[i]); err != nil {
			return cw.n, err
		}
	}
	err := tw.Close()
	return cw.n, err
}

// copyMember copies an opened member's bytes to w, checking them against its entry.
func copyMember(w io.Writer, mb Member, e Entry) error {
	r, err := mb.Open()
	if err != nil {
		return fmt.Errorf("reading member %s: %w", mb.Name, err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(w, h), r, e.Size); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: %s is shorter than %d bytes", ErrMemberChanged, mb.Name, e.Size)
		}
		return fmt.Errorf("reading member %s: %w", mb.Name, err)
	}
	if n, _ := io.ReadFull(r, make([]byte, 1)); n > 0 && !mb.AppendOnly {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrMemberChanged, mb.Name, e.Size)
	}
	if hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		return fmt.Errorf("%w: %s", ErrMemberChanged, mb.Name)
	}
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Write prepares a bundle of members (see Prepare) and writes it to w once.
func Write(w io.Writer, tenant, taskID string, at time.Time, members []Member, sign Signer) error {
	b, err := Prepare(tenant, taskID, at, members, sign)
	if err != nil {
		return err
	}
	_, err = b.WriteTo(w)
	return err
}

// ArtifactMember is the member name of an artifact's bytes.
func ArtifactMember(artifactID string) string { return artifactsPrefix + artifactID }

// ArchiveMember is the member name of a WARC file of the task's recording.
func ArchiveMember(name string) string { return archivePrefix + name }

// checkName refuses a member name that is not a plain relative path of the bundle's layout.
func checkName(name string) error {
	switch {
	case name == "" || len(name) > 200 || strings.ContainsAny(name, "\\\x00") || path.Clean(name) != name ||
		strings.HasPrefix(name, "/") || strings.HasPrefix(name, "../") || name == "..":
		return fmt.Errorf("member name %q is not a plain relative path", name)
	case name == ManifestName || name == SignatureName:
		return fmt.Errorf("member name %q is reserved", name)
	}
	return nil
}

// Limits on what Verify reads: a bundle handed to `bap bundle verify` may be hostile. Only the
// members it parses (manifest, signature, history, anchors) are held in memory, each at most
// maxReadBytes; the others are digested as they stream by.
const (
	maxMembers     = 100_000
	maxMemberBytes = 2 << 30
	maxTotalBytes  = 8 << 30
	maxReadBytes   = 512 << 20
)

// parsed names the members Verify reads, not only digests.
var parsed = map[string]bool{ManifestName: true, SignatureName: true, HistoryName: true, AnchorsName: true}

// readMember is one member as Verify read it: its digest and size, and its bytes when it is one
// Verify parses.
type readMember struct {
	sum  [sha256.Size]byte
	size int64
	data []byte
}

// Problem is one thing wrong with a bundle, naming the member it is about.
type Problem struct {
	Member string `json:"member"`
	Reason string `json:"reason"`
}

// Report is what Verify found.
type Report struct {
	Valid      bool      `json:"valid"`
	TaskID     string    `json:"task_id,omitempty"`
	Tenant     string    `json:"tenant_id,omitempty"`
	ExportedAt string    `json:"exported_at,omitempty"`
	Members    int       `json:"members"`
	Events     int       `json:"events"`
	Anchors    int       `json:"anchors"`
	HeadSeq    int64     `json:"head_seq"`
	Problems   []Problem `json:"problems"`
}

func (r *Report) problem(member, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Member: member, Reason: fmt.Sprintf(format, args...)})
}

// Verify reads a bundle from rd and checks it with the server's public audit keys: the manifest's
// signature, each member against the manifest, the history's chain against its anchors. A bundle
// it cannot read at all is an error; anything else wrong is a Problem of the report.
func Verify(rd io.Reader, keys historychain.KeySet) (*Report, error) {
	members, err := readTar(rd)
	if err != nil {
		return nil, err
	}
	r := &Report{}
	manifest, okM := members[ManifestName]
	sig, okS := members[SignatureName]
	manifestRaw, jws := manifest.data, sig.data
	if !okM || !okS {
		r.problem(ManifestName, "the bundle has no %s and %s", ManifestName, SignatureName)
		return r, nil
	}
	var st manifestStatement
	if _, err := historychain.ParseJWS(string(jws), keys, manifestJWSType, &st); err != nil {
		r.problem(SignatureName, "the manifest's signature does not verify: %v", err)
	} else if sum := sha256.Sum256(manifestRaw); st.Type != manifestStatementType || st.ManifestSHA256 != hex.EncodeToString(sum[:]) {
		r.problem(ManifestName, "the manifest is not the one its signature signs")
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(manifestRaw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || m.Format != Format {
		r.problem(ManifestName, "not a %s manifest", Format)
		return r, nil
	}
	r.TaskID, r.Tenant, r.ExportedAt = m.TaskID, m.Tenant, m.ExportedAt
	if st.TaskID != "" && (st.TaskID != m.TaskID || st.Tenant != m.Tenant) {
		r.problem(SignatureName, "the signature is of another task")
	}
	listed := map[string]bool{ManifestName: true, SignatureName: true}
	for _, e := range m.Members {
		if listed[e.Name] {
			r.problem(e.Name, "listed twice")
			continue
		}
		listed[e.Name] = true
		got, ok := members[e.Name]
		if !ok {
			r.problem(e.Name, "listed in the manifest but missing")
			continue
		}
		if hex.EncodeToString(got.sum[:]) != e.SHA256 || got.size != e.Size {
			r.problem(e.Name, "its SHA-256 is not the manifest's: the member changed")
		}
	}
	for name := range members {
		if !listed[name] {
			r.problem(name, "not listed in the manifest")
		}
	}
	r.Members = len(m.Members)
	r.checkHistory(members, m, keys)
	r.Valid = len(r.Problems) == 0
	return r, nil
}

// checkHistory verifies the history's chain links and public hash against the signed anchors, and
// that they pin the whole history.
func (r *Report) checkHistory(members map[string]readMember, m Manifest, keys historychain.KeySet) {
	events, err := ReadHistory(members[HistoryName].data)
	if err != nil {
		r.problem(HistoryName, "%v", err)
		return
	}
	anchors, err := ReadAnchors(members[AnchorsName].data)
	if err != nil {
		r.problem(AnchorsName, "%v", err)
		return
	}
	r.Events, r.Anchors = len(events), len(anchors)
	for _, e := range events {
		if e.TaskID != m.TaskID || e.Tenant != m.Tenant {
			r.problem(HistoryName, "event %d is of another task", e.Seq)
			return
		}
	}
	rep := historychain.Verify(nil, events, 0, anchors, keys)
	r.HeadSeq = rep.HeadSeq
	if b := rep.Break; b != nil {
		member := HistoryName
		if b.Reason == historychain.BreakAnchorSignature {
			member = AnchorsName
		}
		r.problem(member, "the chain breaks at seq %d (%s): %s", b.Seq, b.Reason, b.Detail)
		return
	}
	switch {
	case len(anchors) == 0:
		r.problem(AnchorsName, "no anchor pins the history")
	case anchors[len(anchors)-1].Seq != rep.HeadSeq:
		r.problem(HistoryName, "events after seq %d are not pinned by an anchor", anchors[len(anchors)-1].Seq)
	}
}

// HistoryLine is one event of history.jsonl.
type HistoryLine struct {
	Tenant     string          `json:"tenant_id"`
	TaskID     string          `json:"task_id"`
	Seq        int64           `json:"seq"`
	EventID    string          `json:"event_id"`
	Type       string          `json:"event_type"`
	OccurredAt string          `json:"occurred_at"`
	Actor      string          `json:"actor"`
	Cause      string          `json:"cause"`
	CommandID  string          `json:"command_id,omitempty"`
	Data       json.RawMessage `json:"data"`
	PrevDigest string          `json:"prev_digest,omitempty"`
	Digest     string          `json:"digest,omitempty"`
}

// HistoryJSONL is the history member: one event per line, as stored, with its links in hex.
func HistoryJSONL(events []historychain.Event) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, e := range events {
		l := HistoryLine{Tenant: e.Tenant, TaskID: e.TaskID, Seq: e.Seq, EventID: e.EventID, Type: e.Type,
			OccurredAt: historychain.FormatTime(e.Time), Actor: e.Actor, Cause: e.Cause, CommandID: e.CommandID, Data: e.Data}
		if e.Digest != nil {
			l.PrevDigest, l.Digest = hex.EncodeToString(e.PrevDigest), hex.EncodeToString(e.Digest)
		}
		if err := enc.Encode(l); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// ReadHistory parses the history member.
func ReadHistory(raw []byte) ([]historychain.Event, error) {
	var out []historychain.Event
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	for dec.More() {
		var l HistoryLine
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("event %d: %w", len(out)+1, err)
		}
		at, err := time.Parse(time.RFC3339Nano, l.OccurredAt)
		if err != nil {
			return nil, fmt.Errorf("event %d: occurred_at: %w", l.Seq, err)
		}
		e := historychain.Event{Entry: historychain.Entry{Tenant: l.Tenant, TaskID: l.TaskID, Seq: l.Seq, EventID: l.EventID,
			Type: l.Type, Time: at, Actor: l.Actor, Cause: l.Cause, CommandID: l.CommandID, Data: l.Data}}
		if l.Digest != "" || l.PrevDigest != "" {
			prev, err1 := hex.DecodeString(l.PrevDigest)
			dig, err2 := hex.DecodeString(l.Digest)
			if err := errors.Join(err1, err2); err != nil || len(prev) != historychain.Size || len(dig) != historychain.Size {
				return nil, fmt.Errorf("event %d: digests are not 32 bytes of hex", l.Seq)
			}
			e.PrevDigest, e.Digest = prev, dig
		}
		out = append(out, e)
	}
	return out, nil
}

// AnchorLine is one anchor of anchors.json, spelled as the API spells it (AuditAnchor).
type AnchorLine struct {
	Seq           int64  `json:"seq"`
	Digest        string `json:"digest"`
	HistorySHA256 string `json:"history_sha256"`
	Reason        string `json:"reason"`
	KeyID         string `json:"key_id"`
	Statement     string `json:"statement"`
	AnchoredAt    string `json:"anchored_at"`
}

// AnchorsJSON is the anchors member.
func AnchorsJSON(anchors []AnchorLine) ([]byte, error) {
	if anchors == nil {
		anchors = []AnchorLine{}
	}
	return json.MarshalIndent(anchors, "", "  ")
}

// ReadAnchors parses the anchors member.
func ReadAnchors(raw []byte) ([]historychain.Anchor, error) {
	var lines []AnchorLine
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lines); err != nil {
		return nil, fmt.Errorf("not a list of anchors: %w", err)
	}
	out := make([]historychain.Anchor, 0, len(lines))
	for _, l := range lines {
		d, err1 := hex.DecodeString(l.Digest)
		h, err2 := hex.DecodeString(l.HistorySHA256)
		if err := errors.Join(err1, err2); err != nil || len(d) != historychain.Size || len(h) != historychain.Size {
			return nil, fmt.Errorf("anchor at seq %d: digests are not 32 bytes of hex", l.Seq)
		}
		out = append(out, historychain.Anchor{Seq: l.Seq, Digest: d, HistorySHA256: h, Statement: l.Statement})
	}
	return out, nil
}

// readTar reads every regular member of a bundle, within the limits.
func readTar(rd io.Reader) (map[string]readMember, error) {
	tr := tar.NewReader(rd)
	out := map[string]readMember{}
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the bundle: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("member %q: not a regular file", h.Name)
		}
		if h.Name != ManifestName && h.Name != SignatureName {
			if err := checkName(h.Name); err != nil {
				return nil, err
			}
		}
		if _, dup := out[h.Name]; dup {
			return nil, fmt.Errorf("member %q twice", h.Name)
		}
		if len(out) >= maxMembers || h.Size < 0 || h.Size > maxMemberBytes || total+h.Size > maxTotalBytes ||
			parsed[h.Name] && h.Size > maxReadBytes {
			return nil, errors.New("the bundle is larger than a bundle may be")
		}
		total += h.Size
		var m readMember
		d := sha256.New()
		if parsed[h.Name] {
			m.data, err = io.ReadAll(io.LimitReader(tr, h.Size))
			d.Write(m.data)
			m.size = int64(len(m.data))
		} else {
			m.size, err = io.Copy(d, io.LimitReader(tr, h.Size))
		}
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", h.Name, err)
		}
		d.Sum(m.sum[:0])
		out[h.Name] = m
	}
	return out, nil
}
