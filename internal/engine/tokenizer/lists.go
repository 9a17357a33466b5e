package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Token kinds of a vocabulary given as lists (GGUF's tokenizer.ggml.token_type).
const (
	KindNormal      = 1
	KindUnknown     = 2
	KindControl     = 3 // a special added token, e.g. <|im_start|>
	KindUserDefined = 4 // an added token that is not special
	KindUnused      = 5
	KindByte        = 6
)

// BPELists is a byte-level BPE tokenizer given as lists, the way GGUF
// files carry it (tokenizer.ggml.*) rather than as a tokenizer.json.
type BPELists struct {
	Tokens []string // id -> token, in byte-level spelling
	Kinds  []int    // id -> Kind*; nil: all normal
	Merges []string // "left right", by rank
	// Pre names the pre-tokenizer as llama.cpp's tokenizer.ggml.pre does
	// ("gpt2", "smollm", "qwen2", "llama-bpe", ...).
	Pre    string
	BOS    int // -1: none
	AddBOS bool
	EOS    int // -1: none
	AddEOS bool
}

// preTokenizers maps llama.cpp's pre-tokenizer names to the Hugging Face
// pre-tokenizers of the tokenizers they stand for (llama.cpp names a
// tokenizer.json's pre-tokenizer by hashing its output; these are the
// tokenizer.json definitions its regex lists reproduce).
var preTokenizers = map[string]string{
	"gpt2":      `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`,
	"smollm":    `{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}]}`,
	"qwen2":     `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + jsonString(qwen2Pattern) + `},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}`,
	"llama-bpe": `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + jsonString(llama3Pattern) + `},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}`,
}

func init() {
	for alias, name := range map[string]string{"mpt": "gpt2", "olmo": "gpt2", "starcoder": "smollm", "refact": "smollm", "codeshell": "smollm", "stablelm2": "qwen2", "llama3": "llama-bpe"} {
		preTokenizers[alias] = preTokenizers[name]
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// PreTokenizerNames lists the supported BPELists.Pre values.
func PreTokenizerNames() []string {
	return []string{"gpt2", "mpt", "olmo", "smollm", "starcoder", "refact", "codeshell", "qwen2", "stablelm2", "llama-bpe", "llama3"}
}

// FromBPELists builds a tokenizer from lists: the same byte-level BPE, added
// tokens, pre-tokenizer and post-processor as the equivalent tokenizer.json
// (it is built through the same loader). Control and user-defined tokens
// become added tokens (special and not special); AddBOS/AddEOS become the
// post-processor.
func FromBPELists(l BPELists) (*Tokenizer, error) {
	pre, ok := preTokenizers[l.Pre]
	if !ok {
		if l.Pre == "" {
			return nil, fmt.Errorf("tokenizer: no pre-tokenizer named (supported: %s)", strings.Join(PreTokenizerNames(), ", "))
		}
		return nil, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q (supported: %s)", l.Pre, strings.Join(PreTokenizerNames(), ", "))
	}
	if l.Kinds != nil && len(l.Kinds) != len(l.Tokens) {
		return nil, fmt.Errorf("tokenizer: %d token kinds for %d tokens", len(l.Kinds), len(l.Tokens))
	}
	for _, id := range []int{l.BOS, l.EOS} {
		if id < -1 || id >= len(l.Tokens) {
			return nil, fmt.Errorf("tokenizer: special token id %d outside the vocabulary of %d", id, len(l.Tokens))
		}
	}
	vocab := make(map[string]int, len(l.Tokens))
	var added []AddedToken
	for id, tok := range l.Tokens {
		if _, dup := vocab[tok]; !dup {
			vocab[tok] = id
		}
		if l.Kinds == nil {
			continue
		}
		switch l.Kinds[id] {
		case KindControl, KindUserDefined:
			added = append(added, AddedToken{ID: id, Content: tok, Special: l.Kinds[id] == KindControl})
		}
	}
	file := map[string]any{
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": l.Merges},
		"added_tokens":  added,
		"pre_tokenizer": json.RawMessage(pre),
		"decoder":       json.RawMessage(`{"type":"ByteLevel"}`),
	}
	if l.AddBOS || l.AddEOS {
		var single []any
		special := map[string]any{}
		if l.AddBOS && l.BOS >= 0 {
			single = append(single, map[string]any{"SpecialToken": map[string]string{"id": l.Tokens[l.BOS]}})
			special[l.Tokens[l.BOS]] = map[string]any{"ids": []int{l.BOS}}
		}
		single = append(single, map[string]any{"Sequence": map[string]string{"id": "A"}})
		if l.AddEOS && l.EOS >= 0 {
			single = append(single, map[string]any{"SpecialToken": map[string]string{"id": l.Tokens[l.EOS]}})
			special[l.Tokens[l.EOS]] = map[string]any{"ids": []int{l.EOS}}
		}
		file["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": single, "special_tokens": special}
	}
	data, err := json.Marshal(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return LoadFromBytes(data)
}
