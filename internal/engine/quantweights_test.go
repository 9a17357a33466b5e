package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"flywheel/internal/engine/kernels"
)

// quantCfg is a small Llama config whose every matrix has rows of whole
// 256-value blocks (so all formats, K-quants included, apply).
func quantCfg(tied bool) *Config {
	return &Config{Architecture: ArchLlama, HiddenSize: 256, IntermediateSize: 512, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 64, VocabSize: 40, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: tied, BOSTokenID: -1}
}

var allQuantTypes = kernels.FileTypes()

// TestToQuantKeepsLayout: quantizing random weights keeps the fused layout
// and the tied head; Len, Bytes, parts and Float32 of a quantized Mat
// count values and bytes of whole blocks, and Float32 is DequantRow.
func TestToQuantKeepsLayout(t *testing.T) {
	cfg := quantCfg(true)
	w := RandomWeights(cfg, 3)
	for _, qt := range allQuantTypes {
		q := w.ToQuant(qt)
		if !q.LMHead.same(q.Embed) || q.Embed.Quant == nil || q.Embed.QuantType != qt {
			t.Fatalf("%v: tied quantized head lost", qt)
		}
		f := fuse(q)
		if f[0].qkv.Quant == nil || f[0].gu.Quant == nil {
			t.Fatalf("%v: fused layout lost", qt)
		}
		L, L0 := q.Layers[0], w.Layers[0]
		if L.Wk.Len() != L0.Wk.Len() || L.QKV.Len() != L0.QKV.Len() {
			t.Fatalf("%v: Len %d, %d; want %d, %d", qt, L.Wk.Len(), L.QKV.Len(), L0.Wk.Len(), L0.QKV.Len())
		}
		if got, want := L.Wdown.Bytes(), int64(qt.RowBytes(L0.Wdown.Len())); got != want {
			t.Fatalf("%v: Bytes %d, want %d", qt, got, want)
		}
		want := make([]float32, L0.Wv.Len())
		kernels.DequantRow(qt, want, L.QKV.Quant[qt.RowBytes(L0.Wq.Len()+L0.Wk.Len()):])
		got := L.Wv.Float32()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: Wv part [%d] = %g, DequantRow of the fused buffer %g", qt, i, got[i], want[i])
			}
		}
		if partsOf(L.QKV, L.Wq, L.Wv, L.Wk) {
			t.Fatalf("%v: parts out of order accepted", qt)
		}
	}
}

// dequantised is w with every quantized matrix replaced by its dequantised
// float32 values (fused layout and tied head kept): the reference model
// the quantized kernels must agree with.
func dequantised(w *Weights) *Weights {
	return w.mapMats(func(m Mat) Mat { return F32Mat(m.Float32()) })
}

// closeTo fails unless got and want agree to tol relative to want's
// largest magnitude.
func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var d, m float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i]-want[i])))
		m = max(m, math.Abs(float64(want[i])))
	}
	if d > tol*max(m, 1e-3) {
		t.Fatalf("%s: max |Δ| %.3g > %.1g·%.3g", what, d, tol, m)
	}
}

// TestQuantizedModelMatchesDequantised: a model whose matrices are kept
// quantized (every format, tied and untied head) gives the logits of the
// same model with the dequantised values as float32 weights, for a
// 24-token prefill (matrix-matrix products: blocks of rows dequantised into
// the GEMM) and token-by-token decode (the streamed products), to float32
// summation-order rounding.
func TestQuantizedModelMatchesDequantised(t *testing.T) {
	for _, tied := range []bool{true, false} {
		cfg := quantCfg(tied)
		base := RandomWeights(cfg, 5)
		for _, qt := range allQuantTypes {
			t.Run(fmt.Sprintf("%v/tied=%v", qt, tied), func(t *testing.T) {
				qw := base.ToQuant(qt)
				qm := NewModel("q", cfg, qw, nil, nil)
				fm := NewModel("f", cfg, dequantised(qw), nil, nil)
				if qm.net.layers[0].wqkv.q == nil || qm.net.embed.q == nil {
					t.Fatal("quantized matrices not kept quantized")
				}
				sameLogits(t, qm, fm, nil, randTokens(24, cfg.VocabSize, 9), 6)
			})
		}
	}
}

