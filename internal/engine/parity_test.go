package engine

import (
	"fmt"
	"math"
	"testing"

	"flywheel/internal/engine/tiny"
)

// The variants of the model definition: every architecture, every RoPE
// scaling, a sliding window that takes effect, tied and untied heads.
func variantSpecs() []struct {
	name string
	spec tiny.Spec
} {
	linear := map[string]any{"type": "linear", "factor": 4.0}
	llama3 := map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
	var out []struct {
		name string
		spec tiny.Spec
	}
	for _, untied := range []bool{false, true} {
		for _, v := range []struct {
			name string
			spec tiny.Spec
		}{
			{"llama", tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 2}},
			{"llama-rope-linear", tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 2, RopeScaling: linear}},
			{"llama-rope-llama3", tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 2, RopeScaling: llama3}},
			{"mistral-window", tiny.Spec{Arch: ArchMistral, Heads: 4, KVHeads: 1, SlidingWindow: 6}},
			{"qwen2", tiny.Spec{Arch: ArchQwen2, Heads: 4, KVHeads: 2}},
			{"qwen3", tiny.Spec{Arch: ArchQwen3, Heads: 4, KVHeads: 2, HeadDim: 32}},
			{"llama-attention-bias", tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 2, AttentionBias: true}},
			{"qwen3-attention-bias", tiny.Spec{Arch: ArchQwen3, Heads: 4, KVHeads: 2, AttentionBias: true}},
			{"llama-bf16", tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 2, DType: "BF16"}},
			{"qwen2-f16", tiny.Spec{Arch: ArchQwen2, Heads: 4, KVHeads: 2, DType: "F16"}},
		} {
			v.spec.Untied, v.spec.Merges, v.spec.Layers = untied, 100, 2
			v.name += map[bool]string{false: "/tied", true: "/untied"}[untied]
			out = append(out, v)
		}
	}
	return out
}

// logSoftmax64 is log p(target) under float32 logits z, in float64.
func logSoftmax64(z []float32, target int) float64 {
	z64 := make([]float64, len(z))
	for i, v := range z {
		z64[i] = float64(v)
	}
	return refLogSoftmax(z64, target)
}

// TestTrainingForwardMatchesServing: for every variant, the per-token
// logprobs of the training forward (packed sequences, kept activations)
// equal what serving reports while decoding the same tokens through the KV
// cache (a prompt prefilled, then one token per step, as sampling does) to
// 1e-5, and the float64 training forward equals the independent float64
// reference (refForward, written from the Hugging Face modelling code).
func TestTrainingForwardMatchesServing(t *testing.T) {
	for _, tc := range variantSpecs() {
		t.Run(tc.name, func(t *testing.T) {
			m := loadParts(t, writeModel(t, tc.spec))
			cfg := m.Config
			ad := randAdapter(t, cfg, 4, 6)
			seqs := [][]int{randTokens(21, cfg.VocabSize, 1), randTokens(9, cfg.VocabSize, 2)}
			prompt := 7

			// Serving: prefill the prompt, then decode the rest one token at a time.
			var served [][]float64
			for _, s := range seqs {
				sq := m.NewSeq(ad)
				var lps []float64
				lg, err := m.Forward([]*Seq{sq}, [][]int{s[:min(prompt, len(s)-1)]})
				if err != nil {
					t.Fatal(err)
				}
				all, err := m.Logits(ad, s[:min(prompt, len(s)-1)])
				if err != nil {
					t.Fatal(err)
				}
				V := cfg.VocabSize
				for i := 0; i+1 < min(prompt, len(s)-1); i++ {
					lps = append(lps, logSoftmax64(all[i*V:(i+1)*V], s[i+1]))
				}
				for i := min(prompt, len(s)-1); i < len(s); i++ {
					lps = append(lps, logSoftmax64(lg[0], s[i]))
					if i+1 < len(s) {
						if lg, err = m.Forward([]*Seq{sq}, [][]int{{s[i]}}); err != nil {
							t.Fatal(err)
						}
					}
				}
				served = append(served, lps)
			}

			b := packBatch(seqs)
			p, err := m.Net().ForwardBatch(b, NewLoRA[float32](ad, false), DefaultBudgets)
			if err != nil {
				t.Fatal(err)
			}
			n64, err := NewNet[float64](cfg, m.Weights)
			if err != nil {
				t.Fatal(err)
			}
			p64, err := n64.ForwardBatch(b, NewLoRA[float64](ad, false), DefaultBudgets)
			if err != nil {
				t.Fatal(err)
			}
			row := 0
			var worst, worst64 float64
			for si, s := range seqs {
				ref := refForward(cfg, m.Weights, ad, s)
				for i := 0; i+1 < len(s); i++ {
					d := math.Abs(p.LogProb[row] - served[si][i])
					worst = max(worst, d)
					if d > 1e-5 {
						t.Fatalf("sequence %d position %d: training forward %.8g, serving %.8g (diff %.2g)", si, i, p.LogProb[row], served[si][i], d)
					}
					want := refLogSoftmax(ref[i], s[i+1])
					d64 := math.Abs(p64.LogProb[row] - want)
					worst64 = max(worst64, d64)
					if d64 > 1e-9*math.Max(1, math.Abs(want)) {
						t.Fatalf("sequence %d position %d: float64 training forward %.12g, reference %.12g", si, i, p64.LogProb[row], want)
					}
					row++
				}
			}
			t.Logf("max |training − serving| %.2g; float64 vs reference %.2g", worst, worst64)
		})
	}
}

func refLogSoftmax(z []float64, target int) float64 {
	mx := math.Inf(-1)
	for _, v := range z {
		mx = math.Max(mx, v)
	}
	var s float64
	for _, v := range z {
		s += math.Exp(v - mx)
	}
	return z[target] - mx - math.Log(s)
}

// TestLinearRoPEIsScaled: a folder declaring linear RoPE scaling is served
// and trained with the scaled frequencies (θ_i / factor), which differ from
// plain RoPE's logits.
func TestLinearRoPEIsScaled(t *testing.T) {
	spec := tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 2, Merges: 100, Layers: 2,
		RopeScaling: map[string]any{"type": "linear", "factor": 4.0}}
	m := loadParts(t, writeModel(t, spec))
	plainCfg := *m.Config
	plainCfg.RopeScaling = nil
	inv, plain := ropeInvFreq(m.Config), ropeInvFreq(&plainCfg)
	for i := range inv {
		if math.Abs(inv[i]-plain[i]/4) > 1e-15*plain[i] {
			t.Fatalf("inv_freq[%d] = %v, want %v / 4", i, inv[i], plain[i])
		}
	}
	toks := randTokens(12, m.Config.VocabSize, 5)
	got, err := m.Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	pm := NewModel("plain", &plainCfg, m.Weights, nil, nil)
	other, err := pm.Logits(nil, toks)
	if err != nil {
		t.Fatal(err)
	}
	if relErr32(got, other) < 1e-3 {
		t.Fatal("linear RoPE scaling did not change the logits")
	}
}

func ExampleNet_ForwardBatch() {
	cfg := tinyCfg(ArchQwen2, false)
	n, _ := NewNet[float32](cfg, RandomWeights(cfg, 1))
	b := packBatch([][]int{{1, 2, 3, 4}, {5, 6}})
	p, _ := n.ForwardBatch(b, nil, DefaultBudgets)
	fmt.Println(len(p.LogProb), "rows")
	// Output: 4 rows
}
