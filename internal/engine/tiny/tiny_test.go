package tiny

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsureDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := Ensure(a); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(b); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(a); err != nil { // second call: no-op
		t.Fatal(err)
	}
	for _, f := range files {
		x, err := os.ReadFile(filepath.Join(a, "flywheel", "tiny", f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, "flywheel", "tiny", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between runs", f)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(a, "flywheel"))
	if len(ents) != 1 || ents[0].Name() != "tiny" {
		t.Errorf("leftovers in models dir: %v", ents)
	}
	tk := Vocab(DefaultSpec())
	if tk.VocabSize < 1000 || tk.VocabSize > 2100 {
		t.Errorf("vocab size %d, want ~1000-2000", tk.VocabSize)
	}
	t.Logf("vocab %d merges %d", tk.VocabSize, tk.NumMerges)
}

func TestEnsureConcurrent(t *testing.T) {
	dir := t.TempDir()
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() { errs <- Ensure(dir) }()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !complete(filepath.Join(dir, "flywheel", "tiny")) {
		t.Fatal("incomplete model")
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "flywheel"))
	if len(ents) != 1 {
		t.Fatalf("leftovers: %v", ents)
	}
}

func TestWriteSpecs(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Spec{Arch: "Qwen3ForCausalLM", Shards: 2, DType: "BF16", Merges: 50}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "config.json", "tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if err := Write(t.TempDir(), Spec{Arch: "GPT2LMHeadModel"}); err == nil {
		t.Error("unsupported arch: want error")
	}
	if v := Vocab(Spec{Merges: 50}); v.VocabSize != 256+50+5 || v.ImEnd != 256+50+2 {
		t.Errorf("vocab %+v", v)
	}
}
