package engine

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/engine/tiny"
)

// TestRepackWeights: repackWeights puts the Q4_1 and Q4_0 matrices (and
// Q8_0 ones where the CPU has its integer kernel) whose rows are a
// multiple of four (an embedding of 42 rows is not) into the four-row
// layout, keeping the fused layout, the tied head, the bytes
// and every value (Float32 bit-identical to the plain matrix's); a second
// call changes nothing, and row slices that split a group are refused.
func TestRepackWeights(t *testing.T) {
	qts := []kernels.QuantType{kernels.Q4_1, kernels.Q4_0}
	if kernels.Q8_0.RepackPays() {
		qts = append(qts, kernels.Q8_0)
	}
	for _, qt := range qts {
		for _, vocab := range []int{40, 42} {
			t.Run(fmt.Sprintf("%v/vocab=%d", qt, vocab), func(t *testing.T) {
				cfg := quantCfg(vocab == 40)
				cfg.VocabSize = vocab
				plain := RandomWeights(cfg, 9).ToQuant(qt)
				w := RandomWeights(cfg, 9).ToQuant(qt)
				repackWeights(w, cfg, false)
				xt := qt.RepackedType()
				if wantEmbed := map[bool]kernels.QuantType{true: xt, false: qt}[vocab%4 == 0]; w.Embed.QuantType != wantEmbed {
					t.Fatalf("embedding %v, want %v", w.Embed.QuantType, wantEmbed)
				}
				if cfg.TieWordEmbeddings != w.LMHead.same(w.Embed) {
					t.Fatal("tied head lost")
				}
				for l, L := range w.Layers {
					if !partsOf(L.QKV, L.Wq, L.Wk, L.Wv) || !partsOf(L.GateUp, L.Wgate, L.Wup) {
						t.Fatalf("layer %d: fused layout lost", l)
					}
					for _, m := range []Mat{L.Wq, L.Wk, L.Wv, L.Wo, L.Wgate, L.Wup, L.Wdown} {
						if m.QuantType != xt {
							t.Fatalf("layer %d: a matrix stayed %v", l, m.QuantType)
						}
					}
				}
				pm, wm := allMats(plain), allMats(w)
				for i := range pm {
					if pm[i].Bytes() != wm[i].Bytes() {
						t.Fatalf("matrix %d: %d bytes, plain %d", i, wm[i].Bytes(), pm[i].Bytes())
					}
					want, got := pm[i].Float32(), wm[i].Float32()
					for j := range want {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							t.Fatalf("matrix %d value %d: %g, plain %g", i, j, got[j], want[j])
						}
					}
				}
				addrs := func(ms []Mat) (a []uintptr) {
					for _, m := range ms {
						a = append(a, m.addr())
					}
					return a
				}
				before := addrs(allMats(w))
				repackWeights(w, cfg, false)
				if fmt.Sprint(addrs(allMats(w))) != fmt.Sprint(before) {
					t.Fatal("a second repack copied again")
				}
				defer func() {
					if recover() == nil {
						t.Error("slice inside a group of four rows accepted")
					}
				}()
				w.Layers[0].Wq.slice(0, 2*cfg.HiddenSize)
			})
		}
	}
}

// TestRepackGGUF: a Q4_1 GGUF file loads with its matrices in the
// four-row layout (the loader's arena rearranged in place), with the
// bytes of repacking copies of the plain matrices, and their values.
func TestRepackGGUF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := tiny.WriteGGUF(path, tiny.Spec{Arch: "Qwen2ForCausalLM", Merges: 100, Seed: 3}, gguf.Q4_1); err != nil {
		t.Fatal(err)
	}
	m, err := LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	plain, err := ggufWeights(f, m.Config)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := ggufWeights(f, m.Config)
	if err != nil {
		t.Fatal(err)
	}
	repackWeights(copied, m.Config, false)
	got, pm, cm := allMats(m.Weights), allMats(plain), allMats(copied)
	repacked := 0
	for i := range got {
		if got[i].QuantType.Repacked() {
			repacked++
		}
		if got[i].QuantType != cm[i].QuantType || !bytes.Equal(got[i].Quant, cm[i].Quant) {
			t.Fatalf("matrix %d: %v, repacked copy %v, or bytes differ", i, got[i].QuantType, cm[i].QuantType)
		}
		want, have := pm[i].Float32(), got[i].Float32()
		for j := range want {
			if math.Float32bits(have[j]) != math.Float32bits(want[j]) {
				t.Fatalf("matrix %d value %d: %g, plain %g", i, j, have[j], want[j])
			}
		}
	}
	if repacked == 0 {
		t.Fatal("no matrix repacked")
	}
}

// allMats is w's matrices in a fixed order (fused buffers included).
func allMats(w *Weights) []Mat {
	ms := []Mat{w.Embed, w.LMHead}
	for _, L := range w.Layers {
		ms = append(ms, L.Wq, L.Wk, L.Wv, L.Wo, L.Wgate, L.Wup, L.Wdown, L.QKV, L.GateUp)
	}
	return ms
}
