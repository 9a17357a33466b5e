// Package tiny writes flywheel's built-in tiny model: a small random
// Llama-family model in the Hugging Face folder format (config.json,
// model.safetensors, a byte-level BPE tokenizer.json learned from an
// embedded English corpus, tokenizer_config.json with a ChatML chat
// template with tool calls, generation_config.json), so the service works
// with no downloads. The output is deterministic: the same bytes on every
// run. It is loaded through the same path as real models.
package tiny

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"flywheel/internal/atomicfile"
	"flywheel/internal/engine/params"
	"flywheel/internal/safetensors"
)

// ID is the built-in tiny model's id (its path under the models dir).
const ID = "flywheel/tiny"

// Special and added tokens, in id order after the BPE vocabulary.
const (
	EndOfText = "<|endoftext|>"
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
	ToolCall  = "<tool_call>"
	ToolEnd   = "</tool_call>"
)

var addedTokens = []struct {
	content string
	special bool
}{{EndOfText, true}, {ImStart, true}, {ImEnd, true}, {ToolCall, false}, {ToolEnd, false}}

// Spec is the shape of a tiny model. Zero fields take DefaultSpec's values
// (so Spec{Arch: "Qwen2ForCausalLM"} is the default shape as Qwen2).
type Spec struct {
	Arch          string // LlamaForCausalLM (default), MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM
	Hidden        int
	Layers        int
	Heads         int
	KVHeads       int
	HeadDim       int // 0: Hidden/Heads
	Intermediate  int
	MaxPos        int
	RopeTheta     float64
	RopeScaling   map[string]any // written as rope_scaling when set
	Untied        bool           // separate lm_head (DefaultSpec: true; zero value: tied)
	AttentionBias bool           // biases on q/k/v (and o for Llama and Qwen3), as attention_bias does; Qwen2 always has q/k/v ones, Mistral none
	Merges        int            // BPE merges to learn (default 1000; fewer if the corpus runs out)
	Seed          uint64         // weight seed (default 1)
	DType         string         // stored dtype: F32 (default), F16, BF16
	Shards        int            // > 1: sharded safetensors with an index
	SlidingWindow int            // Mistral's sliding_window (0: none)
}

// DefaultSpec is the built-in tiny model: hidden 64, 2 layers, 4 heads, 2
// KV heads, intermediate 128, 2048 positions, a separate lm_head, F32.
func DefaultSpec() Spec {
	return Spec{Arch: params.ArchLlama, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, Intermediate: 128,
		MaxPos: 2048, RopeTheta: 10000, Merges: 1000, Seed: 1, DType: "F32", Untied: true}
}

func (s Spec) withDefaults() Spec {
	d := DefaultSpec()
	if s.Arch == "" {
		s.Arch = d.Arch
	}
	if s.Hidden == 0 {
		s.Hidden = d.Hidden
	}
	if s.Layers == 0 {
		s.Layers = d.Layers
	}
	if s.Heads == 0 {
		s.Heads = d.Heads
	}
	if s.KVHeads == 0 {
		s.KVHeads = d.KVHeads
	}
	if s.HeadDim == 0 {
		s.HeadDim = s.Hidden / s.Heads
	}
	if s.Intermediate == 0 {
		s.Intermediate = d.Intermediate
	}
	if s.MaxPos == 0 {
		s.MaxPos = d.MaxPos
	}
	if s.RopeTheta == 0 {
		s.RopeTheta = d.RopeTheta
	}
	if s.Merges == 0 {
		s.Merges = d.Merges
	}
	if s.Seed == 0 {
		s.Seed = d.Seed
	}
	if s.DType == "" {
		s.DType = d.DType
	}
	return s
}

