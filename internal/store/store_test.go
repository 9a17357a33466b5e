package store_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// dbPath is the file of an SQLite store.
func dbPath(t *testing.T, st store.Database) string {
	t.Helper()
	var seq int
	var name, file string
	if err := st.DB().QueryRow("PRAGMA database_list").Scan(&seq, &name, &file); err != nil {
		t.Fatal(err)
	}
	return file
}

// opener opens the test's database; each call opens it again (a restart).
type opener func(t *testing.T) store.Database

// backends runs fn against a fresh SQLite file and a fresh PostgreSQL
// database (internal/pgtest: skipped without a server, failed under CI).
func backends(t *testing.T, fn func(t *testing.T, open opener)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "flywheel.db")
		fn(t, func(t *testing.T) store.Database {
			t.Helper()
			st, err := store.OpenSQLite(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		fn(t, func(t *testing.T) store.Database {
			t.Helper()
			st, err := store.OpenPostgres(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		})
	})
}

// otherLast returns key with its last character changed: always another
// key (replacing it with a fixed character is the same key when the key
// already ends in it, one time in 64).
func otherLast(key string) string {
	c := byte('A')
	if key[len(key)-1] == c {
		c = 'B'
	}
	return key[:len(key)-1] + string(c)
}

// countUsers counts the users in st's database.
func countUsers(t *testing.T, st store.Database) int {
	t.Helper()
	var n int
	if err := st.DB().QueryRow("SELECT count(*) FROM users").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// completeJob publishes a job's checkpoint as the job queue does:
// LockLease, then Complete under it.
func completeJob(ctx context.Context, st store.Jobs, l store.Lease, ck store.Checkpoint, metrics map[string]any) (store.Checkpoint, error) {
	t, err := st.LockLease(ctx, l)
	if err != nil {
		return ck, err
	}
	defer t.Rollback()
	return t.Complete(ctx, ck, metrics)
}

func TestKeys(t *testing.T) { backends(t, testKeys) }

func testKeys(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	if n := countUsers(t, st); n != 0 {
		t.Fatalf("fresh database has %d users", n)
	}
	if _, err := st.EnsureUser(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureUser(ctx, "ann"); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := st.AddMembership(ctx, "ann", "lab"); err != nil {
		t.Fatal(err)
	}
	rec, key, err := st.CreateKey(ctx, "ann", "laptop", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "fw_") || len(key) != 43 || rec.Prefix != key[:store.KeyPrefixLen] {
		t.Errorf("key %q prefix %q", key, rec.Prefix)
	}
	p, err := st.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if p.UserName != "ann" || p.PersonalEntity != "ann" || !p.Member("ann") || !p.Member("lab") || p.Member("other") || p.KeyID != rec.ID {
		t.Errorf("principal %+v", p)
	}
	for _, bad := range []string{"", key + "x", otherLast(key), rec.Prefix} {
		if _, err := st.Authenticate(ctx, bad); !errors.Is(err, store.ErrUnauthorized) {
			t.Errorf("Authenticate(%q) = %v", bad, err)
		}
	}
	// The key is never stored in clear.
	if st.Dialect() == "sqlite" {
		path := dbPath(t, st)
		st.Close()
		raw, _ := os.ReadFile(path)
		wal, _ := os.ReadFile(path + "-wal")
		if bytes.Contains(raw, []byte(key)) || bytes.Contains(wal, []byte(key)) {
			t.Error("API key stored in clear")
		}
	} else {
		var n int
		if err := st.DB().QueryRow("SELECT count(*) FROM api_keys WHERE strpos(id || name || prefix || encode(key_hash, 'escape'), $1) > 0", key).Scan(&n); err != nil || n != 0 {
			t.Errorf("API key stored in clear: %d rows, %v", n, err)
		}
		st.Close()
	}
	st = open(t) // migrations are idempotent
	keys, err := st.ListKeys(ctx, "ann")
	if err != nil || len(keys) != 1 || keys[0].Prefix != rec.Prefix || keys[0].UserName != "ann" {
		t.Fatalf("list: %+v %v", keys, err)
	}
	if err := st.RevokeKey(ctx, rec.Prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Authenticate(ctx, key); !errors.Is(err, store.ErrUnauthorized) {
		t.Errorf("revoked key authenticates: %v", err)
	}
	if err := st.RevokeKey(ctx, rec.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoke twice: %v", err)
	}
	if _, _, err := st.CreateKey(ctx, "nobody", "", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("key for missing user: %v", err)
	}
	// A chosen key (bootstrap) works too.
	if _, _, err := st.CreateKey(ctx, "ann", "", "a-chosen-bootstrap-key"); err != nil {
		t.Fatal(err)
	}
	if p, err := st.Authenticate(ctx, "a-chosen-bootstrap-key"); err != nil || p.UserName != "ann" {
		t.Errorf("chosen key: %v", err)
	}
	if _, err := st.EnsureUser(ctx, "a/b"); err == nil {
		t.Error("user name with a slash accepted")
	}
}

func TestModelsAndCheckpoints(t *testing.T) { backends(t, testModelsAndCheckpoints) }

func testModelsAndCheckpoints(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	st.EnsureUser(ctx, "ann")
	st.EnsureUser(ctx, "bo")
	m := store.TrainedModel{ID: store.NewID(), Entity: "ann", Project: "p", Name: "m", BaseModel: "b", LoRA: store.LoRA{Rank: 8, Alpha: 16, TargetModules: []string{"q_proj"}}}
	if _, err := st.CreateModel(ctx, m, store.Checkpoint{Step: 0, Dir: "/d/0"}); err != nil {
		t.Fatal(err)
	}
	dup := m
	dup.ID = store.NewID()
	if _, err := st.CreateModel(ctx, dup, store.Checkpoint{Step: 0, Dir: "/d/0"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate: %v", err)
	}
	got, err := st.ModelByName(ctx, "ann", "p", "m")
	if err != nil || got.ID != m.ID || got.LatestStep != 0 || got.LoRA.Rank != 8 {
		t.Fatalf("by name: %+v %v", got, err)
	}
	if _, err := st.ModelByID(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing model: %v", err)
	}
	if _, err := st.CheckpointByStep(ctx, m.ID, 5); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing step: %v", err)
	}
	ms, err := st.ListModels(ctx, []string{"bo"})
	if err != nil || len(ms) != 0 {
		t.Errorf("other entity lists %d", len(ms))
	}
	ms, _ = st.ListModels(ctx, []string{"ann", "bo"})
	if len(ms) != 1 {
		t.Errorf("list %d", len(ms))
	}

	// A running job pins the step it trains from.
	j, err := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL, RequestPath: "/r"})
	if err != nil {
		t.Fatal(err)
	}
	claimed, ok, err := st.ClaimNext(ctx, "node-a", time.Hour, nil)
	if err != nil || !ok || claimed.ID != j.ID || *claimed.FromStep != 0 {
		t.Fatalf("claim: %+v %v %v", claimed, ok, err)
	}
	if _, ok, _ := st.ClaimNext(ctx, "node-a", time.Hour, nil); ok {
		t.Error("claimed a second job")
	}
	if _, _, err := st.DeleteCheckpoints(ctx, m.ID, []int{0}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete a step in use: %v", err)
	}
	if _, err := st.DeleteModel(ctx, m.ID); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete a model in training: %v", err)
	}
	ck, err := completeJob(ctx, st, claimed.Lease(), store.Checkpoint{ModelID: m.ID, Step: 1, Dir: "/d/1", Metrics: map[string]float64{"loss": 1}}, map[string]any{"loss": 1})
	if err != nil {
		t.Fatal(err)
	}
	latest, _ := st.LatestCheckpoint(ctx, m.ID)
	if latest.ID != ck.ID || latest.Step != 1 || latest.Dir != "/d/1" {
		t.Errorf("latest %+v", latest)
	}
	if err := st.FinishJob(ctx, j.ID, store.StatusFailed, "late"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("finish a completed job: %v", err)
	}
	if _, err := st.LogMetrics(ctx, m.ID, "val", map[string]float64{"val/reward": 0.5}); err != nil {
		t.Fatal(err)
	}
	latest, _ = st.LatestCheckpoint(ctx, m.ID)
	if latest.Metrics["val/reward"] != 0.5 || latest.Metrics["loss"] != 1 {
		t.Errorf("metrics %v", latest.Metrics)
	}
	deleted, err := st.DeleteModel(ctx, m.ID)
	if err != nil || len(deleted) != 2 {
		t.Fatalf("delete model: %d %v", len(deleted), err)
	}
	if _, err := st.JobByID(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("job survives its model: %v", err)
	}
}

// User, entity and key names refuse control and bidirectional-override
// characters; operator-given keys are checked before anything is written.
func TestNamesAndKeysRefused(t *testing.T) { backends(t, testNamesAndKeysRefused) }

func testNamesAndKeysRefused(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	for _, bad := range []string{"a\u0000b", "a\u0007b", "a\u202eb", "a\rb"} {
		if _, err := st.EnsureUser(ctx, bad); err == nil {
			t.Errorf("user %q accepted", bad)
		}
	}
	st.EnsureUser(ctx, "ann")
	if err := st.AddMembership(ctx, "ann", "lab\u202e"); err == nil {
		t.Error("entity with a bidi override accepted")
	}
	if _, _, err := st.CreateKey(ctx, "ann", "laptop\u0000", ""); err == nil {
		t.Error("key name with NUL accepted")
	}
	for _, bad := range []string{"short", "sixteen chars ok", "fw_0123456789abc\u00e9"} {
		if err := store.ValidateKey(bad); err == nil {
			t.Errorf("key %q accepted", bad)
		}
		if _, _, err := st.Bootstrap(ctx, "admin", "bootstrap", bad, nil); err == nil {
			t.Errorf("bootstrap with key %q", bad)
		}
	}
	if n := countUsers(t, st); n != 1 {
		t.Errorf("refused bootstraps left %d users", n)
	}
	key, ok, err := st.Bootstrap(ctx, "admin", "bootstrap", "", nil)
	if err != nil || !ok || len(key) != 43 {
		t.Fatalf("bootstrap: %q %v %v", key, ok, err)
	}
	if _, ok, err := st.Bootstrap(ctx, "admin", "bootstrap", "", nil); err != nil || ok {
		t.Errorf("second bootstrap: %v %v", ok, err)
	}
}

// Sweep removes the selected leftovers; on a shared data dir only those
// older than SharedSweepAge (a recent one may be another node's write).
func TestSweep(t *testing.T) {
	for _, shared := range []bool{false, true} {
		dir := t.TempDir()
		old := time.Now().Add(-2 * store.SharedSweepAge)
		for _, name := range []string{"old.tmp", "new.tmp", "old.keep", "new.keep"} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(name, "old") {
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
		}
		removed, err := store.Sweep(dir, shared, func(name string) bool { return strings.HasSuffix(name, ".tmp") })
		want := []string{"new.tmp", "old.tmp"}
		if shared {
			want = []string{"old.tmp"}
		}
		sort.Strings(removed)
		if err != nil || !slices.Equal(removed, want) {
			t.Fatalf("shared=%v: removed %v, %v; want %v", shared, removed, err, want)
		}
		left, _ := os.ReadDir(dir)
		if len(left) != 4-len(want) {
			t.Fatalf("shared=%v: %d entries left", shared, len(left))
		}
	}
	if removed, err := store.Sweep(filepath.Join(t.TempDir(), "missing"), false, func(string) bool { return true }); removed != nil || err != nil {
		t.Fatalf("a missing folder: %v %v", removed, err)
	}
}
