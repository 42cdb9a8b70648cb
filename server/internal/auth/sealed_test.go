package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"github.com/originweave/bap/server/internal/serverkey"
	"testing"
	"time"
)

// The signing keys and the server-wide secret are ciphertext in the database (ADR 0017); rows an
// earlier release wrote in clear are sealed the first time they are read.
func TestKeysAreSealedAtRest(t *testing.T) {
	b := setup(t, time.Minute)
	ctx := context.Background()
	assertSealed := func(t *testing.T) {
		t.Helper()
		rows, err := b.pool.Query(ctx, `SELECT private_key FROM token_signing_key`)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var stored []byte
			if err := rows.Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if _, err := x509.ParsePKCS8PrivateKey(stored); err == nil || stored[0] != 1 {
				t.Fatalf("a signing key is stored in clear")
			}
			n++
		}
		if n == 0 {
			t.Fatal("no signing key")
		}
		var secret []byte
		if err := b.pool.QueryRow(ctx, `SELECT secret FROM authorization_server_secret`).Scan(&secret); err != nil {
			t.Fatal(err)
		}
		if len(secret) != 69 {
			t.Fatalf("server secret is %d bytes: not sealed", len(secret))
		}
	}
	assertSealed(t)
	if _, err := serverSecret(ctx, b.pool, b.key); err != nil {
		t.Fatal(err)
	}

	// Rows in clear, as a release before ADR 0017 wrote them.
	clear := bytes.Repeat([]byte{9}, 32)
	if _, err := b.pool.Exec(ctx, `UPDATE authorization_server_secret SET secret = $1`, clear); err != nil {
		t.Fatal(err)
	}
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	if _, err := b.pool.Exec(ctx, `INSERT INTO token_signing_key (key_id, algorithm, private_key, sign_until, publish_until)
		VALUES ('legacykey1', 'ES256', $1, now() + interval '1 hour', now() + interval '2 hours')`, der); err != nil {
		t.Fatal(err)
	}
	got, err := serverSecret(ctx, b.pool, b.key)
	if err != nil || !bytes.Equal(got, clear) {
		t.Fatalf("a clear secret reads as %x %v", got, err)
	}
	if err := b.srv.keys.load(ctx); err != nil {
		t.Fatal(err)
	}
	if b.srv.keys.lookup("legacykey1") == nil {
		t.Fatal("the clear signing key was not loaded")
	}
	assertSealed(t)
	if again, err := serverSecret(ctx, b.pool, b.key); err != nil || !bytes.Equal(again, clear) {
		t.Fatalf("the sealed secret reads as %x %v", again, err)
	}

	// Under another server key nothing opens: a startup error, never a new secret.
	if _, err := serverSecret(ctx, b.pool, serverkey.Ephemeral()); err == nil {
		t.Fatal("the secret opened under another server key")
	}
}