// Ensure writes the built-in tiny model into modelsDir/flywheel/tiny unless
// it is already there. It writes into a temporary folder beside it and
// renames it into place, so a crash never leaves a half-written model.
func Ensure(modelsDir string) error {
	target := filepath.Join(modelsDir, filepath.FromSlash(ID))
	if complete(target) {
		return nil
	}
	parent := filepath.Dir(target)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-tiny-")
	if err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	if err := Write(tmp, DefaultSpec()); err != nil {
		return err
	}
	if _, err := os.Stat(target); err == nil && !complete(target) {
		// A leftover without all files (not ours to keep): replace it.
		if err := os.RemoveAll(target); err != nil {
			return fmt.Errorf("tiny: %w", err)
		}
	}
	if err := os.Rename(tmp, target); err != nil {
		if complete(target) { // another process won the race
			return nil
		}
		return fmt.Errorf("tiny: %w", err)
	}
	return nil
}

var files = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}

func complete(dir string) bool {
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// Tokens describes the tokenizer of a written model: vocabulary size and
// the ids of the added tokens.
type Tokens struct {
	VocabSize                 int
	EndOfText, ImStart, ImEnd int
	ToolCall, ToolEnd         int
	NumMerges                 int
}

// Vocab returns the tokenizer layout a Spec produces.
func Vocab(spec Spec) Tokens {
	spec = spec.withDefaults()
	b := trainBPE(spec.Merges)
	n := len(b.vocab)
	return Tokens{VocabSize: n + len(addedTokens), EndOfText: n, ImStart: n + 1, ImEnd: n + 2, ToolCall: n + 3, ToolEnd: n + 4, NumMerges: len(b.merges)}
}

// Write writes a tiny model of shape spec into dir (created if needed).
// Each file is written to a temp name and renamed.
func Write(dir string, spec Spec) error {
	spec = spec.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	bpe := trainBPE(spec.Merges)
	tk := Vocab(spec)
	if err := writeAtomic(filepath.Join(dir, "tokenizer.json"), tokenizerJSON(bpe)); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, "tokenizer_config.json"), tokenizerConfigJSON(bpe, spec)); err != nil {
		return err
	}
	cfg, err := configJSON(spec, tk)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	gen := fmt.Sprintf("{\n  \"bos_token_id\": %d,\n  \"do_sample\": true,\n  \"eos_token_id\": [\n    %d,\n    %d\n  ],\n  \"temperature\": 1.0,\n  \"top_p\": 1.0,\n  \"transformers_version\": \"4.46.0\"\n}\n",
		tk.EndOfText, tk.ImEnd, tk.EndOfText)
	if err := writeAtomic(filepath.Join(dir, "generation_config.json"), []byte(gen)); err != nil {
		return err
	}
	return writeWeights(dir, spec, tk.VocabSize)
}

