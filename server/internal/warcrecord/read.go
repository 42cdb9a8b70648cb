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
}

// ErrTooLarge reports a record whose block is larger than ReadAll's maxBlock.
var ErrTooLarge = errors.New("warcrecord: record block too large")

// ReadAll reads every record of a WARC archive (an archive is untrusted once it left the node
// that wrote it: a bundle may have been edited). It checks each record strictly, its block and
// payload digests against what it holds included, and fails naming the first record that does
// not hold, or one whose block is over maxBlock bytes.
func ReadAll(r io.Reader, maxBlock int64) ([]Record, error) {
	u := gowarc.NewUnmarshaler(gowarc.WithStrictValidation())
	br := bufio.NewReader(r)
	var out []Record
	for {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return out, nil
		}
		rec, _, validation, err := u.Unmarshal(br)
		if err == nil && len(validation) > 0 {
			err = errors.Join(validation...)
		}
		if err != nil {
			return out, fmt.Errorf("warcrecord: record %d: %w", len(out), err)
		}
		got, err := readRecord(rec, maxBlock)
		if err != nil {
			return out, fmt.Errorf("warcrecord: record %d: %w", len(out), err)
		}
		out = append(out, got)
	}
}

// readRecord reads one parsed record's block, checks its digests and closes it.
func readRecord(rec gowarc.WarcRecord, maxBlock int64) (Record, error) {
	defer func() { _ = rec.Close() }()
	if n, err := rec.WarcHeader().GetInt64(gowarc.ContentLength); err != nil || n > maxBlock {
		return Record{}, ErrTooLarge
	}
	if v, err := rec.ValidateDigest(); err != nil || len(v) > 0 {
		return Record{}, errors.Join(append(v, err)...)
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
	return Record{Type: rec.Type().String(), Header: h, Block: block}, nil
}
