// Package sqlmigrate is the one migration runner of the packages that keep
// tables in the service's database (the store and the call store): each
// applies its embedded *.sql files once, in file-name order, recording every
// applied file in its own ledger table, on SQLite or PostgreSQL.
package sqlmigrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"flywheel/internal/sqlbind"
)

// Set is one package's migrations.
type Set struct {
	// Name prefixes errors ("store", "trace").
	Name string
	// Files holds the migrations: Dir/*.sql, applied in name order.
	Files fs.FS
	Dir   string
	// Ledger is the CREATE TABLE IF NOT EXISTS statement of the table that
	// records applied migrations.
	Ledger string
	// Record returns the statement recording file (a base name) as applied
	// (with SQLite placeholders and ON CONFLICT DO NOTHING, so that it
	// inserts nothing for a file recorded already) and its arguments; an
	// error for a file whose name it cannot read.
	Record func(file string) (query string, args []any, err error)
	// LockKey is the PostgreSQL advisory lock held while migrating.
	LockKey int64
}

// Apply applies the migrations of s that db does not record yet. Each runs
// in its own transaction whose first statement records it: on SQLite (whose
// transactions here begin IMMEDIATE) that takes the write lock at once, and
// a migration another process applied meanwhile inserts nothing and is
// skipped. On PostgreSQL one connection holds the session advisory lock
// LockKey for the whole run, so nodes starting together apply each migration
// once (the ledger's CREATE TABLE IF NOT EXISTS races too without it).
func (s Set) Apply(ctx context.Context, db *sql.DB, postgres bool) error {
	names, err := fs.Glob(s.Files, s.Dir+"/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	} = db
	if postgres {
		conn, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("%s: migrations: %w", s.Name, err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, s.LockKey); err != nil {
			return fmt.Errorf("%s: migrations lock: %w", s.Name, err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, s.LockKey)
		q = conn
	}
	if _, err := q.ExecContext(ctx, s.Ledger); err != nil {
		return fmt.Errorf("%s: migrations table: %w", s.Name, err)
	}
	for _, name := range names {
		base := path.Base(name)
		rec, args, err := s.Record(base)
		if err != nil {
			return fmt.Errorf("%s: migration %s: %w", s.Name, base, err)
		}
		if postgres {
			rec = sqlbind.Dollar(rec)
		}
		body, err := fs.ReadFile(s.Files, name)
		if err != nil {
			return err
		}
		if err := apply(ctx, q.BeginTx, rec, args, string(body)); err != nil {
			return fmt.Errorf("%s: migration %s: %w", s.Name, name, err)
		}
	}
	return nil
}

func apply(ctx context.Context, begin func(context.Context, *sql.TxOptions) (*sql.Tx, error), rec string, args []any, body string) error {
	tx, err := begin(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, rec, args...)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // applied already
	}
	for _, stmt := range Statements(body) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Statements splits a migration file into statements on ';' at line ends,
// dropping comment lines. Migrations keep to that simple form (no ';' at
// the end of a line inside a statement, no procedural bodies).
func Statements(body string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(body, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}
