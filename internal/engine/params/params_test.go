package params

import (
	"reflect"
	"testing"
)

func TestArchFeatures(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		arch string
		ab   *bool
		want Features
	}{
		{ArchLlama, nil, Features{}},
		{ArchLlama, &yes, Features{QKVBias: true, OBias: true}},
		{ArchQwen2, nil, Features{QKVBias: true}},
		{ArchQwen2, &yes, Features{QKVBias: true}},
		{ArchQwen2, &no, Features{}},
		{ArchQwen3, nil, Features{QKNorm: true}},
		{ArchQwen3, &yes, Features{QKVBias: true, OBias: true, QKNorm: true}},
		{ArchMistral, &yes, Features{}},
	}
	for _, c := range cases {
		got, ok := ArchFeatures(c.arch, c.ab)
		if !ok || got != c.want {
			t.Errorf("ArchFeatures(%s, %v) = %+v, %v; want %+v", c.arch, c.ab, got, ok, c.want)
		}
	}
	if _, ok := ArchFeatures("GPT2LMHeadModel", nil); ok {
		t.Error("GPT2LMHeadModel: want unsupported")
	}
}

// TestListQwen3 pins the list of a one-layer Qwen3 model with biases and
// tied embeddings: order, both names, shapes, initialisation, RoPE heads.
func TestListQwen3(t *testing.T) {
	f, _ := ArchFeatures(ArchQwen3, &[]bool{true}[0])
	ps := List(Shape{Hidden: 8, Intermediate: 12, Vocab: 10, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 4, Features: f, Tied: true})
	type row struct {
		hf, gguf string
		shape    []int
		init     Init
		rope     int
	}
	want := []row{
		{"model.embed_tokens.weight", "token_embd.weight", []int{10, 8}, linear, 0},
		{"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight", []int{8}, norm, 0},
		{"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", []int{16, 8}, linear, 4},
		{"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", []int{8, 8}, linear, 2},
		{"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight", []int{8, 8}, linear, 0},
		{"model.layers.0.self_attn.o_proj.weight", "blk.0.attn_output.weight", []int{8, 16}, linear, 0},
		{"model.layers.0.self_attn.q_proj.bias", "blk.0.attn_q.bias", []int{16}, linear, 4},
		{"model.layers.0.self_attn.k_proj.bias", "blk.0.attn_k.bias", []int{8}, linear, 2},
		{"model.layers.0.self_attn.v_proj.bias", "blk.0.attn_v.bias", []int{8}, linear, 0},
		{"model.layers.0.self_attn.o_proj.bias", "blk.0.attn_output.bias", []int{8}, linear, 0},
		{"model.layers.0.self_attn.q_norm.weight", "blk.0.attn_q_norm.weight", []int{4}, norm, 0},
		{"model.layers.0.self_attn.k_norm.weight", "blk.0.attn_k_norm.weight", []int{4}, norm, 0},
		{"model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight", []int{8}, norm, 0},
		{"model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight", []int{12, 8}, linear, 0},
		{"model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", []int{12, 8}, linear, 0},
		{"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", []int{8, 12}, linear, 0},
		{"model.norm.weight", "output_norm.weight", []int{8}, norm, 0},
	}
	var got []row
	for _, p := range ps {
		got = append(got, row{p.HF, p.GGUF, p.Shape, p.Init, p.RoPEHeads})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List =\n%v\nwant\n%v", got, want)
	}
	if n := len(List(Shape{Hidden: 8, Intermediate: 12, Vocab: 10, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 4})); n != 3+3*9 {
		t.Errorf("untied Llama with 3 layers: %d parameters, want %d", n, 3+3*9)
	}
}

// TestSplitMix pins SplitMix64's first outputs for seed 0 (the reference
// values of Vigna's splitmix64.c).
func TestSplitMix(t *testing.T) {
	r := SplitMix{}
	for _, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := r.Next(); got != want {
			t.Fatalf("Next = %#x, want %#x", got, want)
		}
	}
}

// TestMatrixDims checks the shapes of the projections and that asking
// allocates nothing (every forward batch checks its adapters with it).
func TestMatrixDims(t *testing.T) {
	s := Shape{Hidden: 8, Intermediate: 12, Heads: 4, KVHeads: 2, HeadDim: 3}
	want := map[Role][2]int{Wq: {12, 8}, Wk: {6, 8}, Wv: {6, 8}, Wo: {8, 12}, Wgate: {12, 8}, Wup: {12, 8}, Wdown: {8, 12}}
	for r, w := range want {
		if out, in, ok := s.MatrixDims(r); !ok || [2]int{out, in} != w {
			t.Errorf("MatrixDims(%d) = %d, %d, %v; want %v", r, out, in, ok, w)
		}
	}
	if _, _, ok := s.MatrixDims(Bq); ok {
		t.Error("MatrixDims(Bq): want not a matrix")
	}
	if n := testing.AllocsPerRun(100, func() { s.MatrixDims(Wdown) }); n != 0 {
		t.Errorf("MatrixDims allocates %v times", n)
	}
}
