package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/engine/tiny"
)

func writeGGUF(t testing.TB, spec tiny.Spec, typ gguf.GGMLType) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := tiny.WriteGGUF(path, spec, typ); err != nil {
		t.Fatal(err)
	}
	return path
}

// A GGUF file written from the tiny model's weights loads as the same model
// as its safetensors folder: same config, tokenizer, chat template, eos and
// logits (bit for bit in F32: the q/k row permutation of llama.cpp's
// converter is undone exactly), for every architecture.
func TestGGUFEqualsSafetensors(t *testing.T) {
	for _, spec := range []tiny.Spec{
		{Arch: ArchLlama, Untied: true},
		{Arch: ArchLlama},                        // tied embeddings: no output.weight
		{Arch: ArchLlama, AttentionBias: true},   // q/k/v/o biases
		{Arch: ArchMistral, SlidingWindow: 5},    // permuted like llama
		{Arch: ArchQwen2, Untied: true},          // biases, not permuted
		{Arch: ArchQwen3, HeadDim: 32, Heads: 4}, // q/k norms, head_dim != hidden/heads
		{Arch: ArchLlama, Untied: true, DType: "F16"},
		{Arch: ArchLlama, Untied: true, DType: "BF16"},
	} {
		name := spec.Arch + "/" + spec.DType
		if spec.AttentionBias {
			name += "/bias"
		}
		t.Run(name, func(t *testing.T) {
			typ := map[string]gguf.GGMLType{"": gguf.F32, "F32": gguf.F32, "F16": gguf.F16, "BF16": gguf.BF16}[spec.DType]
			dir := writeModel(t, spec)
			want, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Load(writeGGUF(t, spec, typ))
			if err != nil {
				t.Fatal(err)
			}
			gc, wc := *got.Config, *want.Config
			gc.ModelType, wc.ModelType, gc.TorchDtype, wc.TorchDtype = "", "", "", ""
			gc.EOSTokenIDs, wc.EOSTokenIDs = nil, nil // GGUF's eos + eot is generation_config's list (EOS() below)
			if !reflect.DeepEqual(gc, wc) {
				t.Errorf("config\n got %+v\nwant %+v", gc, wc)
			}
			for _, text := range []string{"Hello world! It's 2024, isn't it?", "  spaces\n\nand<|im_start|>user\nhi<|im_end|>", "<tool_call>x</tool_call> ü€😀"} {
				g, w := got.Tokenizer.Encode(text, true), want.Tokenizer.Encode(text, true)
				if !reflect.DeepEqual(g, w) {
					t.Errorf("Encode(%q) = %v, want %v", text, g, w)
				}
				if d := got.Tokenizer.Decode(g, false); d != want.Tokenizer.Decode(w, false) {
					t.Errorf("Decode: %q", d)
				}
			}
			in := chattmpl.Input{Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"Hi"}`)}, AddGenerationPrompt: true}
			gr, err1 := got.Template.Render(in)
			wr, err2 := want.Template.Render(in)
			if err1 != nil || err2 != nil || gr != wr {
				t.Errorf("template: %q (%v), want %q (%v)", gr, err1, wr, err2)
			}
			if !reflect.DeepEqual(got.EOS(), want.EOS()) {
				t.Errorf("eos %v, want %v", got.EOS(), want.EOS())
			}
			toks := randTokens(20, want.Config.VocabSize, 7)
			gl, err := got.Logits(nil, toks)
			if err != nil {
				t.Fatal(err)
			}
			wl, _ := want.Logits(nil, toks)
			if !reflect.DeepEqual(gl, wl) {
				t.Errorf("logits differ: rel err %g", relErr32(gl, wl))
			}
		})
	}
}

// Quantized GGUF matrices load as quantized Mats holding the file's blocks
// (q and k rows un-permuted), in the fused layout, tied embeddings shared.
func TestGGUFQuantizedWeights(t *testing.T) {
	for _, qt := range kernels.FileTypes() {
		t.Run(qt.String(), func(t *testing.T) {
			spec := tiny.Spec{Arch: ArchLlama, Hidden: 256, Intermediate: 512, Heads: 4, KVHeads: 2}
			ggmlType := gguf.GGMLType(qt.GGML())
			path := writeGGUF(t, spec, ggmlType)
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg, err := ggufConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			w, err := ggufWeights(f, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ref := loadParts(t, writeModel(t, spec)).Weights.ToQuant(qt)
			if !w.LMHead.same(w.Embed) {
				t.Error("tied embeddings are not shared")
			}
			for l := range w.Layers {
				L, R := &w.Layers[l], &ref.Layers[l]
				if !partsOf(L.QKV, L.Wq, L.Wk, L.Wv) || !partsOf(L.GateUp, L.Wgate, L.Wup) {
					t.Errorf("layer %d: not fused", l)
				}
				for name, pair := range map[string][2]Mat{"q": {L.Wq, R.Wq}, "k": {L.Wk, R.Wk}, "v": {L.Wv, R.Wv}, "o": {L.Wo, R.Wo}, "down": {L.Wdown, R.Wdown}, "up": {L.Wup, R.Wup}} {
					if pair[0].QuantType != qt || !reflect.DeepEqual(pair[0].Quant, pair[1].Quant) {
						t.Errorf("layer %d %s: %v blocks differ from the quantized safetensors weights", l, name, pair[0].QuantType)
					}
				}
			}
			if !reflect.DeepEqual(w.Embed.Quant, ref.Embed.Quant) {
				t.Error("embeddings differ")
			}
		})
	}
}

func TestGGUFRefused(t *testing.T) {
	spec := tiny.Spec{Arch: ArchLlama, Untied: true}
	good, err := os.ReadFile(writeGGUF(t, spec, gguf.F32))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	// rewrite re-encodes the file with the metadata and tensors edited.
	rewrite := func(edit func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)) string {
		kvs := append([]gguf.KV(nil), g.KVs...)
		var ts []gguf.WriteTensor
		for _, x := range g.Tensors {
			ts = append(ts, gguf.WriteTensor{Name: x.Name, Dims: x.Dims, Type: x.Type, Data: x.Data})
		}
		kvs, ts = edit(kvs, ts)
		b, err := gguf.Encode(kvs, ts)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "bad.gguf")
		os.WriteFile(p, b, 0o644)
		return p
	}
	setKV := func(key string, v gguf.Value) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		return func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range kvs {
				if kvs[i].Key == key {
					kvs[i].Value = v
					return kvs, ts
				}
			}
			return append(kvs, gguf.KV{Key: key, Value: v}), ts
		}
	}
	dropTensor := func(name string) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		return func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == name {
					return kvs, append(ts[:i:i], ts[i+1:]...)
				}
			}
			return kvs, ts
		}
	}
	for _, c := range []struct {
		name, want string
		edit       func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)
	}{
		{"arch", `unsupported architecture "gemma2"`, setKV("general.architecture", gguf.String("gemma2"))},
		{"heads", "not a multiple of attention.head_count_kv", setKV("llama.attention.head_count_kv", gguf.Uint32(3))},
		{"hidden type", "llama.embedding_length: want a non-negative integer", setKV("llama.embedding_length", gguf.String("64"))},
		{"missing", "llama.block_count is missing", func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range kvs {
				if kvs[i].Key == "llama.block_count" {
					return append(kvs[:i:i], kvs[i+1:]...), ts
				}
			}
			return kvs, ts
		}},
		{"moe", "mixture of experts", setKV("llama.expert_count", gguf.Uint32(8))},
		{"rope", `unsupported llama.rope.scaling.type "yarn"`, setKV("llama.rope.scaling.type", gguf.String("yarn"))},
		{"partial rope", "rope.dimension_count 8", setKV("llama.rope.dimension_count", gguf.Uint32(8))},
		{"tokenizer model", `unsupported tokenizer.ggml.model "llama"`, setKV("tokenizer.ggml.model", gguf.String("llama"))},
		{"pre", `unsupported pre-tokenizer "chameleon"`, setKV("tokenizer.ggml.pre", gguf.String("chameleon"))},
		{"token types", "tokenizer.ggml.token_type: want", setKV("tokenizer.ggml.token_type", gguf.Int32s([]int32{1, 2}))},
		{"eos", "special token id 99999 outside the vocabulary", setKV("tokenizer.ggml.eos_token_id", gguf.Uint32(99999))},
		{"missing tensor", "missing tensor blk.1.ffn_up.weight", dropTensor("blk.1.ffn_up.weight")},
		{"wrong shape", "tensor blk.0.attn_q.weight has dimensions [64 32], want [64 64]", func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == "blk.0.attn_q.weight" {
					ts[i].Dims = []uint64{64, 32}
					ts[i].Data = ts[i].Data[:64*32*4]
				}
			}
			return kvs, ts
		}},
		{"unsupported quant", "tensor blk.0.ffn_up.weight: unsupported type Q8_1", func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == "blk.0.ffn_up.weight" {
					ts[i].Type = gguf.Q8_1
					ts[i].Data = make([]byte, 128*64/32*36)
				}
			}
			return kvs, ts
		}},
		{"quantized norm", "tensor output_norm.weight: unsupported type Q8_0 for a norm", func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == "output_norm.weight" {
					ts[i].Type = gguf.Q8_0
					ts[i].Data = make([]byte, 2*34)
				}
			}
			return kvs, ts
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(rewrite(c.edit))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// FuzzLoadGGUF: whatever the bytes of a GGUF file (seeded with tiny models
// in F32 and Q8_0), loading it as a model returns a model or an error,
// never a panic.
func FuzzLoadGGUF(f *testing.F) {
	small := tiny.Spec{Arch: ArchLlama, Hidden: 32, Intermediate: 64, Heads: 2, KVHeads: 1, Layers: 1, Merges: 20, MaxPos: 64}
	for _, typ := range []gguf.GGMLType{gguf.F32, gguf.Q8_0} {
		b, err := os.ReadFile(writeGGUF(f, small, typ))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Parse(data)
		if err != nil {
			return
		}
		cfg, err := ggufConfig(g)
		if err != nil {
			return
		}
		tok, err := ggufTokenizer(g)
		if err != nil || tok.VocabSize() > cfg.VocabSize {
			return
		}
		w, err := ggufWeights(g, cfg)
		if err != nil {
			return
		}
		tmpl, _ := ggufTemplate(g, tok, cfg)
		NewModel("fuzz", cfg, w, tok, tmpl)
	})
}
