// Package policy owns a task's policy decisions: which origins a task may
// load ([Policy.AllowsURL], [Policy.AllowsOrigin]) and which actions need a
// person's approval ([Policy.NeedsApproval]), from the "policy" object of
// create_task (CONTRACT "Policy and approvals").
//
// # Origin patterns
//
// An entry of allowed_origins (and of an approval rule's origins) is
// scheme://host[:port] and nothing else:
//
//   - scheme is http or https (case-insensitive). ws and wss are refused in
//     patterns: a WebSocket handshake is an HTTP request to the same host and
//     port, so a ws: URL is checked against the http: patterns and a wss: URL
//     against the https: ones. One pattern therefore covers a site and its
//     sockets, and a plain-text ws: connection is never allowed by an https:
//     pattern.
//   - host is a DNS name, an IPv4 address in dotted-quad form, or an IPv6
//     address in brackets (no zone). Names are lowercased; they must be ASCII,
//     so an internationalised name is written in its punycode (xn--) form, as
//     the browser sends it. A trailing dot, an empty label or a name whose last
//     label is numeric but that is not a dotted-quad IPv4 address is refused.
//   - port is a decimal port 1–65535; absent means the scheme's default (80
//     for http, 443 for https), so https://example.com and
//     https://example.com:443 are the same pattern.
//   - "*" as the whole port matches every port: http://127.0.0.1:*.
//   - "*." as the whole leftmost label matches exactly one more label:
//     https://*.example.com matches https://a.example.com, but neither
//     https://example.com nor https://a.b.example.com (allow each depth you
//     mean; the narrower reading is the safer one). The rest must hold at
//     least two labels (or be localhost), so *.com is refused, and a wildcard
//     never precedes an IP address.
//   - No path (not even "/"), query, fragment, userinfo, backslash,
//     whitespace or other use of "*".
//
// # URLs that are not network origins
//
// about:blank (and about:srcdoc, whose content comes from its already
// checked parent document) is always allowed: it loads nothing. data:,
// file:, javascript:, blob:, filesystem: and every other scheme are never
// allowed, whatever the patterns say. A URL whose host is not ASCII or is not
// canonical (for instance 0x7f.1 for 127.0.0.1) matches no pattern: the
// package fails closed.
//
// # Approval rules
//
// A rule names an [Effect] (form_submission, file_upload or any_action) and
// optionally origins; any_action matches every action, and a rule without
// origins (absent or empty) applies on every origin. When the origin of the
// page cannot be determined, every rule whose effect matches applies.
//
// Package policy is pure: it must import only the standard library (net/url
// and net/netip for parsing, never net/http) and no other package of this
// module.
package policy
