package app_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/app"
	"flywheel/internal/store"
)

func newApp(t *testing.T, cfg app.Config) *app.App {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	a, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestBootstrapWritesKeyFile: a fresh data dir gets user admin with a
// generated key in <data-dir>/admin-api-key (0600); a second start with
// users present changes nothing.
func TestBootstrapWritesKeyFile(t *testing.T) {
	dir := t.TempDir()
	a := newApp(t, app.Config{DataDir: dir})
	path := filepath.Join(dir, "admin-api-key")
	if a.BootstrapKeyFile != path {
		t.Errorf("BootstrapKeyFile = %q", a.BootstrapKeyFile)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	key, _ := os.ReadFile(path)
	if p, err := a.Store.Authenticate(context.Background(), strings.TrimSpace(string(key))); err != nil || p.UserName != "admin" || !p.Member("admin") {
		t.Errorf("bootstrap key: %v", err)
	}
	a.Close()

	b := newApp(t, app.Config{DataDir: dir})
	defer b.Close()
	if b.BootstrapKeyFile != "" {
		t.Error("second start wrote a key again")
	}
	var n int
	if err := b.Store.DB().QueryRow("SELECT count(*) FROM users").Scan(&n); err != nil || n != 1 {
		t.Errorf("%d users", n)
	}
}

// TestNewServesAndSweeps builds the service on a data dir holding what a
// crash leaves behind, then uses it over HTTP: the given bootstrap key
// works, flywheel/tiny is a base model, a model can be created, and the
// leftovers are gone.
func TestNewServesAndSweeps(t *testing.T) {
	dir := t.TempDir()
	const key = "fw_app_test_key_0123456789"
	a := newApp(t, app.Config{DataDir: dir, BootstrapKey: key})
	srv := httptest.NewServer(a.Handler())
	do := func(method, path, body string) map[string]any {
		t.Helper()
		return mustDo(t, srv.URL, key, method, path, body)
	}
	if a.BootstrapKeyFile != "" {
		t.Error("a given bootstrap key was written to a file")
	}
	check := do("GET", "/v1/system-check", "")
	if bases := check["engine"].(map[string]any)["base_models"].([]any); len(bases) != 1 || bases[0] != "flywheel/tiny" {
		t.Errorf("base models %v", bases)
	}
	m := do("POST", "/v1/preview/models", `{"project": "p", "name": "m", "base_model": "flywheel/tiny"}`)
	modelID := m["id"].(string)
	srv.Close()
	a.Close()

	// What a crash leaves: a job's work folder, and a published step with no row.
	layout := store.Layout{DataDir: dir}
	work := layout.WorkDir(modelID, store.NewID())
	orphan := layout.CheckpointDir(modelID, 1)
	for _, d := range []string{work, orphan} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := newApp(t, app.Config{DataDir: dir})
	defer b.Close()
	for _, d := range []string{work, orphan} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("leftover %s survived the start", filepath.Base(d))
		}
	}
	if _, err := os.Stat(filepath.Join(layout.CheckpointDir(modelID, 0), "adapter_model.safetensors")); err != nil {
		t.Errorf("step 0: %v", err)
	}
}
