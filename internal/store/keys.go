package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"flywheel/internal/auth"
	"flywheel/internal/names"
)

// KeyPrefixLen is how many leading characters of a key are kept in clear to
// find it and to show it in listings.
const KeyPrefixLen = 11

// GenerateKey returns a new random API key: "fw_" and 40 URL-safe characters
// (240 bits of entropy).
func GenerateKey() string {
	b := make([]byte, 30)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	return "fw_" + base64.RawURLEncoding.EncodeToString(b)
}

// MinKeyLen is the shortest API key accepted (a key given by the operator,
// e.g. FLYWHEEL_BOOTSTRAP_API_KEY; generated keys are 43 characters).
const MinKeyLen = 16

// ValidateKey checks a key given by the operator before anything is
// written: at least MinKeyLen characters, printable ASCII without spaces
// (it travels in an Authorization header and a Basic-auth password).
func ValidateKey(key string) error {
	if len(key) < MinKeyLen {
		return fmt.Errorf("API key must be at least %d characters (got %d)", MinKeyLen, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("API key must be printable ASCII without spaces (byte %d is 0x%02x)", i, c)
		}
	}
	return nil
}

func keyPrefix(key string) string {
	if len(key) <= KeyPrefixLen {
		return key
	}
	return key[:KeyPrefixLen]
}

func hashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

func validName(name string) error {
	if name == "" {
		return errors.New("name is empty")
	}
	if len(name) > 128 || strings.ContainsAny(name, "/: \t\r\n") {
		return fmt.Errorf("name %q must be at most 128 characters without '/', ':' or spaces", name)
	}
	if err := names.Check(name); err != nil {
		return fmt.Errorf("name %q %w", name, err)
	}
	return nil
}

// EnsureUser creates the user, its personal entity and the membership if
// missing.
func (s *sqlDB) EnsureUser(ctx context.Context, name string) (User, error) {
	if err := validName(name); err != nil {
		return User{}, fmt.Errorf("user: %w", err)
	}
	var u User
	err := s.tx(ctx, func(tx *rtx) error {
		var err error
		u, err = ensureUser(ctx, tx, name)
		if err != nil {
			return err
		}
		return addMembership(ctx, tx, u.ID, name)
	})
	return u, err
}

// ensureUser returns the user, inserting it when missing; a concurrent
// insert of the same name (another node) is not an error.
func ensureUser(ctx context.Context, q queryer, name string) (User, error) {
	if _, err := q.ExecContext(ctx, "INSERT INTO users (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
		NewID(), name, FormatTime(now())); err != nil {
		return User{}, fmt.Errorf("create user: %w", err)
	}
	var u User
	var created string
	if err := q.QueryRowContext(ctx, "SELECT id, name, created_at FROM users WHERE name = ?", name).Scan(&u.ID, &u.Name, &created); err != nil {
		return u, fmt.Errorf("find user: %w", err)
	}
	u.CreatedAt = parseTime(created)
	return u, nil
}

func addMembership(ctx context.Context, q queryer, userID, entity string) error {
	if _, err := q.ExecContext(ctx, "INSERT INTO entities (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING", NewID(), entity, FormatTime(now())); err != nil {
		return fmt.Errorf("create entity: %w", err)
	}
	_, err := q.ExecContext(ctx, `INSERT INTO memberships (user_id, entity_id)
		SELECT ?, id FROM entities WHERE name = ? ON CONFLICT (user_id, entity_id) DO NOTHING`, userID, entity)
	if err != nil {
		return fmt.Errorf("add membership: %w", err)
	}
	return nil
}

// AddMembership makes an existing user a member of entity, creating it.
func (s *sqlDB) AddMembership(ctx context.Context, userName, entity string) error {
	if err := validName(entity); err != nil {
		return fmt.Errorf("entity: %w", err)
	}
	return s.tx(ctx, func(tx *rtx) error {
		var id string
		if err := tx.QueryRowContext(ctx, "SELECT id FROM users WHERE name = ?", userName).Scan(&id); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("user %q: %w", userName, ErrNotFound)
			}
			return fmt.Errorf("find user: %w", err)
		}
		return addMembership(ctx, tx, id, entity)
	})
}

// CreateKey stores the SHA-256 hash of key (generated when empty) for user.
func (s *sqlDB) CreateKey(ctx context.Context, userName, name, key string) (APIKey, string, error) {
	if key == "" {
		key = GenerateKey()
	}
	if err := ValidateKey(key); err != nil {
		return APIKey{}, "", err
	}
	if err := names.Check(name); err != nil || len(name) > 128 {
		if err == nil {
			err = errors.New("must be at most 128 bytes")
		}
		return APIKey{}, "", fmt.Errorf("key name %q %w", name, err)
	}
	k := APIKey{ID: NewID(), UserName: userName, Name: name, Prefix: keyPrefix(key), CreatedAt: now()}
	err := s.tx(ctx, func(tx *rtx) error {
		if err := tx.QueryRowContext(ctx, "SELECT id FROM users WHERE name = ?", userName).Scan(&k.UserID); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("user %q: %w", userName, ErrNotFound)
			}
			return fmt.Errorf("find user: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, user_id, name, prefix, key_hash, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`, k.ID, k.UserID, k.Name, k.Prefix, hashKey(key), FormatTime(k.CreatedAt))
		if err != nil {
			return fmt.Errorf("insert key: %w", err)
		}
		return nil
	})
	if err != nil {
		return APIKey{}, "", err
	}
	return k, key, nil
}

