package tiny

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/engine/params"
	"flywheel/internal/safetensors"
)

// WriteGGUF writes the model Write(dir, spec) writes as one GGUF file at
// path, the way llama.cpp's convert_hf_to_gguf.py lays it out: the same
// weights (matrices stored as typ: F32, F16, BF16, or quantized with
// kernels.QuantizeRow; norms and biases in spec.DType), the rows of q and k
// (and their biases) permuted for the llama and mistral architectures, hyper-parameters under
// "<arch>.*", the tokenizer under "tokenizer.ggml.*" and the chat template.
// For tests: GGUF models without downloads.
func WriteGGUF(path string, spec Spec, typ gguf.GGMLType) error {
	spec = spec.withDefaults()
	arch := params.GGUFArch[spec.Arch]
	if arch == "" {
		return fmt.Errorf("tiny: unsupported architecture %q", spec.Arch)
	}
	if spec.RopeScaling != nil || spec.Shards > 1 {
		return fmt.Errorf("tiny: WriteGGUF does not write rope_scaling or shards")
	}
	bpe := trainBPE(spec.Merges)
	tk := Vocab(spec)
	p := arch + "."
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String(arch)},
		{Key: "general.name", Value: gguf.String("flywheel tiny")},
		{Key: p + "context_length", Value: gguf.Uint32(uint32(spec.MaxPos))},
		{Key: p + "embedding_length", Value: gguf.Uint32(uint32(spec.Hidden))},
		{Key: p + "block_count", Value: gguf.Uint32(uint32(spec.Layers))},
		{Key: p + "feed_forward_length", Value: gguf.Uint32(uint32(spec.Intermediate))},
		{Key: p + "attention.head_count", Value: gguf.Uint32(uint32(spec.Heads))},
		{Key: p + "attention.head_count_kv", Value: gguf.Uint32(uint32(spec.KVHeads))},
		{Key: p + "attention.key_length", Value: gguf.Uint32(uint32(spec.HeadDim))},
		{Key: p + "attention.value_length", Value: gguf.Uint32(uint32(spec.HeadDim))},
		{Key: p + "rope.dimension_count", Value: gguf.Uint32(uint32(spec.HeadDim))},
		{Key: p + "rope.freq_base", Value: gguf.Float32(float32(spec.RopeTheta))},
		{Key: p + "attention.layer_norm_rms_epsilon", Value: gguf.Float32(1e-6)},
	}
	if spec.SlidingWindow > 0 {
		kvs = append(kvs, gguf.KV{Key: p + "attention.sliding_window", Value: gguf.Uint32(uint32(spec.SlidingWindow))})
	}
	toks := append([]string(nil), bpe.vocab...)
	kinds := make([]int32, len(toks), tk.VocabSize)
	for i := range kinds {
		kinds[i] = 1 // normal
	}
	for _, a := range addedTokens {
		toks = append(toks, a.content)
		if a.special {
			kinds = append(kinds, 3) // control
		} else {
			kinds = append(kinds, 4) // user-defined
		}
	}
	merges := make([]string, len(bpe.merges))
	for i, m := range bpe.merges {
		merges[i] = m[0] + " " + m[1]
	}
	kvs = append(kvs,
		gguf.KV{Key: "tokenizer.ggml.model", Value: gguf.String("gpt2")},
		gguf.KV{Key: "tokenizer.ggml.pre", Value: gguf.String("gpt2")},
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(toks)},
		gguf.KV{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(kinds)},
		gguf.KV{Key: "tokenizer.ggml.merges", Value: gguf.Strings(merges)},
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(uint32(tk.EndOfText))},
		gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(uint32(tk.ImEnd))},
		gguf.KV{Key: "tokenizer.ggml.eot_token_id", Value: gguf.Uint32(uint32(tk.EndOfText))},
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: gguf.Uint32(uint32(tk.EndOfText))},
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(false)},
		gguf.KV{Key: "tokenizer.chat_template", Value: gguf.String(ChatTemplate)},
	)
	permute := params.GGUFPermuted(spec.Arch)
	ps := params.List(spec.paramShape(tk.VocabSize))
	var ts []gguf.WriteTensor
	for i, t := range weightTensors(spec, tk.VocabSize) {
		p := ps[i]
		name := p.GGUF
		v := t.Data
		if permute && p.RoPEHeads > 0 {
			cols := 1 // a bias: one value per row
			if p.Matrix() {
				cols = p.Shape[1]
			}
			v = toGGMLRoPE(v, p.RoPEHeads, p.Shape[0], cols)
		}
		// Norms and biases as the folder stores them (spec.DType).
		wt := gguf.WriteTensor{Name: name, Type: map[string]gguf.GGMLType{"F32": gguf.F32, "F16": gguf.F16, "BF16": gguf.BF16}[spec.DType]}
		for d := len(p.Shape) - 1; d >= 0; d-- { // ggml order: row length first
			wt.Dims = append(wt.Dims, uint64(p.Shape[d]))
		}
		if p.Matrix() {
			wt.Type = typ
		}
		var err error
		if wt.Data, err = encodeAs(wt.Type, v); err != nil {
			return fmt.Errorf("tiny: tensor %s: %w", name, err)
		}
		ts = append(ts, wt)
	}
	b, err := gguf.Encode(kvs, ts)
	if err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	return writeAtomic(path, b)
}

// toGGMLRoPE reorders the rows of each head of a q or k projection
// [rows, cols] as convert_hf_to_gguf.py's LlamaModel.permute does: the
// head's rows (i*D/2 + j) move to (2j + i).
func toGGMLRoPE(v []float32, heads, rows, cols int) []float32 {
	out := make([]float32, len(v))
	D := rows / heads
	for h := 0; h < heads; h++ {
		for j := 0; j < D/2; j++ {
			for i := 0; i < 2; i++ {
				src := (h*D + i*D/2 + j) * cols
				dst := (h*D + 2*j + i) * cols
				copy(out[dst:dst+cols], v[src:src+cols])
			}
		}
	}
	return out
}

// encodeAs stores float32 values as ggml type t.
func encodeAs(t gguf.GGMLType, v []float32) ([]byte, error) {
	var b []byte
	switch t {
	case gguf.F32:
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	case gguf.F16:
		for _, x := range v {
			b = binary.LittleEndian.AppendUint16(b, safetensors.F32ToF16(x))
		}
	case gguf.BF16:
		for _, x := range v {
			b = binary.LittleEndian.AppendUint16(b, safetensors.F32ToBF16(x))
		}
	default:
		qt, ok := kernels.QuantTypeFromGGML(uint32(t))
		if !ok {
			return nil, fmt.Errorf("cannot write type %s", t)
		}
		if len(v)%qt.BlockElems() != 0 {
			return nil, fmt.Errorf("%d values are not whole %s blocks", len(v), qt)
		}
		b = make([]byte, qt.RowBytes(len(v)))
		kernels.QuantizeRow(qt, b, v)
	}
	return b, nil
}