// TestQuantizedLoRATrainingMatchesDequantised: a training step with a LoRA
// adapter on a quantized frozen base (forward through the quantized
// products, input gradients dx = dy·W through dequantised blocks of rows)
// gives the logprobs and adapter gradients of the same step on the
// dequantised float32 base (Q4_1 and Q4_0 also in the four-row layout);
// the base stays quantized, the adapter and its gradients are float32.
func TestQuantizedLoRATrainingMatchesDequantised(t *testing.T) {
	cfg := quantCfg(true)
	base := RandomWeights(cfg, 6)
	ad := randAdapter(t, cfg, 2, 2)
	rng := rand.New(rand.NewPCG(4, 4))
	var seqs [][]int
	for _, n := range []int{20, 7} { // 27 rows: the matrix-matrix products
		s := make([]int, n)
		for i := range s {
			s[i] = rng.IntN(cfg.VocabSize)
		}
		seqs = append(seqs, s)
	}
	b := packBatch(seqs)
	coef := make([]float64, len(b.Rows))
	for i := range coef {
		coef[i] = rng.NormFloat64()
	}
	for _, qt := range allQuantTypes {
		t.Run(qt.String(), func(t *testing.T) {
			qw := base.ToQuant(qt)
			step := func(w *Weights) (*Pass[float32], *LoRA[float32]) {
				n, err := NewNet[float32](cfg, w)
				if err != nil {
					t.Fatal(err)
				}
				lo := NewLoRA[float32](ad.Clone(), true)
				p, err := n.ForwardBatch(b, lo, DefaultBudgets)
				if err != nil {
					t.Fatal(err)
				}
				p.Backward(coef)
				return p, lo
			}
			fp, flo := step(dequantised(qw))
			if qw.Layers[0].Wdown.Quant == nil {
				t.Fatal("base not quantized")
			}
			bases := []*Weights{qw}
			if qt.RepackPays() { // and in the four-row layout
				rw := base.ToQuant(qt)
				repackWeights(rw, cfg, false)
				bases = append(bases, rw)
			}
			for _, qw := range bases {
				qp, qlo := step(qw)
				for i := range fp.LogProb {
					if d := math.Abs(qp.LogProb[i] - fp.LogProb[i]); d > 1e-5 {
						t.Fatalf("%v row %d: logprob %.7g, dequantised %.7g", qw.Layers[0].Wdown.QuantType, i, qp.LogProb[i], fp.LogProb[i])
					}
				}
				for l := range flo.Layers {
					for mi := range flo.Layers[l] {
						g, w := qlo.Layers[l][mi], flo.Layers[l][mi]
						closeTo(t, fmt.Sprintf("layer %d %s dA", l, AllModules[mi]), g.DA, w.DA, 1e-4)
						closeTo(t, fmt.Sprintf("layer %d %s dB", l, AllModules[mi]), g.DB, w.DB, 1e-4)
					}
				}
			}
		})
	}
}

// sameLogits checks that models a and b (with adapter ad) give the same
// logits to 1e-5 for a prefill of toks and for decoding its first steps
// tokens one at a time.
func sameLogits(t *testing.T, a, b *Model, ad *Adapter, toks []int, steps int) {
	t.Helper()
	got, err := a.Logits(ad, toks)
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.Logits(ad, toks)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "prefill logits", got, want, 1e-5)
	as, bs := a.NewSeq(ad), b.NewSeq(ad)
	for p, tok := range toks[:steps] {
		g, err := a.Forward([]*Seq{as}, [][]int{{tok}})
		if err != nil {
			t.Fatal(err)
		}
		w, err := b.Forward([]*Seq{bs}, [][]int{{tok}})
		if err != nil {
			t.Fatal(err)
		}
		closeTo(t, fmt.Sprintf("decode logits at %d", p), g[0], w[0], 1e-5)
	}
}

// TestQuantizedBaseWithAdapter: decoding and prefilling through a LoRA
// adapter (as sampling a checkpoint does) on a quantized base gives the
// logits of the same adapter on the dequantised float32 base.
func TestQuantizedBaseWithAdapter(t *testing.T) {
	cfg := quantCfg(false)
	qw := RandomWeights(cfg, 8).ToQuant(kernels.Q4_1)
	qm := NewModel("q", cfg, qw, nil, nil)
	fm := NewModel("f", cfg, dequantised(qw), nil, nil)
	sameLogits(t, qm, fm, randAdapter(t, cfg, 4, 3), randTokens(20, cfg.VocabSize, 4), 4)
}
