// Package migrations embeds the numbered SQL migrations of the BAP database.
//
// The files are named NNNN_description.sql and applied in order by the store's migrator
// (`bap migrate` and `bap serve` start). A migration, once released, is never edited: a change is a
// new file. This package holds data only and imports nothing of the server.
package migrations

import "embed"

// FS holds every *.sql migration in this directory.
//
//go:embed *.sql
var FS embed.FS
