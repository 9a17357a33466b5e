package engine

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/engine/kernels"
	"flywheel/internal/engine/tiny"
)

// TestHalfWeightsKeptAsStored: a BF16 (or F16) checkpoint loads with its
// matrices in their 16-bit precision (fused q/k/v and gate/up too) and its
// per-token logprobs equal the float64 reference computed from the same
// 16-bit values to 1e-4, decoding through the KV cache as well as over a
// whole sequence; "weights_dtype": "float32" in flywheel.json widens the
// matrices at load and gives the same logprobs.
func TestHalfWeightsKeptAsStored(t *testing.T) {
	for _, dt := range []string{"BF16", "F16"} {
		t.Run(dt, func(t *testing.T) {
			dir := writeModel(t, tiny.Spec{Arch: ArchLlama, Heads: 4, KVHeads: 2, Untied: true, DType: dt, Merges: 100})
			m := loadParts(t, dir)
			want := map[string]kernels.HalfType{"BF16": kernels.BF16, "F16": kernels.F16}[dt]
			w := m.Weights
			L := w.Layers[0]
			for name, mat := range map[string]Mat{"embed": w.Embed, "lm_head": w.LMHead, "qkv": L.QKV, "gate_up": L.GateUp, "o_proj": L.Wo, "down_proj": L.Wdown} {
				if mat.Half == nil || mat.F32 != nil || mat.HalfType != want {
					t.Fatalf("%s not kept as %s", name, dt)
				}
			}
			if nl := m.net.layers[0]; nl.wqkv.h == nil || nl.wgu.h == nil {
				t.Fatal("fused q/k/v and gate/up should be 16-bit and fused")
			}

			cfg := m.Config
			toks := randTokens(14, cfg.VocabSize, 5)
			ref := refForward(cfg, w, nil, toks)
			check := func(name string, logits func(p int) []float32) {
				t.Helper()
				for p := 0; p+1 < len(toks); p++ {
					got := logSoftmax64(logits(p), toks[p+1])
					exp := refLogSoftmax(ref[p], toks[p+1])
					if d := math.Abs(got - exp); d > 1e-4 {
						t.Fatalf("%s position %d: logprob %.7g, float64 reference %.7g (|Δ| %.2g > 1e-4)", name, p, got, exp, d)
					}
				}
			}
			V := cfg.VocabSize
			all, err := m.Logits(nil, toks)
			if err != nil {
				t.Fatal(err)
			}
			check("prefill", func(p int) []float32 { return all[p*V : (p+1)*V] })
			// decode one token at a time
			s := m.NewSeq(nil)
			steps := make([][]float32, len(toks))
			for p, tok := range toks {
				out, err := m.Forward([]*Seq{s}, [][]int{{tok}})
				if err != nil {
					t.Fatal(err)
				}
				steps[p] = append([]float32(nil), out[0]...)
			}
			check("decode", func(p int) []float32 { return steps[p] })

			if err := os.WriteFile(filepath.Join(dir, SettingsFile), []byte(`{"weights_dtype": "float32"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			wide := loadParts(t, dir)
			if wide.Weights.Layers[0].QKV.F32 == nil || wide.Weights.Embed.Half != nil {
				t.Fatal(`"weights_dtype": "float32" should widen the matrices`)
			}
			wall, err := wide.Logits(nil, toks)
			if err != nil {
				t.Fatal(err)
			}
			check("widened", func(p int) []float32 { return wall[p*V : (p+1)*V] })
		})
	}
}

func TestSettingsRejectsUnknownDType(t *testing.T) {
	dir := writeModel(t, tiny.Spec{Arch: ArchLlama, DType: "BF16", Merges: 100})
	if err := os.WriteFile(filepath.Join(dir, SettingsFile), []byte(`{"weights_dtype": "int8"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWeights(dir, cfg); err == nil || !strings.Contains(err.Error(), "weights_dtype") {
		t.Fatalf("got %v, want an error naming weights_dtype", err)
	}
}

// TestToHalfKeepsLayout: rounding random weights to BF16 keeps the fused
// layout and the tied head, and every value is the BF16 rounding.
func TestToHalfKeepsLayout(t *testing.T) {
	cfg := tinyCfg(ArchLlama, true)
	w := RandomWeights(cfg, 2)
	h := w.ToHalf(kernels.BF16)
	if !h.LMHead.same(h.Embed) {
		t.Fatal("tied head lost")
	}
	f := fuse(h)
	if f[0].qkv.Half == nil || f[0].gu.Half == nil {
		t.Fatal("fused layout lost")
	}
	got, src := h.Layers[1].Wdown.Float32(), w.Layers[1].Wdown.F32
	for i, v := range src {
		if d := math.Abs(float64(got[i] - v)); d > math.Abs(float64(v))/256 {
			t.Fatalf("[%d] %g rounds to %g", i, v, got[i])
		}
	}
}