func configJSON(s Spec, tk Tokens) ([]byte, error) {
	modelType := map[string]string{
		params.ArchLlama: "llama", params.ArchMistral: "mistral", params.ArchQwen2: "qwen2", params.ArchQwen3: "qwen3",
	}[s.Arch]
	if modelType == "" {
		return nil, fmt.Errorf("tiny: unsupported architecture %q", s.Arch)
	}
	bias := s.features().QKVBias
	dtype := map[string]string{"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[s.DType]
	if dtype == "" {
		return nil, fmt.Errorf("tiny: unsupported dtype %q", s.DType)
	}
	type config struct {
		Architectures         []string       `json:"architectures"`
		AttentionBias         bool           `json:"attention_bias"`
		AttentionDropout      float64        `json:"attention_dropout"`
		BOSTokenID            int            `json:"bos_token_id"`
		EOSTokenID            int            `json:"eos_token_id"`
		HeadDim               int            `json:"head_dim"`
		HiddenAct             string         `json:"hidden_act"`
		HiddenSize            int            `json:"hidden_size"`
		InitializerRange      float64        `json:"initializer_range"`
		IntermediateSize      int            `json:"intermediate_size"`
		MaxPositionEmbeddings int            `json:"max_position_embeddings"`
		ModelType             string         `json:"model_type"`
		NumAttentionHeads     int            `json:"num_attention_heads"`
		NumHiddenLayers       int            `json:"num_hidden_layers"`
		NumKeyValueHeads      int            `json:"num_key_value_heads"`
		RMSNormEps            float64        `json:"rms_norm_eps"`
		RopeScaling           map[string]any `json:"rope_scaling"`
		RopeTheta             float64        `json:"rope_theta"`
		SlidingWindow         *int           `json:"sliding_window,omitempty"`
		TieWordEmbeddings     bool           `json:"tie_word_embeddings"`
		TorchDtype            string         `json:"torch_dtype"`
		TransformersVersion   string         `json:"transformers_version"`
		UseCache              bool           `json:"use_cache"`
		VocabSize             int            `json:"vocab_size"`
	}
	c := config{
		Architectures: []string{s.Arch}, AttentionBias: bias, BOSTokenID: tk.EndOfText, EOSTokenID: tk.ImEnd,
		HeadDim: s.HeadDim, HiddenAct: "silu", HiddenSize: s.Hidden, InitializerRange: 0.02,
		IntermediateSize: s.Intermediate, MaxPositionEmbeddings: s.MaxPos, ModelType: modelType,
		NumAttentionHeads: s.Heads, NumHiddenLayers: s.Layers, NumKeyValueHeads: s.KVHeads,
		RMSNormEps: 1e-6, RopeScaling: s.RopeScaling, RopeTheta: s.RopeTheta, TieWordEmbeddings: !s.Untied,
		TorchDtype: dtype, TransformersVersion: "4.46.0", UseCache: true, VocabSize: tk.VocabSize,
	}
	if s.SlidingWindow > 0 {
		c.SlidingWindow = &s.SlidingWindow
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("tiny: %w", err)
	}
	return append(b, '\n'), nil
}

func writeWeights(dir string, s Spec, vocab int) error {
	ts := weightTensors(s, vocab)
	meta := map[string]string{"format": "pt"}
	if s.Shards <= 1 {
		if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, meta); err != nil {
			return fmt.Errorf("tiny: %w", err)
		}
		return nil
	}
	weightMap := map[string]string{}
	total := 0
	for k := 0; k < s.Shards; k++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, s.Shards)
		var part []safetensors.WriteTensor
		for i, t := range ts {
			if i%s.Shards == k {
				part = append(part, t)
				weightMap[t.Name] = name
				total += len(t.Data) * map[string]int{"F32": 4, "F16": 2, "BF16": 2}[s.DType]
			}
		}
		if err := safetensors.WriteFile(filepath.Join(dir, name), part, meta); err != nil {
			return fmt.Errorf("tiny: %w", err)
		}
	}
	idxJSON, err := json.MarshalIndent(map[string]any{"metadata": map[string]int{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	return writeAtomic(filepath.Join(dir, "model.safetensors.index.json"), append(idxJSON, '\n'))
}

// paramShape is the parameter list's shape of s with a vocabulary of
// vocab tokens.
func (s Spec) paramShape(vocab int) params.Shape {
	return params.Shape{Hidden: s.Hidden, Intermediate: s.Intermediate, Vocab: vocab, Layers: s.Layers,
		Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: s.HeadDim, Features: s.features(), Tied: !s.Untied}
}

// features are the optional parameters of s: the architecture's rule
// (params.ArchFeatures), with s.AttentionBias as config.json's
// attention_bias when set (Qwen2 has q/k/v biases either way).
func (s Spec) features() params.Features {
	var ab *bool
	if s.AttentionBias {
		ab = &s.AttentionBias
	}
	f, _ := params.ArchFeatures(s.Arch, ab)
	return f
}

// weightTensors is the tiny model's weights: each parameter of
// params.List filled by params.Fill (seeded by s.Seed), in Hugging Face
// names and layout, stored as s.DType.
//
// An untied lm_head is wider than the other weights (std 0.2, not 0.02):
// with 0.02 the final hidden state (norm ~sqrt(H)) could move a logit by
// only ~1 nat, too little for the demo's RL loop to change what the model
// samples. Tied embeddings stay at 0.02: at 0.2 the residual stream would
// be dominated by the input token's own embedding and the model would just
// repeat its last token.
func weightTensors(s Spec, vocab int) []safetensors.WriteTensor {
	ps := params.List(s.paramShape(vocab))
	ts := make([]safetensors.WriteTensor, len(ps))
	for i, p := range ps {
		in := p.Init
		if p.Role == params.LMHead {
			in.SD = 0.2
		}
		v := make([]float32, p.Len())
		params.Fill(v, in, s.Seed*0x100000001b3, i)
		ts[i] = safetensors.WriteTensor{Name: p.HF, Shape: p.Shape, Data: v, DType: s.DType}
	}
	return ts
}

func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}

func tokenizerJSON(b *bpeResult) []byte {
	var w bytes.Buffer
	n := len(b.vocab)
	w.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, t := range addedTokens {
		if i > 0 {
			w.WriteString(",")
		}
		fmt.Fprintf(&w, "\n    {\n      \"id\": %d,\n      \"content\": %s,\n      \"single_word\": false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n      \"normalized\": false,\n      \"special\": %t\n    }",
			n+i, jsonString(t.content), t.special)
	}
	w.WriteString("\n  ],\n  \"normalizer\": null,\n")
	w.WriteString("  \"pre_tokenizer\": {\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\": false,\n    \"trim_offsets\": true,\n    \"use_regex\": true\n  },\n")
	w.WriteString("  \"post_processor\": {\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\": false,\n    \"trim_offsets\": false,\n    \"use_regex\": false\n  },\n")
	w.WriteString("  \"decoder\": {\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\": false,\n    \"trim_offsets\": true,\n    \"use_regex\": true\n  },\n")
	w.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {")
	for id, tok := range b.vocab {
		if id > 0 {
			w.WriteString(",")
		}
		fmt.Fprintf(&w, "\n      %s: %d", jsonString(tok), id)
	}
	w.WriteString("\n    },\n    \"merges\": [")
	for i, m := range b.merges {
		if i > 0 {
			w.WriteString(",")
		}
		fmt.Fprintf(&w, "\n      %s", jsonString(m[0]+" "+m[1]))
	}
	w.WriteString("\n    ]\n  }\n}\n")
	return w.Bytes()
}

// ChatTemplate is the tiny model's chat template: ChatML in the style of
// Qwen2.5, with tools (<tools> in the system message) and tool calls as
// <tool_call>{"name": ..., "arguments": ...}</tool_call>.
const ChatTemplate = `{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
`

func tokenizerConfigJSON(b *bpeResult, s Spec) []byte {
	var w bytes.Buffer
	n := len(b.vocab)
	w.WriteString("{\n  \"add_prefix_space\": false,\n  \"added_tokens_decoder\": {")
	for i, t := range addedTokens {
		if i > 0 {
			w.WriteString(",")
		}
		fmt.Fprintf(&w, "\n    \"%d\": {\n      \"content\": %s,\n      \"lstrip\": false,\n      \"normalized\": false,\n      \"rstrip\": false,\n      \"single_word\": false,\n      \"special\": %t\n    }",
			n+i, jsonString(t.content), t.special)
	}
	w.WriteString("\n  },\n  \"additional_special_tokens\": [\n    \"<|im_start|>\",\n    \"<|im_end|>\"\n  ],\n")
	w.WriteString("  \"bos_token\": null,\n")
	fmt.Fprintf(&w, "  \"chat_template\": %s,\n", jsonString(ChatTemplate))
	w.WriteString("  \"clean_up_tokenization_spaces\": false,\n  \"eos_token\": \"<|im_end|>\",\n  \"errors\": \"replace\",\n")
	fmt.Fprintf(&w, "  \"model_max_length\": %d,\n", s.MaxPos)
	w.WriteString("  \"pad_token\": \"<|endoftext|>\",\n  \"split_special_tokens\": false,\n  \"tokenizer_class\": \"Qwen2Tokenizer\",\n  \"unk_token\": null\n}\n")
	return w.Bytes()
}

func writeAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("tiny: %w", err)
	}
	return nil
}
