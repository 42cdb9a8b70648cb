// Package warcrecord archives what a task's browser sessions exchange (a task's policy.record) as
// WARC 1.1 (ISO 28500:2017), with the National Library of Norway's gowarc (ADR 0034): one
// warcinfo record, then for each plain-HTTP exchange the egress proxy forwards a request and a
// response record that name each other (WARC-Concurrent-To), with SHA-256 WARC-Block-Digest and
// WARC-Payload-Digest over what is stored, and a metadata record for each CONNECT tunnel, whose
// content (TLS, WebSockets) the proxy cannot read.
//
// # Protected values
//
// A [Protected] set holds the task's secrets and fill values in memory. Every occurrence in a
// request target, a header value, a status text or a body — as it is, form- or URL-encoded,
// JSON- or HTML-escaped, or base64 — is replaced by "[masked:NAME]" before anything is stored or
// spooled (NAME is the secret's name or "protected", never the value or anything derived from
// it), and the record names what was masked in BAP-Masked fields ("body;name=card_pin"). Short
// values are masked where they stand alone (no letter or digit beside them). Bodies coded with
// gzip or deflate are stored decoded so that masking sees their text (BAP-Decoded); a coding the
// recorder cannot decode is not stored at all (BAP-Omitted, WARC-Truncated: unspecified).
//
// # Caps
//
// A task's archive has a cap ([Budget]); each stored body has one too. A body past its cap is
// cut (WARC-Truncated: length); an exchange that does not fit the task's cap is stored without
// its bodies, and once not even that fits, not at all. Each kind of truncation, and a failure to
// write, is reported once through [Config.OnTruncated]: the exchange itself always goes on.
//
// warcrecord is an adapter beside egress: it implements egress.Recorder with the standard
// library and gowarc.
package warcrecord
