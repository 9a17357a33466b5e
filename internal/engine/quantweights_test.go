package engine

import (
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

var allQuantTypes = []kernels.QuantType{kernels.Q8_0, kernels.Q4_0, kernels.Q4_1, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K}

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
