package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/engine/tiny"
)

// The hashes below were computed at 965d860, before the model's parameter
// list became one spec (params.List): the tiny model's files, random
// weights and the weights loaded from safetensors folders and GGUF files
// must stay bit-identical across that change (and any later one that is
// meant to keep them).

// hashFloats writes a length (-1 for nil) and the values' bits.
func hashFloats(h hash.Hash, v []float32) {
	n := int64(len(v))
	if v == nil {
		n = -1
	}
	_ = binary.Write(h, binary.LittleEndian, n)
	_ = binary.Write(h, binary.LittleEndian, v)
}

func hashMat(h hash.Hash, m Mat) {
	_ = binary.Write(h, binary.LittleEndian, []int64{int64(m.kind()), int64(m.HalfType), int64(m.QuantType), int64(m.Len())})
	h.Write(byteView(m))
}

// weightsHash hashes every field of w in a fixed order, with whether the
// fused buffers hold their parts and whether the LM head is the embedding.
func weightsHash(w *Weights) string {
	h := sha256.New()
	hashMat(h, w.Embed)
	for l := range w.Layers {
		L := &w.Layers[l]
		hashFloats(h, L.AttnNorm)
		for _, m := range []Mat{L.Wq, L.Wk, L.Wv, L.Wo} {
			hashMat(h, m)
		}
		for _, v := range [][]float32{L.Bq, L.Bk, L.Bv, L.Bo, L.QNorm, L.KNorm, L.MLPNorm} {
			hashFloats(h, v)
		}
		for _, m := range []Mat{L.Wgate, L.Wup, L.Wdown} {
			hashMat(h, m)
		}
		_ = binary.Write(h, binary.LittleEndian, []bool{partsOf(L.QKV, L.Wq, L.Wk, L.Wv), partsOf(L.GateUp, L.Wgate, L.Wup)})
	}
	hashFloats(h, w.Norm)
	hashMat(h, w.LMHead)
	_ = binary.Write(h, binary.LittleEndian, w.LMHead.addr() == w.Embed.addr())
	return hex.EncodeToString(h.Sum(nil))
}

// filesHash hashes the names and bytes of the files in dir.
func filesHash(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(n))
		_ = binary.Write(h, binary.LittleEndian, int64(len(b)))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func fileHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// goldenSpecs are tiny models covering every parameter rule: tied and
// untied heads, q/k/v and o biases, Qwen2's unconditional q/k/v biases,
// Qwen3's q/k norms, Mistral (no biases whatever attention_bias says), a
// head dimension other than hidden/heads, 16-bit storage and shards.
var goldenSpecs = []struct {
	name string
	spec tiny.Spec
}{
	{"default", tiny.DefaultSpec()},
	{"llama-bias-bf16", tiny.Spec{AttentionBias: true, DType: "BF16", Untied: true, Merges: 100}},
	{"qwen2-tied", tiny.Spec{Arch: "Qwen2ForCausalLM", Merges: 100, Seed: 3}},
	{"qwen3-bias-headdim", tiny.Spec{Arch: "Qwen3ForCausalLM", AttentionBias: true, HeadDim: 32, Untied: true, Merges: 100}},
	{"mistral-bias-f16-shards", tiny.Spec{Arch: "MistralForCausalLM", AttentionBias: true, DType: "F16", Shards: 3, SlidingWindow: 16, Merges: 100}},
}

func TestGoldenTinyFolders(t *testing.T) {
	want := map[string][2]string{ // files, loaded weights
		"default": {
			"36ac7acd860d1a430d4d0a3537a5fd75cbe70f9cd1c894b74ef670b1948db77b",
			"c2863d52c425ac0ea25cfda4eab9b0556bbf088a33d433adbb3dc9422ee8a5d6"},
		"llama-bias-bf16": {
			"91b1b1ddc8b9b81ee70ccff02b456013da44c90dbe7986ff45ebfe487d885567",
			"41e906e54bf9dcef32ae74b423de1641fdc086e30e6557fb90ef76ff696a100c"},
		"qwen2-tied": {
			"383537b0e9dac96febff0cd5eb5f1f751fee4e241d67975d09a0e4a6a24907b6",
			"03cb0370aa72b7a041bf39415cea5d771b157a3997558e144c5ae424015ac2f9"},
		"qwen3-bias-headdim": {
			"c5dfcd615d495765cb78a33b6866f2cfd773ed1b24b0b017621c879cf5cd76c4",
			"e4bf882dcd0010367e458b9b425e2f5146cc117e637bc3a826c7df2508079fa4"},
		"mistral-bias-f16-shards": {
			"fc7e4f92e93b042c591631b78e429bc32453186201f9dcb84ffb1edf8be15502",
			"c8f5dbfbe5786deb6634b76e1ef1b0298e02e1e03d4cdb6572d89f2a8233490c"},
	}
	for _, c := range goldenSpecs {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tiny.Write(dir, c.spec); err != nil {
				t.Fatal(err)
			}
			files := filesHash(t, dir)
			m, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			loaded := weightsHash(m.Weights)
			if got := [2]string{files, loaded}; got != want[c.name] {
				t.Errorf("files, weights = %q, want %q", got, want[c.name])
			}
		})
	}
}

