// Package ids owns BAP's opaque identifiers: the type prefixes of CONTRACT
// "Identifiers" (tsk_, bs_, ctx_, …), the generation of new sortable ids and
// the syntactic check of ids a client sends.
//
// An id is a prefix followed by 26 characters of lowercase Crockford base32
// encoding 128 bits: a 48-bit Unix millisecond timestamp (so ids of one
// prefix sort by creation time, to the millisecond) followed by 80 bits from
// crypto/rand. Ids are opaque to clients; nothing may parse meaning out of
// them, and no raw CDP/BiDi identifier ever becomes one.
//
// Package ids holds no mutable global state. It must import only the
// standard library and no other package of this module.
package ids
