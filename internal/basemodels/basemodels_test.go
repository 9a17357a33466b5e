package basemodels_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/basemodels"
)

func TestListAndDir(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"Qwen/Qwen2.5-0.5B-Instruct", "flywheel/tiny", ".hidden/x", "a/b/c", "flywheel/tiny/nested",
		"d1/d2/d3/d4/d5", "e1/e2/e3/e4/e5/e6", "org/.tmp-x"} {
		os.MkdirAll(filepath.Join(dir, p), 0o755)
		os.WriteFile(filepath.Join(dir, p, "config.json"), []byte("{}"), 0o644)
	}
	os.MkdirAll(filepath.Join(dir, "empty/folder"), 0o755)
	os.MkdirAll(filepath.Join(dir, "cfgdir/config.json"), 0o755)
	got, err := basemodels.List(dir)
	if err != nil || strings.Join(got, ",") != "Qwen/Qwen2.5-0.5B-Instruct,a/b/c,d1/d2/d3/d4/d5,flywheel/tiny" {
		t.Errorf("List = %v %v", got, err)
	}
	// Dir accepts exactly what List lists.
	for _, id := range got {
		if d, err := basemodels.Dir(dir, id); err != nil || d != filepath.Join(dir, filepath.FromSlash(id)) {
			t.Errorf("Dir(%q) = %q %v", id, d, err)
		}
	}
	for _, bad := range []string{"", "/etc", "../x", "flywheel/../flywheel/tiny", "flywheel/./tiny", "flywheel//tiny", "empty/folder",
		".hidden/x", "org/.tmp-x", "flywheel\\tiny", "cfgdir", "e1/e2/e3/e4/e5/e6", "missing"} {
		if _, err := basemodels.Dir(dir, bad); !errors.Is(err, basemodels.ErrNotFound) {
			t.Errorf("Dir(%q) = %v, want ErrNotFound", bad, err)
		}
	}
	if got, err := basemodels.List(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Errorf("missing dir: %v %v", got, err)
	}
}

func TestGGUFModels(t *testing.T) {
	dir := t.TempDir()
	files := []string{
		"SmolLM2-135M-Instruct.Q4_1.gguf", // a file at the top: its own model
		"smollm2/model.Q8_0.gguf",         // a folder holding exactly one: the folder is the model
		"two/a.gguf", "two/b.GGUF",        // several: each file is a model
		"hf/config.json", "hf/extra.gguf", // a Hugging Face folder: the .gguf inside is not searched
		".hidden.gguf", "x/.tmp-1.gguf", // hidden: never
		"notes/readme.txt",
	}
	for _, f := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(dir, f), []byte("GGUF"), 0o644)
	}
	os.MkdirAll(filepath.Join(dir, "dir.gguf"), 0o755) // a folder named .gguf is no file
	got, err := basemodels.List(dir)
	want := "SmolLM2-135M-Instruct.Q4_1.gguf,hf,smollm2,two/a.gguf,two/b.GGUF"
	if err != nil || strings.Join(got, ",") != want {
		t.Errorf("List = %v %v, want %s", got, err, want)
	}
	for id, path := range map[string]string{
		"SmolLM2-135M-Instruct.Q4_1.gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
		"smollm2":                         "smollm2/model.Q8_0.gguf",
		"smollm2/model.Q8_0.gguf":         "smollm2/model.Q8_0.gguf",
		"two/a.gguf":                      "two/a.gguf",
		"hf":                              "hf",
	} {
		if p, err := basemodels.Dir(dir, id); err != nil || p != filepath.Join(dir, path) {
			t.Errorf("Dir(%q) = %q %v, want %s", id, p, err, path)
		}
	}
	for _, bad := range []string{"two", ".hidden.gguf", "x/.tmp-1.gguf", "x", "notes/readme.txt", "dir.gguf", "notes"} {
		if _, err := basemodels.Dir(dir, bad); !errors.Is(err, basemodels.ErrNotFound) {
			t.Errorf("Dir(%q) = %v, want ErrNotFound", bad, err)
		}
	}
}
