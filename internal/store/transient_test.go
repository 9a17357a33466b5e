package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// Transient says yes to the failures a retry may outlive, as the databases
// report them (a connection the PostgreSQL server ended, as a restart
// does; SQLite busy with another writer), and no to a statement the
// database refuses.
func TestTransient(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "t.db")
		open := func() *sql.DB {
			db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)&_txlock=immediate")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		a, b := open(), open()
		if _, err := a.Exec("CREATE TABLE x (v INTEGER PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		tx, err := a.Begin() // holds the write lock
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = b.Begin()
		if err == nil || !store.Transient(err) {
			t.Errorf("a write while another connection writes: %v, want transient", err)
		}
		_, err = tx.Exec("INSERT INTO x VALUES (1), (1)")
		if err == nil || store.Transient(err) {
			t.Errorf("a constraint violation: %v, want permanent", err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		ctx := context.Background()
		st := pgNodes(t, pgtest.DSN(t), 1)[0]
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if n := pgtest.KillTransactions(t, st.DB()); n != 1 {
			t.Fatalf("the server ended %d connections, want 1", n)
		}
		_, err = tx.Exec("SELECT 1")
		if err == nil || !store.Transient(fmt.Errorf("complete job: %w", err)) {
			t.Errorf("a statement on a connection the server ended: %v, want transient", err)
		}
		_, err = st.DB().Exec("SELECT 1/0")
		if err == nil || store.Transient(err) {
			t.Errorf("a division by zero: %v, want permanent", err)
		}
		newModel(t, st, "m")
		_, err = st.CreateModel(ctx, store.TrainedModel{ID: store.NewID(), Entity: "ann", Project: "p", Name: "m", BaseModel: "b"}, store.Checkpoint{Step: 0, Dir: "/d/0"})
		if err == nil || store.Transient(err) {
			t.Errorf("a taken name: %v, want permanent", err)
		}
	})
}
