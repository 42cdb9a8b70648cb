package warcrecord

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/textproto"

	"github.com/nlnwa/gowarc/v3"
)

// Record is one record read back from an archive.
type Record struct {
	// Type is the WARC-Type (warcinfo, request, response, metadata, …).
	Type string
	// Header holds the record's fields (Get and Values take any case: "WARC-Target-URI").
	Header textproto.MIMEHeader
	// Block is the record's content block as stored.
	Block []byte
	// Altered is true when the record's stored digests do not match its block (ReadAltered only):
	// it was changed after it was written.
	Altered bool
}

// ErrTooLarge reports a record whose block is larger than ReadAll's maxBlock.
var ErrTooLarge = errors.New("warcrecord: record block too large")

// ReadAll reads every record of a WARC archive (an archive is untrusted once it left the node
// that wrote it: a bundle may have been edited). It checks each record strictly, its block and
// payload digests against what it holds included, and fails naming the first record that does
// not hold, or one whose block is over maxBlock bytes.
func ReadAll(r io.Reader, maxBlock int64) ([]Record, error) {
	return readAll(r, maxBlock, false)
}

// ReadAltered is ReadAll that keeps a record whose digests do not match its block, marked
// Altered, instead of failing: a replay answers from an archive as it is and reports where it was
// changed (a record that does not parse, or is too large, still fails).
func ReadAltered(r io.Reader, maxBlock int64) ([]Record, error) {
	return readAll(r, maxBlock, true)
}

func readAll(r io.Reader, maxBlock int64, keepAltered bool) ([]Record, error) {
	opts := []gowarc.WarcRecordOption{gowarc.WithStrictValidation()}
	if keepAltered {
		// Spec findings are collected instead of failing at once; anything but a digest that
		// does not match still fails below.
		opts = append(opts, gowarc.WithSpecViolationPolicy(gowarc.ErrWarn))
	}
	u := gowarc.NewUnmarshaler(opts...)
	br := bufio.NewReader(r)
	var out []Record
	for {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return out, nil
		}
		rec, _, validation, err := u.Unmarshal(br)
		altered := false
		if err == nil && len(validation) > 0 {
			altered, err = onlyDigests(validation)
		}
		if err != nil {
			return out, fmt.Errorf("warcrecord: record %d: %w", len(out), err)
		}
		got, err := readRecord(rec, maxBlock, keepAltered)
		if err != nil {
			return out, fmt.Errorf("warcrecord: record %d: %w", len(out), err)
		}
		got.Altered = got.Altered || altered
		out = append(out, got)
	}
}

// onlyDigests tells whether every finding is a digest that does not match (altered); any other
// finding is the error.
func onlyDigests(findings []error) (altered bool, err error) {
	for _, f := range findings {
		var d *gowarc.DigestError
		if !errors.As(f, &d) {
			return false, errors.Join(findings...)
		}
	}
	return true, nil
}

// readRecord reads one parsed record's block, checks its digests and closes it. A digest that
// does not match fails, or, with keepAltered, marks the record Altered.
func readRecord(rec gowarc.WarcRecord, maxBlock int64, keepAltered bool) (Record, error) {
	defer func() { _ = rec.Close() }()
	if n, err := rec.WarcHeader().GetInt64(gowarc.ContentLength); err != nil || n > maxBlock {
		return Record{}, ErrTooLarge
	}
	altered := false
	if v, err := rec.ValidateDigest(); err != nil || len(v) > 0 {
		if !keepAltered {
			return Record{}, errors.Join(append(v, err)...)
		}
		altered = true
	}
	raw, err := rec.Block().RawBytes()
	if err != nil {
		return Record{}, err
	}
	block, err := io.ReadAll(io.LimitReader(raw, maxBlock+1))
	if err != nil {
		return Record{}, err
	}
	if int64(len(block)) > maxBlock {
		return Record{}, ErrTooLarge
	}
	h := textproto.MIMEHeader{}
	for _, f := range *rec.WarcHeader() {
		h.Add(f.Name, f.Value)
	}
	return Record{Type: rec.Type().String(), Header: h, Block: block, Altered: altered}, nil
}
