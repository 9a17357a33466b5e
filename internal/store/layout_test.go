package store_test

import (
	"path/filepath"
	"testing"

	"flywheel/internal/store"
)

// TestLayout pins the data dir's paths (docs/architecture.md lists them)
// and that the names the sweeps parse are the names Layout makes.
func TestLayout(t *testing.T) {
	l := store.Layout{DataDir: "/d"}
	for _, c := range [][2]string{
		{l.DatabasePath(), "/d/flywheel.db"},
		{l.AdminKeyPath(), "/d/admin-api-key"},
		{l.DefaultModelsDir(), "/d/models"},
		{l.CheckpointDir("m1", 12), "/d/checkpoints/m1/step-12"},
		{l.WorkDir("m1", "j1"), "/d/checkpoints/m1/.tmp-j1"},
		{l.RequestPath("j1"), "/d/requests/j1.json"},
		{l.FilePath("f1"), "/d/files/f1"},
		{l.RunVersionDir("r1", 3), "/d/runs/r1/v3"},
		{l.RunWorkDir("r1", 3, "node-a"), "/d/runs/r1/.tmp-v3-node-a"},
		{filepath.Dir(l.RequestPath("x")), l.RequestsDir()},
		{filepath.Dir(l.FilePath("x")), l.FilesDir()},
		{filepath.Dir(l.ModelDir("x")), l.CheckpointsDir()},
	} {
		if c[0] != c[1] {
			t.Errorf("got %s, want %s", c[0], c[1])
		}
	}
	if n, ok := store.StepOf(filepath.Base(l.CheckpointDir("m", 7))); n != 7 || !ok {
		t.Errorf("StepOf(step-7) = %d, %v", n, ok)
	}
	for _, bad := range []string{"step-", "step--1", "step-07", "step-x", "v7", ".tmp-step-7"} {
		if _, ok := store.StepOf(bad); ok {
			t.Errorf("StepOf(%q): want not a checkpoint folder", bad)
		}
	}
	for _, name := range []string{filepath.Base(l.WorkDir("m", "j")), filepath.Base(l.RunWorkDir("r", 1, "n"))} {
		if !store.IsWork(name) {
			t.Errorf("IsWork(%q) = false", name)
		}
	}
	if store.IsWork("step-1") {
		t.Error("IsWork(step-1) = true")
	}
}
