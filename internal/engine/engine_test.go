package engine

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"flywheel/internal/engine/params"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/safetensors"
)

// writeModel writes a tiny model of spec into a temp folder.
func writeModel(t testing.TB, spec tiny.Spec) string {
	t.Helper()
	dir := t.TempDir()
	if err := tiny.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loadParts loads config and weights only (no tokenizer needed).
func loadParts(t testing.TB, dir string) *Model {
	t.Helper()
	cfg, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := LoadWeights(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel("test", cfg, w, nil, nil)
	m.Dir = dir
	return m
}

func randTokens(n, vocab int, seed uint64) []int {
	r := params.SplitMix{S: seed}
	out := make([]int, n)
	for i := range out {
		out[i] = int(r.Next() % uint64(vocab))
	}
	return out
}

// relErr is max|a-b| / max|b|.
func relErr(a []float32, b []float64) float64 {
	var d, m float64
	for i := range b {
		d = math.Max(d, math.Abs(float64(a[i])-b[i]))
		m = math.Max(m, math.Abs(b[i]))
	}
	return d / m
}

func relErr32(a, b []float32) float64 {
	bb := make([]float64, len(b))
	for i, v := range b {
		bb[i] = float64(v)
	}
	return relErr(a, bb)
}

// randomizeB gives an adapter non-zero B matrices.
func randomizeB(a *Adapter, seed uint64) {
	r := params.SplitMix{S: seed}
	for _, mods := range a.Layers {
		for _, m := range AllModules {
			if p := mods[m]; p != nil {
				for i := range p.B {
					p.B[i] = float32(0.1 * (2*r.Float64() - 1))
				}
			}
		}
	}
}

var paritySpecs = []struct {
	name string
	spec tiny.Spec
}{
	{"llama-gqa-tied", tiny.Spec{Arch: ArchLlama, Merges: 100}},
	{"llama-mha-untied-bias-llama3rope", tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 4, Untied: true, AttentionBias: true, Merges: 100,
		RopeScaling: map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}},
	{"mistral-mha-window-headdim", tiny.Spec{Arch: ArchMistral, Heads: 4, KVHeads: 4, HeadDim: 24, SlidingWindow: 5, Untied: true, Merges: 100, RopeTheta: 1e6}},
	{"qwen2-gqa-bias-untied", tiny.Spec{Arch: ArchQwen2, Heads: 4, KVHeads: 1, Untied: true, Merges: 100}},
	{"qwen3-gqa-qknorm-tied", tiny.Spec{Arch: ArchQwen3, Heads: 4, KVHeads: 2, HeadDim: 32, Layers: 3, Merges: 100}},
	{"qwen2-bf16-sharded", tiny.Spec{Arch: ArchQwen2, DType: "BF16", Shards: 3, Merges: 100}},
	{"llama-f16", tiny.Spec{Arch: ArchLlama, DType: "F16", Merges: 100}},
}

func TestParityWithFloat64Reference(t *testing.T) {
	for _, tc := range paritySpecs {
		t.Run(tc.name, func(t *testing.T) {
			m := loadParts(t, writeModel(t, tc.spec))
			cfg := m.Config
			for _, T := range []int{5, 12} { // dot-product and GEMM attention paths
				toks := randTokens(T, cfg.VocabSize, uint64(T))
				got, err := m.Logits(nil, toks)
				if err != nil {
					t.Fatal(err)
				}
				want := refForward(cfg, m.Weights, nil, toks)
				for p := 0; p < T; p++ {
					if e := relErr(got[p*cfg.VocabSize:(p+1)*cfg.VocabSize], want[p]); e > 1e-4 {
						t.Fatalf("T=%d position %d: relative error %.3g > 1e-4", T, p, e)
					}
				}
			}
			// With a LoRA adapter (random B) vs the merged float64 reference.
			a, err := NewAdapter(cfg, LoRAConfig{Rank: 4, Alpha: 8, TargetModules: AllModules}, 7)
			if err != nil {
				t.Fatal(err)
			}
			randomizeB(a, 3)
			toks := randTokens(9, cfg.VocabSize, 99)
			got, err := m.Logits(a, toks)
			if err != nil {
				t.Fatal(err)
			}
			want := refForward(cfg, m.Weights, a, toks)
			base := refForward(cfg, m.Weights, nil, toks)
			var moved float64
			for p := range toks {
				row := got[p*cfg.VocabSize : (p+1)*cfg.VocabSize]
				if e := relErr(row, want[p]); e > 1e-4 {
					t.Fatalf("lora position %d: relative error %.3g > 1e-4", p, e)
				}
				moved = math.Max(moved, relErr(row, base[p]))
			}
			if moved < 1e-3 {
				t.Fatalf("adapter changed the logits by only %.3g", moved)
			}
		})
	}
}

func TestKVCacheDecodeEqualsRecompute(t *testing.T) {
	for _, tc := range paritySpecs[:5] {
		t.Run(tc.name, func(t *testing.T) {
			m := loadParts(t, writeModel(t, tc.spec))
			V := m.Config.VocabSize
			toks := randTokens(20, V, 5)
			full, err := m.Logits(nil, toks)
			if err != nil {
				t.Fatal(err)
			}
			// Prefill 9 (GEMM attention path), then 3, then one by one.
			s := m.NewSeq(nil)
			check := func(upto int, got []float32) {
				t.Helper()
				if e := relErr32(got, full[(upto-1)*V:upto*V]); e > 1e-5 {
					t.Fatalf("after %d tokens: cached vs recomputed relative error %.3g", upto, e)
				}
			}
			out, err := m.Forward([]*Seq{s}, [][]int{toks[:9]})
			if err != nil {
				t.Fatal(err)
			}
			check(9, out[0])
			out, err = m.Forward([]*Seq{s}, [][]int{toks[9:12]})
			if err != nil {
				t.Fatal(err)
			}
			check(12, out[0])
			for p := 12; p < len(toks); p++ {
				out, err := m.Forward([]*Seq{s}, [][]int{{toks[p]}})
				if err != nil {
					t.Fatal(err)
				}
				check(p+1, out[0])
			}
			if s.Len() != len(toks) {
				t.Fatalf("Len %d, want %d", s.Len(), len(toks))
			}
			// Truncate and re-decode gives the same logits.
			s.Truncate(15)
			out, err = m.Forward([]*Seq{s}, [][]int{{toks[15]}})
			if err != nil {
				t.Fatal(err)
			}
			check(16, out[0])
		})
	}
}

func TestBatchedEqualsUnbatched(t *testing.T) {
	m := loadParts(t, writeModel(t, tiny.Spec{Arch: ArchQwen2, Merges: 100}))
	cfg := m.Config
	V := cfg.VocabSize
	a1, _ := NewAdapter(cfg, LoRAConfig{Rank: 4, Alpha: 8, TargetModules: AllModules}, 1)
	a2, _ := NewAdapter(cfg, LoRAConfig{Rank: 2, Alpha: 2, TargetModules: []string{ModQ, ModV, ModDown}}, 2)
	randomizeB(a1, 11)
	randomizeB(a2, 12)
	adapters := []*Adapter{nil, a1, a2, a1, nil}
	prompts := [][]int{randTokens(3, V, 1), randTokens(10, V, 2), randTokens(1, V, 3), randTokens(6, V, 4), randTokens(15, V, 5)}
	// Reference: each sequence alone, all positions.
	ref := make([][]float32, len(prompts))
	for i, p := range prompts {
		full := append(append([]int(nil), p...), randTokens(4, V, uint64(100+i))...)
		prompts[i] = full
		l, err := m.Logits(adapters[i], full)
		if err != nil {
			t.Fatal(err)
		}
		ref[i] = l
	}
	seqs := make([]*Seq, len(prompts))
	for i := range seqs {
		seqs[i] = m.NewSeq(adapters[i])
	}
	// Step 1: sequences 0..2 prefill, others wait (different positions).
	pos := make([]int, len(prompts))
	step := func(idx []int, n []int) {
		t.Helper()
		var ss []*Seq
		var ts [][]int
		for k, i := range idx {
			ss = append(ss, seqs[i])
			ts = append(ts, prompts[i][pos[i]:pos[i]+n[k]])
		}
		out, err := m.Forward(ss, ts)
		if err != nil {
			t.Fatal(err)
		}
		for k, i := range idx {
			pos[i] += n[k]
			if e := relErr32(out[k], ref[i][(pos[i]-1)*V:pos[i]*V]); e > 1e-5 {
				t.Fatalf("sequence %d at %d: batched vs alone relative error %.3g", i, pos[i], e)
			}
		}
	}
	step([]int{0, 1, 2}, []int{3, 10, 1})
	step([]int{3, 0, 2, 1}, []int{6, 1, 1, 1})        // prefill mixed with decode
	step([]int{4, 2, 1, 0, 3}, []int{15, 1, 1, 1, 1}) // all five, three adapters and none
	step([]int{0, 1, 2, 3, 4}, []int{1, 1, 1, 1, 1})  // pure decode batch
	step([]int{4, 3, 2, 1, 0}, []int{1, 1, 1, 1, 1})  // other order
	step([]int{4, 3}, []int{len(prompts[4]) - pos[4], len(prompts[3]) - pos[3]})
}

func TestConcurrentForward(t *testing.T) {
	m := loadParts(t, writeModel(t, tiny.Spec{Merges: 100}))
	V := m.Config.VocabSize
	toks := randTokens(10, V, 9)
	want, err := m.Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := m.NewSeq(nil)
			for p := range toks {
				out, err := m.Forward([]*Seq{s}, [][]int{{toks[p]}})
				if err != nil {
					errs <- err
					return
				}
				if e := relErr32(out[0], want[p*V:(p+1)*V]); e > 1e-5 {
					errs <- fmt.Errorf("goroutine %d position %d: error %.3g", g, p, e)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestChunkedPrefill(t *testing.T) {
	m := loadParts(t, writeModel(t, tiny.Spec{Merges: 100}))
	V := m.Config.VocabSize
	toks := randTokens(maxPassRows+90, V, 4)
	s1, s2 := m.NewSeq(nil), m.NewSeq(nil)
	out1, err := m.Forward([]*Seq{s1}, [][]int{toks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward([]*Seq{s2}, [][]int{toks[:300]}); err != nil {
		t.Fatal(err)
	}
	out2, err := m.Forward([]*Seq{s2}, [][]int{toks[300:]})
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr32(out1[0], out2[0]); e > 1e-5 {
		t.Fatalf("chunked prefill differs: %.3g", e)
	}
	all, err := m.Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr32(all[(len(toks)-1)*V:], out1[0]); e > 1e-5 {
		t.Fatalf("Logits vs Forward: %.3g", e)
	}
}

func TestForwardErrors(t *testing.T) {
	m := loadParts(t, writeModel(t, tiny.Spec{Merges: 100, MaxPos: 16}))
	s := m.NewSeq(nil)
	if _, err := m.Forward([]*Seq{s}, [][]int{randTokens(17, 100, 1)}); err == nil || !strings.Contains(err.Error(), "context length") {
		t.Fatalf("want context length error, got %v", err)
	}
	if s.Len() != 0 {
		t.Fatal("failed Forward changed the sequence")
	}
	if _, err := m.Forward([]*Seq{s}, [][]int{randTokens(16, 100, 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward([]*Seq{s}, [][]int{{1}}); err == nil || !strings.Contains(err.Error(), "context length") {
		t.Fatalf("want context length error at 17, got %v", err)
	}
	s2 := m.NewSeq(nil)
	if _, err := m.Forward([]*Seq{s2, s2}, [][]int{{1}, {2}}); err == nil {
		t.Fatal("same sequence twice: want error")
	}
	if _, err := m.Forward([]*Seq{s2}, [][]int{{m.Config.VocabSize}}); err == nil {
		t.Fatal("token out of range: want error")
	}
	if _, err := m.Forward([]*Seq{s2}, [][]int{{}}); err == nil {
		t.Fatal("no tokens: want error")
	}
	other := NewAdapter2(t, &Config{NumLayers: 5, HiddenSize: 8, NumHeads: 2, NumKVHeads: 2, HeadDim: 4, IntermediateSize: 8})
	if _, err := m.Forward([]*Seq{m.NewSeq(other)}, [][]int{{1}}); err == nil {
		t.Fatal("adapter for another shape: want error")
	}
	if _, err := m.Logits(nil, randTokens(17, 100, 1)); err == nil {
		t.Fatal("Logits past the context: want error")
	}
}

func NewAdapter2(t *testing.T, cfg *Config) *Adapter {
	a, err := NewAdapter(cfg, DefaultLoRAConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestLoRA(t *testing.T) {
	m := loadParts(t, writeModel(t, tiny.Spec{Arch: ArchQwen3, Merges: 100}))
	cfg := m.Config
	V := cfg.VocabSize
	toks := randTokens(11, V, 21)
	base, err := m.Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	// B = 0: exactly the base model.
	zero, err := NewAdapter(cfg, DefaultLoRAConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Logits(zero, toks)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != base[i] {
			t.Fatalf("B=0 adapter: logit %d is %v, base %v", i, got[i], base[i])
		}
	}
	// PEFT round trip.
	a, err := NewAdapter(cfg, LoRAConfig{Rank: 3, Alpha: 6, TargetModules: []string{ModQ, ModO, ModUp}}, 9)
	if err != nil {
		t.Fatal(err)
	}
	randomizeB(a, 77)
	dir := filepath.Join(t.TempDir(), "adapter")
	if err := a.Save(dir, "flywheel/tiny"); err != nil {
		t.Fatal(err)
	}
	b, err := LoadAdapter(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b.Config.Rank != 3 || b.Config.Alpha != 6 || strings.Join(b.Config.TargetModules, ",") != "q_proj,o_proj,up_proj" {
		t.Fatalf("config after round trip: %+v", b.Config)
	}
	for l := range a.Layers {
		for mod, p := range a.Layers[l] {
			q := b.Layers[l][mod]
			if q == nil || fmt.Sprint(p.A) != fmt.Sprint(q.A) || fmt.Sprint(p.B) != fmt.Sprint(q.B) {
				t.Fatalf("layer %d %s differs after round trip", l, mod)
			}
		}
		if len(b.Layers[l]) != 3 {
			t.Fatalf("layer %d: %d modules after round trip", l, len(b.Layers[l]))
		}
	}
	f, err := safetensors.Open(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	if f.Tensor("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight") == nil ||
		f.Tensor("base_model.model.model.layers.0.mlp.up_proj.lora_B.weight") == nil {
		t.Fatalf("PEFT tensor names missing: %v", f.Names())
	}
	f.Close()

	// Hand-computed delta: a rank-1 adapter on layer 0's down_proj only,
	// A = e_i (selects hidden unit i of the MLP input), B = e_j (adds to
	// output j), so ΔW = scale·e_j·e_iᵀ: W_down[j][i] += scale. The
	// unmerged result must equal the base model with that one weight
	// changed by hand.
	const i0, j0 = 5, 7
	hand := &Adapter{Config: LoRAConfig{Rank: 1, Alpha: 0.5, TargetModules: []string{ModDown}}, Layers: make([]map[string]*LoRAPair, cfg.NumLayers)}
	for l := range hand.Layers {
		hand.Layers[l] = map[string]*LoRAPair{}
	}
	p := &LoRAPair{In: cfg.IntermediateSize, Out: cfg.HiddenSize, A: make([]float32, cfg.IntermediateSize), B: make([]float32, cfg.HiddenSize)}
	p.A[i0], p.B[j0] = 1, 1
	hand.Layers[0][ModDown] = p
	withLoRA, err := m.Logits(hand, toks)
	if err != nil {
		t.Fatal(err)
	}
	w2 := *m.Weights
	w2.Layers = append([]Layer(nil), m.Weights.Layers...)
	w2.Layers[0].Wdown = F32Mat(append([]float32(nil), m.Weights.Layers[0].Wdown.Float32()...))
	w2.Layers[0].Wdown.F32[j0*cfg.IntermediateSize+i0] += 0.5 // scale = alpha/r = 0.5
	merged, err := NewModel("merged", cfg, &w2, nil, nil).Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr32(withLoRA, merged); e > 1e-5 {
		t.Fatalf("hand-computed delta: relative error %.3g", e)
	}
	if e := relErr32(withLoRA, base); e < 1e-4 {
		t.Fatalf("hand delta had no effect (%.3g)", e)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := writeModel(t, tiny.Spec{Merges: 100})
	cfg, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Missing tensor: rewrite the file without one.
	f, err := safetensors.Open(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.WriteTensor
	for _, n := range f.Names() {
		if n == "model.layers.1.mlp.up_proj.weight" {
			continue
		}
		v, _ := f.Tensor(n).Float32()
		ts = append(ts, safetensors.WriteTensor{Name: n, Shape: f.Tensor(n).Shape, Data: append([]float32(nil), v...)})
	}
	f.Close()
	bad := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(bad, WeightsFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWeights(bad, cfg); err == nil || !strings.Contains(err.Error(), "model.layers.1.mlp.up_proj.weight") {
		t.Fatalf("missing tensor: got %v", err)
	}
	// Wrong shape.
	for i := range ts {
		if ts[i].Name == "model.norm.weight" {
			ts[i].Shape = []int{cfg.HiddenSize / 2, 2}
		}
	}
	ts = append(ts, safetensors.WriteTensor{Name: "model.layers.1.mlp.up_proj.weight", Shape: []int{cfg.IntermediateSize, cfg.HiddenSize}, Data: make([]float32, cfg.IntermediateSize*cfg.HiddenSize)})
	if err := safetensors.WriteFile(filepath.Join(bad, WeightsFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWeights(bad, cfg); err == nil || !strings.Contains(err.Error(), "model.norm.weight") {
		t.Fatalf("wrong shape: got %v", err)
	}
	// Untied config without lm_head.
	cfg2 := *cfg
	cfg2.TieWordEmbeddings = false
	if _, err := LoadWeights(dir, &cfg2); err == nil || !strings.Contains(err.Error(), "lm_head.weight") {
		t.Fatalf("missing lm_head: got %v", err)
	}
	// No weights at all.
	if _, err := LoadWeights(t.TempDir(), cfg); err == nil || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("no weights: got %v", err)
	}
	// Unsupported architecture, rope type, activation, and every field the
	// engine cannot honour: each refused with an error naming it.
	for _, c := range []struct{ json, want string }{
		{`{"architectures":["GPTNeoXForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10}`, "GPTNeoXForCausalLM"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"rope_scaling":{"rope_type":"yarn","factor":4}}`, "yarn"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"hidden_act":"gelu"}`, "gelu"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"mlp_bias":true}`, "mlp_bias"},
		{`{"hidden_size":8}`, "architectures"},
		// Fields that change the math and that the engine does not implement.
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"rope_scaling":{"type":"dynamic","factor":2}}`, "rope_scaling.rope_type"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"rope_scaling":{"type":"linear"}}`, "rope_scaling"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"partial_rotary_factor":0.5}`, "partial_rotary_factor"},
		{`{"architectures":["Qwen3ForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"layer_types":["full_attention","sliding_attention"]}`, "layer_types[1]"},
		{`{"architectures":["Qwen2ForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"use_sliding_window":true,"sliding_window":4}`, "use_sliding_window"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"final_logit_softcapping":30}`, "final_logit_softcapping"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"attn_logit_softcapping":50}`, "attn_logit_softcapping"},
	} {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, "config.json"), []byte(c.json), 0o644)
		if _, err := Load(d); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %s: got %v, want an error naming %q", c.json, err, c.want)
		}
	}
}

func TestRopeLlama3Frequencies(t *testing.T) {
	// Values from HF _compute_llama3_parameters for Llama-3.1-8B
	// (head_dim 128, theta 500000, factor 8, low 1, high 4, original 8192).
	cfg := &Config{HeadDim: 128, RopeTheta: 500000, RopeScaling: &RopeScaling{RopeType: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}}
	inv := ropeInvFreq(cfg)
	if math.Abs(inv[0]-1) > 1e-12 {
		t.Fatalf("inv[0] = %v, want 1 (high frequency unchanged)", inv[0])
	}
	plain := 1 / math.Pow(500000, 126.0/128)
	if math.Abs(inv[63]-plain/8)/(plain/8) > 1e-12 {
		t.Fatalf("inv[63] = %v, want %v (low frequency / factor)", inv[63], plain/8)
	}
	// A middle frequency is between the two.
	for i, f := range inv {
		p := 1 / math.Pow(500000, float64(2*i)/128)
		if f > p*(1+1e-12) || f < p/8*(1-1e-12) {
			t.Fatalf("inv[%d] = %v outside [%v, %v]", i, f, p/8, p)
		}
	}
}

func TestRandomWeightsDeterministic(t *testing.T) {
	cfg := &Config{Architecture: ArchLlama, HiddenSize: 16, IntermediateSize: 32, NumLayers: 2, NumHeads: 2, NumKVHeads: 1, HeadDim: 8, VocabSize: 50, MaxPositionEmbeddings: 64, RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true}
	a, b := RandomWeights(cfg, 3), RandomWeights(cfg, 3)
	if fmt.Sprint(a.Layers[1].Wdown) != fmt.Sprint(b.Layers[1].Wdown) {
		t.Fatal("RandomWeights not deterministic")
	}
	if !a.Embed.same(a.LMHead) {
		t.Fatal("tied weights should share")
	}
	m := NewModel("r", cfg, a, nil, nil)
	toks := randTokens(6, 50, 1)
	got, err := m.Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	want := refForward(cfg, a, nil, toks)
	for p := range toks {
		if e := relErr(got[p*50:(p+1)*50], want[p]); e > 1e-4 {
			t.Fatalf("position %d: %.3g", p, e)
		}
	}
}

func TestSeqClone(t *testing.T) {
	m := loadParts(t, writeModel(t, tiny.Spec{Merges: 100}))
	V := m.Config.VocabSize
	toks := randTokens(30, V, 8)
	full, err := m.Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	s := m.NewSeq(nil)
	if _, err := m.Forward([]*Seq{s}, [][]int{toks[:20]}); err != nil {
		t.Fatal(err)
	}
	c := s.Clone()
	if _, err := m.Forward([]*Seq{s}, [][]int{randTokens(5, V, 1)}); err != nil { // diverge the original
		t.Fatal(err)
	}
	out, err := m.Forward([]*Seq{c}, [][]int{toks[20:]})
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr32(out[0], full[29*V:]); e > 1e-5 {
		t.Fatalf("clone: %.3g", e)
	}
}

func TestLoadAdapterPEFTVariants(t *testing.T) {
	cfg := &Config{NumLayers: 2, HiddenSize: 8, NumHeads: 2, NumKVHeads: 1, HeadDim: 4, IntermediateSize: 12}
	a, err := NewAdapter(cfg, LoRAConfig{Rank: 2, Alpha: 4, TargetModules: AllModules}, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := a.Save(dir, "x"); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, AdapterConfigFile))
	if st.Mode().Perm() != 0o644 {
		t.Errorf("adapter_config.json mode %v", st.Mode().Perm())
	}
	write := func(js string) {
		if err := os.WriteFile(filepath.Join(dir, AdapterConfigFile), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":"all-linear","bias":"none"}`)
	b, err := LoadAdapter(dir, cfg)
	if err != nil || len(b.Config.TargetModules) != len(AllModules) {
		t.Fatalf("all-linear: %v %v", b, err)
	}
	for _, bad := range []string{
		`{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":".*proj","bias":"none"}`,
		`{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["q_proj"],"use_dora":true}`,
		`{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["q_proj"],"rank_pattern":{"q_proj":4}}`,
		`{"peft_type":"LORA","r":4,"lora_alpha":4,"target_modules":["q_proj"]}`,
		`{"peft_type":"IA3","r":2,"lora_alpha":4,"target_modules":["q_proj"]}`,
	} {
		write(bad)
		if _, err := LoadAdapter(dir, cfg); err == nil {
			t.Errorf("%s: want error", bad)
		}
	}
}

func TestFusedEqualsSeparate(t *testing.T) {
	m := loadParts(t, writeModel(t, tiny.Spec{Arch: ArchQwen2, Merges: 100}))
	if m.net.layers[0].wqkv.empty() || m.net.layers[0].wgu.empty() {
		t.Fatal("LoadWeights should store q/k/v and gate/up back to back")
	}
	w2 := *m.Weights
	w2.Layers = append([]Layer(nil), m.Weights.Layers...)
	apart := func(x Mat) Mat { // a copy with slack, never adjacent to the next
		return F32Mat(append(make([]float32, 0, x.Len()+16), x.Float32()...))
	}
	for l := range w2.Layers {
		L := &w2.Layers[l]
		L.Wq, L.Wk, L.Wv = apart(L.Wq), apart(L.Wk), apart(L.Wv)
		L.Wgate, L.Wup = apart(L.Wgate), apart(L.Wup)
	}
	sep := NewModel("sep", m.Config, &w2, nil, nil)
	if !sep.net.layers[0].wqkv.empty() || !sep.net.layers[0].wgu.empty() {
		t.Fatal("cloned weights should not be fused")
	}
	a, _ := NewAdapter(m.Config, LoRAConfig{Rank: 2, Alpha: 4, TargetModules: AllModules}, 3)
	randomizeB(a, 5)
	toks := randTokens(13, m.Config.VocabSize, 2)
	x, err := m.Logits(a, toks)
	if err != nil {
		t.Fatal(err)
	}
	y, err := sep.Logits(a, toks)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr32(x, y); e > 1e-5 {
		t.Fatalf("fused vs separate: %.3g", e)
	}
}
