package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"flywheel/internal/atomicfile"
)

func TestWriteFileReplacesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f.json")
	for _, content := range []string{"first", "second"} {
		if err := atomicfile.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("content %q %v, want %q", got, err, content)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries, want only the file", len(entries))
	}
}

func TestAbortKeepsTheOldContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("new, partial"))
	if got, _ := os.ReadFile(f.TempName()); string(got) != "new, partial" {
		t.Errorf("temp file holds %q", got)
	}
	f.Abort()
	f.Abort() // idempotent
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("after abort: %q", got)
	}
	if err := f.Commit(); err == nil {
		t.Error("commit after abort succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temp file left behind: %d entries", len(entries))
	}
}

func TestCommitUnsynced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "body.json")
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	f.Write([]byte("{}"))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("destination visible before commit")
	}
	if err := f.CommitUnsynced(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "{}" {
		t.Errorf("content %q", got)
	}
}
