package tokenizer

import (
	"reflect"
	"strings"
	"testing"
)

// byteVocab is the 256 byte-level tokens (ids 0..255), then extra tokens.
func byteVocab(extra ...string) []string {
	var toks []string
	for b := range 256 {
		toks = append(toks, string(byteToRune[b]))
	}
	return append(toks, extra...)
}

// Each of llama.cpp's pre-tokenizer names splits as the tokenizer.json it
// stands for: digits one by one (smollm, qwen2), up to three (llama-bpe),
// or in runs (gpt2).
func TestFromBPEListsPreTokenizers(t *testing.T) {
	toks := byteVocab("<|im_end|>", "ab")
	kinds := make([]int, len(toks))
	for i := range kinds {
		kinds[i] = KindNormal
	}
	kinds[256] = KindControl
	for _, c := range []struct {
		pre  string
		want []string
	}{
		{"gpt2", []string{"x", "12345", " ab"}},
		{"smollm", []string{"x", "1", "2", "3", "4", "5", " ab"}},
		{"qwen2", []string{"x", "1", "2", "3", "4", "5", " ab"}},
		{"llama-bpe", []string{"x", "123", "45", " ab"}},
	} {
		tk, err := FromBPELists(BPELists{Tokens: toks, Kinds: kinds, Merges: []string{"a b"}, Pre: c.pre, BOS: -1, EOS: 256})
		if err != nil {
			t.Fatalf("%s: %v", c.pre, err)
		}
		if got := tk.PreTokenize("x12345 ab"); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: pre-tokens %q, want %q", c.pre, got, c.want)
		}
		ids := tk.Encode("ab<|im_end|>", true)
		if !reflect.DeepEqual(ids, []int{257, 256}) || !tk.IsSpecial(256) {
			t.Errorf("%s: Encode = %v (special %v)", c.pre, ids, tk.IsSpecial(256))
		}
	}
	tk, err := FromBPELists(BPELists{Tokens: toks, Merges: []string{"a b"}, Pre: "gpt2", BOS: 256, AddBOS: true, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Encode("ab", true); !reflect.DeepEqual(got, []int{256, 257}) {
		t.Errorf("add_bos: %v", got)
	}
}

func TestFromBPEListsRefused(t *testing.T) {
	toks := byteVocab()
	for _, c := range []struct {
		l    BPELists
		want string
	}{
		{BPELists{Tokens: toks, Pre: "chameleon", BOS: -1, EOS: -1}, `unsupported pre-tokenizer "chameleon"`},
		{BPELists{Tokens: toks, BOS: -1, EOS: -1}, "no pre-tokenizer named"},
		{BPELists{Tokens: toks, Pre: "gpt2", Kinds: []int{1}, BOS: -1, EOS: -1}, "1 token kinds for 256 tokens"},
		{BPELists{Tokens: toks, Pre: "gpt2", BOS: 999, EOS: -1}, "special token id 999 outside"},
		{BPELists{Tokens: toks, Pre: "gpt2", Merges: []string{"a"}, BOS: -1, EOS: -1}, "merge"},
	} {
		if _, err := FromBPELists(c.l); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}