func TestGoldenTinyGGUF(t *testing.T) {
	cases := []struct {
		spec string
		typ  gguf.GGMLType
		want [2]string // file, loaded weights
	}{
		{"default", gguf.F32, [2]string{
			"ddd8f617c4468814f2c0750d4b0fe9743ead52a57ebbd7f7605a0c4fecc7491e",
			"c2863d52c425ac0ea25cfda4eab9b0556bbf088a33d433adbb3dc9422ee8a5d6"}},
		{"llama-bias-bf16", gguf.Q8_0, [2]string{ // plain rows, or the four-row layout where the CPU has VNNI
			"84608bb865586750e3c0a8371be3b6d74767c9db3c7500a674d3e468d09141ef",
			map[bool]string{false: "35ac5462b3a61b085379facb3eac91dc2527bd223861f3780dfa12b5a31c430d",
				true: "19a1b804f9741c054262ddb3946fa17ecf154bdd2cbc44a27ff437bad3661099"}[kernels.Q8_0.RepackPays()]}},
		{"qwen2-tied", gguf.Q4_1, [2]string{ // loaded in the four-row layout (repackWeights)
			"4b7e0f4feab897a7c428330982a7cfed466711c936043776e5ea41c470fb33bc",
			"19100780cdd679ef540c5fd38fd47f2be714f804b45943510c4b0bd25a4175ea"}},
		{"qwen3-bias-headdim", gguf.BF16, [2]string{
			"aaf658e54301c6a9078bc6b1c998f746197455d370dd820127447b6b9896ef9c",
			"8c6a81ece0eed6d7d484280b1abeef8f49914e20336d3a3b57c418f42b560f88"}},
		{"mistral-bias-f16-shards", gguf.F16, [2]string{
			"e22626d91e33c5125ebe5f2d7d56b6e952f2c36e3655e6a21d3aa98038dda004",
			"c8f5dbfbe5786deb6634b76e1ef1b0298e02e1e03d4cdb6572d89f2a8233490c"}},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			var spec tiny.Spec
			for _, g := range goldenSpecs {
				if g.name == c.spec {
					spec = g.spec
				}
			}
			spec.Shards = 0
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := tiny.WriteGGUF(path, spec, c.typ); err != nil {
				t.Fatal(err)
			}
			file := fileHash(t, path)
			m, err := LoadGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := [2]string{file, weightsHash(m.Weights)}; got != c.want {
				t.Errorf("file, weights = %q, want %q", got, c.want)
			}
		})
	}
}

func TestGoldenRandomWeights(t *testing.T) {
	base := Config{Architecture: ArchLlama, HiddenSize: 32, IntermediateSize: 48, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8, VocabSize: 50}
	cases := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"llama-untied", func(c *Config) {},
			"6438d9f8601424575ed7aa71d5fdcfefb748e7f0262443a19008fd51eaad0e7d"},
		{"llama-tied-bias", func(c *Config) { c.TieWordEmbeddings, c.AttentionBias, c.OutputBias = true, true, true },
			"71c09a019298f1b0d627e56966e4fced4e69fbc3b55c3bc0e1b2ef196f316a96"},
		{"qwen2", func(c *Config) { c.Architecture, c.AttentionBias = ArchQwen2, true },
			"6cc75fa923a74f783609ac8c0317d1b505b73e60c3b3943c2204492bf28f119d"},
		{"qwen3-headdim", func(c *Config) { c.Architecture, c.QKNorm, c.HeadDim = ArchQwen3, true, 16 },
			"6bd914c0bab2caa6cfd2a7ed1a41fc378e08985f2de60c8d1e5f560b056c2b89"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.edit(&cfg)
			w := RandomWeights(&cfg, 7)
			if err := w.Check(&cfg); err != nil {
				t.Fatal(err)
			}
			if got := weightsHash(w); got != c.want {
				t.Errorf("weights = %q, want %q", got, c.want)
			}
		})
	}
}
