package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"
	"time"

	"flywheel/internal/sqlbind"
	"flywheel/internal/sqlmigrate"
)

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

// Database is a Store kept in a database/sql database: the SQLite file or a
// PostgreSQL database. Packages that keep their own tables in the same
// database (the call store) get it with DB and speak its Dialect.
type Database interface {
	Store
	// DB returns the underlying database. Other packages must not touch
	// the tables of this package.
	DB() *sql.DB
	// Dialect is "sqlite" or "postgres".
	Dialect() string
	// Shared reports whether other processes (nodes) may use the same
	// database and data dir at the same time: true for PostgreSQL. Start-up
	// sweeps then leave alone what another node may be working on.
	Shared() bool
}

// dialect holds what differs between the SQL engines; everything else
// (queries written with ? placeholders, scanning, validation, transactions)
// is shared by the one implementation, sqlDB.
type dialect struct {
	name string
	// dollar: placeholders are $1, $2, ... (PostgreSQL) instead of ?.
	dollar bool
	// forUpdate, forShare and skipLocked are appended to a SELECT to lock
	// its rows ("" for SQLite, whose write transactions are serialised by
	// BEGIN IMMEDIATE).
	forUpdate, forShare, skipLocked string
	// nowMS is an SQL expression of the database server's clock in
	// milliseconds since the Unix epoch: lease expiries are compared on
	// one clock, the database's, never the nodes'.
	nowMS string
	// requeueAll: at start-up every RUNNING job belongs to a dead process
	// (one node); otherwise only those whose lease expired.
	requeueAll bool
	// isUnique and isForeignKey classify constraint violations.
	isUnique, isForeignKey func(error) bool
	// lock, when set, is a statement taking a transaction-scoped lock
	// named by its one argument (see serialize).
	lock string
	// notify, when set, runs in a transaction that changed the job queue
	// (a job queued or ended) to wake the queues of other nodes at commit.
	notify func(ctx context.Context, q queryer) error
}

// bind rewrites ? placeholders to $n for PostgreSQL (sqlbind.Dollar).
func (d *dialect) bind(q string) string {
	if !d.dollar || !strings.Contains(q, "?") {
		return q
	}
	return sqlbind.Dollar(q)
}

// serialize makes the transactions that call it with the same name run one
// at a time: on PostgreSQL with an advisory lock held until tx ends; SQLite
// write transactions are serialised already.
func (d *dialect) serialize(ctx context.Context, tx *rtx, name string) error {
	if d.lock == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, d.lock, "flywheel:"+name); err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	return nil
}

// sqlDB implements Store over database/sql for both dialects. SQLite and
// Postgres embed it and add their own opening and connection settings.
type sqlDB struct {
	raw *sql.DB
	db  *rdb
	d   *dialect
}

func newSQLDB(raw *sql.DB, d *dialect) *sqlDB {
	return &sqlDB{raw: raw, db: &rdb{bound{raw: raw, d: d}}, d: d}
}

// DB returns the underlying database, for packages that keep their own
// tables in the same database (the call store). They must not touch the
// tables of this package.
func (s *sqlDB) DB() *sql.DB { return s.raw }

// Dialect is "sqlite" or "postgres".
func (s *sqlDB) Dialect() string { return s.d.name }

// Shared reports whether several nodes may share this database.
func (s *sqlDB) Shared() bool { return !s.d.requeueAll }

// Ping checks the connection with a trivial query.
func (s *sqlDB) Ping(ctx context.Context) error {
	var one int
	return s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// Close closes the database.
func (s *sqlDB) Close() error { return s.raw.Close() }

// rdb and rtx are *sql.DB and *sql.Tx with the dialect's placeholders
// (bound); rtx keeps its transaction for commit and rollback.
type rdb struct{ bound }

type rtx struct {
	bound
	tx *sql.Tx
}

// bound runs statements on raw (a database or a transaction) with their ?
// placeholders rewritten for the dialect.
type bound struct {
	raw queryer
	d   *dialect
}

func (b bound) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return b.raw.ExecContext(ctx, b.d.bind(q), args...)
}

func (b bound) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return b.raw.QueryContext(ctx, b.d.bind(q), args...)
}

func (b bound) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return b.raw.QueryRowContext(ctx, b.d.bind(q), args...)
}

// queryer is what *sql.DB, *sql.Tx, rdb and rtx share.
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// begin starts a write transaction (BEGIN IMMEDIATE on SQLite; READ
// COMMITTED on PostgreSQL, where the statements lock the rows they change).
func (s *sqlDB) begin(ctx context.Context) (*rtx, error) {
	tx, err := s.raw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &rtx{bound: bound{raw: tx, d: s.d}, tx: tx}, nil
}

// tx runs fn in a write transaction, committing when it returns nil.
func (s *sqlDB) tx(ctx context.Context, fn func(*rtx) error) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.tx.Rollback()
		return err
	}
	if err := tx.tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// migrate applies the embedded migrations of the dialect that are not yet
// recorded in schema_migrations (sqlmigrate: one transaction each, under a
// PostgreSQL advisory lock).
func (s *sqlDB) migrate(ctx context.Context) error {
	return sqlmigrate.Set{
		Name: "store", Files: migrations, Dir: "migrations/" + s.d.name, LockKey: migrationLockKey,
		Ledger: `CREATE TABLE IF NOT EXISTS schema_migrations (
			version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`,
		Record: func(file string) (string, []any, error) {
			return `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?) ON CONFLICT (version) DO NOTHING`,
				[]any{strings.TrimSuffix(file, ".sql"), FormatTime(now())}, nil
		},
	}.Apply(ctx, s.raw, s.d.dollar)
}

// migrationLockKey is the PostgreSQL advisory lock held while the store
// migrates (an arbitrary constant: "flywheel store" in ASCII, 8 bytes).
const migrationLockKey int64 = 0x666c7973746f7265

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

func parseTimePtr(s sql.NullString) *time.Time {
	if !s.Valid {
		return nil
	}
	t := parseTime(s.String)
	return &t
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// pageClause returns the ORDER BY / cursor SQL of a page over column "id",
// with args, and the effective limit (one more is fetched to learn has_more).
func pageClause(p Page, alias string) (where string, order string, limit int, args []any) {
	col := "id"
	if alias != "" {
		col = alias + ".id"
	}
	limit = p.Limit
	if limit <= 0 {
		limit = 20
	}
	order = " ORDER BY " + col + " ASC"
	if p.Desc {
		order = " ORDER BY " + col + " DESC"
	}
	if p.After != "" {
		if p.Desc {
			where = " AND " + col + " < ?"
		} else {
			where = " AND " + col + " > ?"
		}
		args = append(args, p.After)
	}
	return where, order, limit, args
}
