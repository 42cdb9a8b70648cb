// Package store is the PostgreSQL adapter of the runtime (pgx v5): it implements app.Store, owns
// the transaction of every command, applies the embedded migrations, and translates pgx errors to
// the app's sentinels at its edge. A command's outbox messages are written through its Outbox port
// (events.Outbox, set by the daemon) just before commit, and it reads the event feed back for
// resuming streams (outbox.go). It must not import net/http, chromedp or any transport package.
package store
