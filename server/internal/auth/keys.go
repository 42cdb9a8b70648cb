package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/serverkey"
)

// keyLockID serialises key creation across nodes sharing one database.
const keyLockID = 0x6261706b6579 // "bapkey"

// signingKey is one ES256 key of token_signing_key.
type signingKey struct {
	id           string
	priv         *ecdsa.PrivateKey
	signUntil    time.Time
	publishUntil time.Time
}

// keyStore holds the published signing keys, loaded from the database; it creates a new key when
// none may sign any more. Safe for concurrent use.
type keyStore struct {
	pool     *pgxpool.Pool
	seal     *serverkey.Sealer // the private keys are sealed in the database (ADR 0017)
	rotation time.Duration     // how long a key signs
	maxTTL   time.Duration     // the longest access token lifetime: how long a retired key stays published
	now      func() time.Time

	mu       sync.RWMutex
	keys     []signingKey // newest first
	loadedAt time.Time
}

// current returns the key that signs new tokens, rotating when the newest one has retired.
func (k *keyStore) current(ctx context.Context) (*signingKey, error) {
	now := k.now()
	k.mu.RLock()
	for i := range k.keys {
		if k.keys[i].signUntil.After(now.Add(time.Minute)) {
			key := k.keys[i]
			k.mu.RUnlock()
			return &key, nil
		}
	}
	k.mu.RUnlock()
	if err := k.rotate(ctx); err != nil {
		return nil, err
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	if len(k.keys) == 0 || !k.keys[0].signUntil.After(now) {
		return nil, errors.New("no signing key available")
	}
	key := k.keys[0]
	return &key, nil
}

// public returns the public key of kid, reloading the set (at most once a second) when kid is
// unknown: another node may have rotated.
func (k *keyStore) public(ctx context.Context, kid string) (*ecdsa.PublicKey, error) {
	if pub := k.lookup(kid); pub != nil {
		return pub, nil
	}
	k.mu.RLock()
	recent := k.now().Sub(k.loadedAt) < time.Second
	k.mu.RUnlock()
	if !recent {
		if err := k.load(ctx); err != nil {
			return nil, err
		}
		if pub := k.lookup(kid); pub != nil {
			return pub, nil
		}
	}
	return nil, nil
}

func (k *keyStore) lookup(kid string) *ecdsa.PublicKey {
	now := k.now()
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, key := range k.keys {
		if key.id == kid && key.publishUntil.After(now) {
			return &key.priv.PublicKey
		}
	}
	return nil
}

// jwks is the published key set (public keys only).
func (k *keyStore) jwks() jose.JSONWebKeySet {
	now := k.now()
	k.mu.RLock()
	defer k.mu.RUnlock()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, key := range k.keys {
		if key.publishUntil.After(now) {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &key.priv.PublicKey, KeyID: key.id, Algorithm: "ES256", Use: "sig"})
		}
	}
	return set
}

// load reads every published key.
func (k *keyStore) load(ctx context.Context) error {
	rows, err := k.pool.Query(ctx, `SELECT key_id, private_key, sign_until, publish_until FROM token_signing_key
		WHERE publish_until > now() ORDER BY created_at DESC, key_id`)
	if err != nil {
		return fmt.Errorf("loading signing keys: %w", err)
	}
	type stored struct {
		key signingKey
		der []byte
	}
	var all []stored
	for rows.Next() {
		var st stored
		if err := rows.Scan(&st.key.id, &st.der, &st.key.signUntil, &st.key.publishUntil); err != nil {
			rows.Close()
			return fmt.Errorf("loading signing keys: %w", err)
		}
		all = append(all, st)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("loading signing keys: %w", err)
	}
	keys := make([]signingKey, 0, len(all))
	for _, st := range all {
		key := st.key
		der, err := k.openKey(ctx, key.id, st.der)
		if err != nil {
			return err
		}
		p, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return fmt.Errorf("signing key %s: %w", key.id, err)
		}
		ec, ok := p.(*ecdsa.PrivateKey)
		if !ok || ec.Curve != elliptic.P256() {
			return fmt.Errorf("signing key %s is not a P-256 key", key.id)
		}
		key.priv = ec
		keys = append(keys, key)
	}
	k.mu.Lock()
	k.keys = keys
	k.loadedAt = k.now()
	k.mu.Unlock()
	return nil
}

// rotate makes sure a key can sign for at least another minute, creating one under an advisory
// lock (so that nodes sharing the database agree on one), then reloads the set. Retired keys stay
// published until publish_until and are deleted after.
func (k *keyStore) rotate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, k.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, keyLockID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM token_signing_key WHERE publish_until < now()`); err != nil {
			return err
		}
		var usable bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM token_signing_key WHERE sign_until > now() + interval '1 minute')`).Scan(&usable); err != nil {
			return err
		}
		if usable {
			return nil
		}
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return err
		}
		var id [12]byte
		if _, err := rand.Read(id[:]); err != nil {
			return err
		}
		kid := base64.RawURLEncoding.EncodeToString(id[:])
		signFor := k.rotation
		_, err = tx.Exec(ctx, `INSERT INTO token_signing_key (key_id, algorithm, private_key, sign_until, publish_until)
			VALUES ($1, 'ES256', $2, now() + $3::interval, now() + $3::interval + $4::interval)`,
			kid, k.seal.Seal(der, signingKeyAAD(kid)), signFor.String(), (k.maxTTL + time.Minute).String())
		return err
	})
	if err != nil {
		return fmt.Errorf("rotating signing keys: %w", err)
	}
	return k.load(ctx)
}

// signingKeyAAD binds a sealed signing key to its key id.
func signingKeyAAD(kid string) []byte { return []byte("bap/token-signing-key/v1\x00" + kid) }

// openKey opens a stored private key. A key stored in clear by a release before ADR 0017 (PKCS #8
// DER, which starts with 0x30; a seal starts with its version byte 1) is sealed in place.
func (k *keyStore) openKey(ctx context.Context, kid string, stored []byte) ([]byte, error) {
	if len(stored) > 0 && stored[0] == 0x30 {
		if _, err := k.pool.Exec(ctx, `UPDATE token_signing_key SET private_key = $1 WHERE key_id = $2 AND private_key = $3`,
			k.seal.Seal(stored, signingKeyAAD(kid)), kid, stored); err != nil {
			return nil, fmt.Errorf("sealing signing key %s: %w", kid, err)
		}
		return stored, nil
	}
	der, err := k.seal.Open(stored, signingKeyAAD(kid))
	if err != nil {
		return nil, fmt.Errorf("signing key %s does not open under the server key: %w", kid, err)
	}
	return der, nil
}
