// Package pgtest gives tests a fresh database on a real PostgreSQL server.
//
// The server is named by FLYWHEEL_TEST_POSTGRES, a DSN of a role that may
// create databases (`.ci/run` starts one with `.ci/postgres.sh` and sets it).
// Each call to DSN creates a database of its own, dropped when the test ends,
// so tests and packages run in parallel without seeing each other's rows.
// Without the variable the test is skipped, except under CI (CI set), where a
// missing server is a failure: the PostgreSQL half of a suite must not pass by
// not running.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env is the variable holding the server's DSN.
const Env = "FLYWHEEL_TEST_POSTGRES"

// Admin returns the server's DSN, skipping (or, under CI, failing) the test
// when none is configured.
func Admin(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(Env)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: .ci/run starts a PostgreSQL server with .ci/postgres.sh", Env)
		}
		t.Skipf("no PostgreSQL server: set %s (eval: export %s=$(.ci/postgres.sh start /tmp/pg))", Env, Env)
	}
	return dsn
}

// DSN creates an empty database on the test server and returns its DSN. The
// database is dropped (closing its connections) when the test ends.
func DSN(t testing.TB) string {
	t.Helper()
	admin := Admin(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "flywheel_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: connect %s: %v", admin, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("pgtest: connect to drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", Env, err)
	}
	u.Path = "/" + name
	return u.String()
}

// KillTransactions ends the connections of db's database that sit idle
// inside a transaction (those of its pool and any other client's, not the
// one asking), as a server restart would, and returns how many. It waits
// until each server process is gone, so the next statement on such a
// connection fails.
func KillTransactions(t testing.TB, db *sql.DB) int {
	t.Helper()
	var n int
	err := db.QueryRow(`SELECT count(*) FILTER (WHERE gone) FROM (SELECT pg_terminate_backend(pid, 10000) AS gone FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid()) k`).Scan(&n)
	if err != nil {
		t.Fatalf("pgtest: end the connections in a transaction: %v", err)
	}
	return n
}
