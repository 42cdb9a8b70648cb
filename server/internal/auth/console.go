package auth

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The operator console (issue #18, ADR 0020) signs people in as a public client of this
// authorization server (authorization code + PKCE, no secret): one client per tenant, id
// ConsoleClientPrefix + tenant, ConsoleScopes, redirecting only to <issuer>/console/.

// ConsoleClientPrefix starts the id of a tenant's console client (console.ClientPrefix).
const ConsoleClientPrefix = "cli_console_"

// ConsoleScopes are the capabilities of the console's clients: what its pages use (tasks,
// approvals, evidence, events and the browser's for the handoff to come), not the operator's
// secrets.
var ConsoleScopes = []string{
	"bap:tasks.read", "bap:tasks.write", "bap:browser.observe", "bap:browser.act",
	"bap:approvals.request", "bap:approvals.resolve", "bap:artifacts.read", "bap:events.read",
}

// maxConsoleTenant is the longest tenant id with a console client (a client id has at most 64
// characters after cli_).
const maxConsoleTenant = 64 - len(ConsoleClientPrefix) + len("cli_")

// EnsureConsoleClients registers (or brings up to date) the console client of every tenant with
// people (and of tenant local), with ConsoleScopes, redirecting to redirectURI only. `bap serve` calls it at start; CreatePerson adds the
// client of a tenant it creates, with the redirect the other console clients have.
func EnsureConsoleClients(ctx context.Context, pool *pgxpool.Pool, redirectURI string) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// 'local' too (it always exists): its client keeps the redirect for tenants created later.
		rows, err := tx.Query(ctx, `SELECT tenant_id FROM person_account WHERE length(tenant_id) <= $1 UNION SELECT 'local'`, maxConsoleTenant)
		if err != nil {
			return err
		}
		tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, t := range tenants {
			if err := ensureConsoleClient(ctx, tx, t, []string{redirectURI}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("registering the console's clients: %w", err)
	}
	return nil
}

// ensureConsoleClient makes tenant's console client exist with exactly redirects and ConsoleScopes.
func ensureConsoleClient(ctx context.Context, tx pgx.Tx, tenant string, redirects []string) error {
	id := ConsoleClientPrefix + tenant
	if _, err := tx.Exec(ctx, `INSERT INTO oauth_client (tenant_id, client_id, name, grant_type, secret_hash)
		VALUES ($1, $2, 'BAP console', 'authorization_code', NULL) ON CONFLICT (client_id) DO NOTHING`, tenant, id); err != nil {
		return err
	}
	for _, s := range ConsoleScopes {
		if _, err := tx.Exec(ctx, `INSERT INTO oauth_client_scope (tenant_id, client_id, scope) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, tenant, id, s); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM oauth_client_redirect WHERE client_id = $1 AND NOT (redirect_uri = ANY($2))`, id, redirects); err != nil {
		return err
	}
	for _, u := range redirects {
		if _, err := tx.Exec(ctx, `INSERT INTO oauth_client_redirect (tenant_id, client_id, redirect_uri) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, tenant, id, u); err != nil {
			return err
		}
	}
	return nil
}

// consoleClientForNewTenant gives a tenant CreatePerson just populated a console client, with the
// redirect URIs of the existing console clients (the running server's); none yet: the next
// start registers it.
func consoleClientForNewTenant(ctx context.Context, tx pgx.Tx, tenant string) error {
	if len(tenant) > maxConsoleTenant {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT redirect_uri FROM oauth_client_redirect WHERE client_id LIKE 'cli\_console\_%'`)
	if err != nil {
		return err
	}
	redirects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(redirects) == 0 {
		return err
	}
	return ensureConsoleClient(ctx, tx, tenant, redirects)
}
