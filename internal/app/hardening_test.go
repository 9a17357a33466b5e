package app_test

import (
	"context"
	"database/sql"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"flywheel/internal/app"
	"flywheel/internal/store"
)

// A too-short bootstrap key refuses the start with a message naming the
// variable, before anything is written; the next start with a good key
// creates admin with that key.
func TestBootstrapRefusesABadKeyBeforeWriting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, bad := range []string{"short", "has a space in it ok", "fw_\x00_control_key_0123"} {
		_, err := app.New(context.Background(), app.Config{DataDir: dir, BootstrapKey: bad, Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), "FLYWHEEL_BOOTSTRAP_API_KEY") {
			t.Fatalf("key %q: err = %v", bad, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused start wrote the data dir: %v", err)
	}
	const key = "fw_a_good_bootstrap_key_0123"
	a := newApp(t, app.Config{DataDir: dir, BootstrapKey: key})
	defer a.Close()
	if p, err := a.Store.Authenticate(context.Background(), key); err != nil || p.UserName != "admin" {
		t.Fatalf("admin key: %v %v", p, err)
	}
}

// A database locked out by the old bootstrap (user admin, no key at all)
// is repaired at the next start; one whose keys were all revoked is not.
func TestBootstrapRepairsALockedOutDatabase(t *testing.T) {
	dir := t.TempDir()
	st, _, err := store.OpenDataDir(context.Background(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureUser(context.Background(), "admin"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	a := newApp(t, app.Config{DataDir: dir})
	key, err := os.ReadFile(filepath.Join(dir, "admin-api-key"))
	if err != nil || a.BootstrapKeyFile == "" {
		t.Fatalf("no key written: %v", err)
	}
	if _, err := a.Store.Authenticate(context.Background(), strings.TrimSpace(string(key))); err != nil {
		t.Fatal(err)
	}
	keys, _ := a.Store.ListKeys(context.Background(), "admin")
	if err := a.Store.RevokeKey(context.Background(), keys[0].ID); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := newApp(t, app.Config{DataDir: dir})
	defer b.Close()
	if b.BootstrapKeyFile != "" {
		t.Error("a database whose keys were revoked was bootstrapped again")
	}
}

// When the key file cannot be written, neither the user nor the key is
// created: the next start bootstraps again.
func TestBootstrapIsOneTransaction(t *testing.T) {
	dir := t.TempDir()
	// A folder where the key file goes makes its rename fail.
	if err := os.MkdirAll(filepath.Join(dir, "admin-api-key", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := app.New(context.Background(), app.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)}); err == nil {
		t.Fatal("start succeeded without writing the admin key")
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "flywheel.db"))
	if err != nil {
		t.Fatal(err)
	}
	var users, keys int
	db.QueryRow("SELECT count(*) FROM users").Scan(&users)
	db.QueryRow("SELECT count(*) FROM api_keys").Scan(&keys)
	db.Close()
	if users != 0 || keys != 0 {
		t.Fatalf("a failed bootstrap left %d users, %d keys", users, keys)
	}
	os.RemoveAll(filepath.Join(dir, "admin-api-key"))
	a := newApp(t, app.Config{DataDir: dir})
	defer a.Close()
	if a.BootstrapKeyFile == "" {
		t.Error("the next start did not bootstrap")
	}
}

// The data dir and its folders are 0700, the database, request bodies,
// uploads, checkpoints and the admin key 0600 — also when the data dir
// existed with wider modes.
func TestDataDirIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	a := newApp(t, app.Config{DataDir: dir, ModelsDir: filepath.Join(t.TempDir(), "models")})
	srv, key := serveApp(t, a)
	mustDo(t, srv, key, "POST", "/v1/preview/models", `{"project": "p", "name": "m", "base_model": "flywheel/tiny"}`)
	mustUpload(t, srv, key, "train.jsonl", `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}`+"\n")
	a.Close()

	seen := map[string]bool{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		st, _ := d.Info()
		want := os.FileMode(store.FileMode)
		if d.IsDir() {
			want = store.DirMode
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", strings.TrimPrefix(path, dir), got, want)
		}
		rel, _ := filepath.Rel(dir, path)
		seen[strings.SplitN(rel, string(filepath.Separator), 2)[0]] = true
		return nil
	})
	for _, want := range []string{"flywheel.db", "admin-api-key", "checkpoints", "files"} {
		if !seen[want] {
			t.Errorf("%s not found under the data dir: %v", want, seen)
		}
	}
}

// An upload cut short by kill -9 (atomicfile's temp file under files/) is
// removed at the next start; uploaded files are kept.
func TestStartSweepsInterruptedUploads(t *testing.T) {
	dir := t.TempDir()
	a := newApp(t, app.Config{DataDir: dir})
	srv, key := serveApp(t, a)
	id := mustUpload(t, srv, key, "train.jsonl", `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}`+"\n")
	a.Close()
	parts := []string{filepath.Join(dir, "files", ".tmp-file-0123-456789"), filepath.Join(dir, "files", "file-0123.part")}
	for _, p := range parts {
		if err := os.WriteFile(p, []byte("half an upload"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := newApp(t, app.Config{DataDir: dir})
	defer b.Close()
	for _, p := range parts {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("interrupted upload %s survived the start: %v", filepath.Base(p), err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "files", id)); err != nil {
		t.Errorf("uploaded file: %v", err)
	}
}
