package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"flywheel/internal/httpx"
	"flywheel/internal/sqlbind"
)

// The call store runs on SQLite (the default, the service's own file) and on
// PostgreSQL (many nodes on one server). The package's SQL is written once,
// in the form both accept (ON CONFLICT upserts, CTEs, CASE, COALESCE), with
// SQLite's placeholders ? and ?N; a dialect holds the few pieces that differ:
// placeholders ($N), membership in a list of strings, NULL ordering, the
// write lock, the batch upsert and the migration files. Text sorts and
// compares byte by byte on both (SQLite's BINARY collation; COLLATE "C" on
// every PostgreSQL text column), so queries answer the same rows in the same
// order on both.
type dialect struct {
	name     string // "sqlite" or "postgres"
	postgres bool
	// asc and desc are the sort directions with SQLite's NULL order (NULLs
	// smallest); PostgreSQL's default puts NULLs last in ASC.
	asc, desc string

	rebound sync.Map // SQLite text -> PostgreSQL text, for the package's fixed statements
}

// Dialect names of Options.Dialect.
const (
	DialectSQLite   = "sqlite"
	DialectPostgres = "postgres"
)

var (
	sqliteDialect   = &dialect{name: DialectSQLite, asc: "ASC", desc: "DESC"}
	postgresDialect = &dialect{name: DialectPostgres, postgres: true, asc: "ASC NULLS FIRST", desc: "DESC NULLS LAST"}
)

// dialectFor returns the dialect of db: name when set ("sqlite" or
// "postgres"), else the one of db's driver (pgx's database/sql driver is
// PostgreSQL, anything else SQLite). A name that contradicts the driver is
// an error rather than SQL the server cannot run.
func dialectFor(db *sql.DB, name string) (*dialect, error) {
	_, isPG := db.Driver().(*stdlib.Driver)
	switch name {
	case "":
		if isPG {
			return postgresDialect, nil
		}
		return sqliteDialect, nil
	case DialectSQLite:
		if isPG {
			return nil, errors.New("trace: Options.Dialect is sqlite but the database is PostgreSQL (pgx)")
		}
		return sqliteDialect, nil
	case DialectPostgres:
		if !isPG {
			return nil, fmt.Errorf("trace: Options.Dialect is postgres but the database's driver is %T, not pgx's database/sql driver", db.Driver())
		}
		return postgresDialect, nil
	}
	return nil, fmt.Errorf("trace: unknown Options.Dialect %q: expected %q or %q", name, DialectSQLite, DialectPostgres)
}

// sql returns q in the dialect's form. q is one of the package's fixed
// statements (the PostgreSQL form is cached by text); dynamic statements
// go through dyn.
func (d *dialect) sql(q string) string {
	if !d.postgres {
		return q
	}
	if v, ok := d.rebound.Load(q); ok {
		return v.(string)
	}
	r := sqlbind.Dollar(q)
	d.rebound.Store(q, r)
	return r
}

// dyn returns a dynamically built statement in the dialect's form.
func (d *dialect) dyn(q string) string {
	if !d.postgres {
		return q
	}
	return sqlbind.Dollar(q)
}

// inList is the condition "col is one of the strings of the list bound at
// placeholder ph" (the argument is listArg's). notIn is its negation, true
// for a NULL col (as SQL's NOT IN of a subquery is not).
func (d *dialect) inList(col, ph string) string {
	if d.postgres {
		return col + " = ANY(CAST(" + ph + " AS text[]))"
	}
	return col + " IN (SELECT value FROM json_each(" + ph + "))"
}

func (d *dialect) notInList(col, ph string) string {
	return "(" + col + " IS NULL OR NOT " + d.inList(col, ph) + ")"
}

// listArg is the argument inList binds: a JSON array for SQLite's
// json_each, a text[] for PostgreSQL.
func (d *dialect) listArg(vals []string) any {
	if d.postgres {
		if vals == nil {
			vals = []string{}
		}
		return vals
	}
	b, _ := json.Marshal(vals)
	return string(b)
}

// prefixMatch is the case-sensitive condition "col starts with the prefix
// bound at ?" (SQLite's LIKE ignores ASCII case; GLOB does not) and
// prefixArg its argument. Both can use an index on col.
func (d *dialect) prefixMatch(col string) string {
	if d.postgres {
		return col + ` LIKE ? ESCAPE '\'`
	}
	return col + " GLOB ?"
}

func (d *dialect) prefixArg(prefix string) string {
	if d.postgres {
		return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
	}
	return strings.NewReplacer(`*`, `[*]`, `?`, `[?]`, `[`, `[[]`).Replace(prefix) + "*"
}

// direction validates a sort direction ("asc", "desc", "" = asc) and returns
// it in SQL with SQLite's NULL order.
func (d *dialect) direction(dir, path string) (string, error) {
	switch strings.ToLower(dir) {
	case "", "asc":
		return d.asc, nil
	case "desc":
		return d.desc, nil
	}
	return "", httpx.Invalid(path, "invalid_value", `expected "asc" or "desc", got %q`, dir)
}

// retryable reports whether err is a PostgreSQL deadlock or serialization
// failure: the transaction was rolled back and may simply run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// inTx runs fn in a transaction and commits it. SQLite has one writer, so
// this package's writes are serialised in-process (s.writeMu) instead of
// waiting on busy_timeout; PostgreSQL transactions run concurrently, and one
// that lost a deadlock (possible between nodes) is run again, up to three
// times.
func (s *Service) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if !s.d.postgres {
		s.writeMu.Lock()
		defer s.writeMu.Unlock()
	}
	for attempt := 1; ; attempt++ {
		err := runTx(ctx, s.db, fn)
		if err == nil || attempt == 3 || !retryable(err) {
			return err
		}
	}
}

func runTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// exec runs one of the package's fixed statements outside a transaction,
// under the write rules of inTx.
func (s *Service) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = tx.ExecContext(ctx, s.d.sql(q), args...)
		return err
	})
	return res, err
}