// Bootstrap creates the first user's access when nobody can log in: when
// the database holds no API key at all (revoked keys count: a database
// whose keys were all revoked on purpose is left alone), it creates user
// userName with its personal entity and the key (generated when empty),
// all in one transaction, and returns the key in clear; ok is false and
// nothing is written otherwise. The key is checked (ValidateKey) before
// anything is written. publish, when not nil, runs inside the transaction
// once the rows are written (e.g. to write the key to a file); its error
// rolls everything back, so the user never exists without its key.
func (s *sqlDB) Bootstrap(ctx context.Context, userName, keyName, key string, publish func(key string) error) (created string, ok bool, err error) {
	if err := validName(userName); err != nil {
		return "", false, fmt.Errorf("user: %w", err)
	}
	if key == "" {
		key = GenerateKey()
	}
	if err := ValidateKey(key); err != nil {
		return "", false, err
	}
	err = s.tx(ctx, func(tx *rtx) error {
		// Nodes starting together on one database bootstrap once.
		if err := s.d.serialize(ctx, tx, "bootstrap"); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM api_keys").Scan(&n); err != nil {
			return fmt.Errorf("count keys: %w", err)
		}
		if n > 0 {
			return nil
		}
		u, err := ensureUser(ctx, tx, userName)
		if err != nil {
			return err
		}
		if err := addMembership(ctx, tx, u.ID, userName); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, user_id, name, prefix, key_hash, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`, NewID(), u.ID, keyName, keyPrefix(key), hashKey(key), FormatTime(now()))
		if err != nil {
			return fmt.Errorf("insert key: %w", err)
		}
		if publish != nil {
			if err := publish(key); err != nil {
				return err
			}
		}
		ok = true
		return nil
	})
	if err != nil || !ok {
		return "", false, err
	}
	return key, true, nil
}

// ListKeys lists the keys of userName, or every key when it is empty.
func (s *sqlDB) ListKeys(ctx context.Context, userName string) ([]APIKey, error) {
	q := `SELECT k.id, k.user_id, u.name, k.name, k.prefix, k.created_at, k.revoked_at
		FROM api_keys k JOIN users u ON u.id = k.user_id`
	var args []any
	if userName != "" {
		q += " WHERE u.name = ?"
		args = append(args, userName)
	}
	rows, err := s.db.QueryContext(ctx, q+" ORDER BY k.id", args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	var out []APIKey
	for rows.Next() {
		var k APIKey
		var created string
		var revoked sql.NullString
		if err := rows.Scan(&k.ID, &k.UserID, &k.UserName, &k.Name, &k.Prefix, &created, &revoked); err != nil {
			return nil, fmt.Errorf("list keys: %w", err)
		}
		k.CreatedAt = parseTime(created)
		k.RevokedAt = parseTimePtr(revoked)
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey revokes the key with id idOrPrefix, or the single unrevoked key
// with that prefix.
func (s *sqlDB) RevokeKey(ctx context.Context, idOrPrefix string) error {
	return s.tx(ctx, func(tx *rtx) error {
		res, err := tx.ExecContext(ctx, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", FormatTime(now()), idOrPrefix)
		if err != nil {
			return fmt.Errorf("revoke key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM api_keys WHERE prefix = ? AND revoked_at IS NULL", idOrPrefix).Scan(&n); err != nil {
			return fmt.Errorf("revoke key: %w", err)
		}
		switch {
		case n == 0:
			return fmt.Errorf("key %q: %w", idOrPrefix, ErrNotFound)
		case n > 1:
			return fmt.Errorf("prefix %q matches %d keys; revoke by id: %w", idOrPrefix, n, ErrConflict)
		}
		_, err = tx.ExecContext(ctx, "UPDATE api_keys SET revoked_at = ? WHERE prefix = ? AND revoked_at IS NULL", FormatTime(now()), idOrPrefix)
		return err
	})
}

// Authenticate finds the unrevoked key whose hash matches key, comparing
// hashes in constant time, and returns its user as a principal.
func (s *sqlDB) Authenticate(ctx context.Context, key string) (*auth.Principal, error) {
	if key == "" {
		return nil, ErrUnauthorized
	}
	want := hashKey(key)
	rows, err := s.db.QueryContext(ctx, `SELECT k.id, k.key_hash, u.id, u.name FROM api_keys k
		JOIN users u ON u.id = k.user_id WHERE k.prefix = ? AND k.revoked_at IS NULL`, keyPrefix(key))
	if err != nil {
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	var p *auth.Principal
	for rows.Next() {
		var keyID, userID, userName string
		var hash []byte
		if err := rows.Scan(&keyID, &hash, &userID, &userName); err != nil {
			rows.Close()
			return nil, fmt.Errorf("authenticate: %w", err)
		}
		if subtle.ConstantTimeCompare(hash, want) == 1 && p == nil {
			p = &auth.Principal{UserID: userID, UserName: userName, PersonalEntity: userName, KeyID: keyID}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	if p == nil {
		return nil, ErrUnauthorized
	}
	ents, err := s.db.QueryContext(ctx, `SELECT e.name FROM memberships m JOIN entities e ON e.id = m.entity_id
		WHERE m.user_id = ? ORDER BY e.name`, p.UserID)
	if err != nil {
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	defer ents.Close()
	for ents.Next() {
		var name string
		if err := ents.Scan(&name); err != nil {
			return nil, fmt.Errorf("authenticate: %w", err)
		}
		p.Entities = append(p.Entities, name)
	}
	return p, ents.Err()
}
