package sqlmigrate

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"flywheel/internal/pgtest"
)

// set is two migrations in a ledger keyed by file name; the second
// migration's INSERT makes a second application visible (a duplicate row
// fails the PRIMARY KEY).
func set(files fstest.MapFS) Set {
	return Set{
		Name: "test", Files: files, Dir: "m", LockKey: 42,
		Ledger: `CREATE TABLE IF NOT EXISTS test_migrations (version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`,
		Record: func(file string) (string, []any, error) {
			return `INSERT INTO test_migrations (version, applied_at) VALUES (?, ?) ON CONFLICT (version) DO NOTHING`,
				[]any{strings.TrimSuffix(file, ".sql"), "now"}, nil
		},
	}
}

var files = fstest.MapFS{
	"m/001_a.sql": {Data: []byte("-- a table\nCREATE TABLE a (id INTEGER PRIMARY KEY);\nINSERT INTO a (id) VALUES (1);\n")},
	"m/002_b.sql": {Data: []byte("CREATE TABLE b (id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL);\nINSERT INTO b (id, name) VALUES (1, 'x');\n")},
}

// Applying twice, and from several handles at once, applies each migration
// once and records both, on SQLite and PostgreSQL; a failing migration
// leaves nothing of itself and is not recorded.
func TestApply(t *testing.T) {
	open := map[string]func(t *testing.T) (func() *sql.DB, bool){
		"sqlite": func(t *testing.T) (func() *sql.DB, bool) {
			path := filepath.Join(t.TempDir(), "db.sqlite")
			return func() *sql.DB {
				db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			}, false
		},
		"postgres": func(t *testing.T) (func() *sql.DB, bool) {
			dsn := pgtest.DSN(t)
			return func() *sql.DB {
				db, err := sql.Open("pgx", dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			}, true
		},
	}
	for name, o := range open {
		t.Run(name, func(t *testing.T) {
			newDB, pg := o(t)
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = set(files).Apply(ctx, newDB(), pg)
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			db := newDB()
			if err := set(files).Apply(ctx, db, pg); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRow(`SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b) + (SELECT count(*) FROM test_migrations)`).Scan(&n); err != nil || n != 4 {
				t.Fatalf("rows in a, b and the ledger: %d, %v (want 1 + 1 + 2)", n, err)
			}
			bad := fstest.MapFS{"m/003_c.sql": {Data: []byte("CREATE TABLE c (id INTEGER);\nINSERT INTO nowhere VALUES (1);\n")}}
			for k, v := range files {
				bad[k] = v
			}
			if err := set(bad).Apply(ctx, db, pg); err == nil || !strings.Contains(err.Error(), "003_c") {
				t.Fatalf("a failing migration: %v", err)
			}
			if err := db.QueryRow(`SELECT count(*) FROM test_migrations`).Scan(&n); err != nil || n != 2 {
				t.Fatalf("ledger after a failed migration: %d rows, %v", n, err)
			}
			if _, err := db.Exec(`SELECT * FROM c`); err == nil {
				t.Fatal("the failed migration's table exists")
			}
		})
	}
}

func TestStatements(t *testing.T) {
	got := Statements("-- comment\nCREATE TABLE x (\n  a INTEGER\n);\n\nINSERT INTO x VALUES (1);\nSELECT 1")
	if len(got) != 3 || !strings.HasPrefix(got[0], "CREATE TABLE x (") || !strings.HasSuffix(got[0], ");\n") || got[2] != "SELECT 1\n" {
		t.Fatalf("Statements = %q", got)
	}
}
