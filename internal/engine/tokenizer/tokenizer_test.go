package tokenizer

import (
	"testing"

	"golang.org/x/text/unicode/norm"
)

func TestLlamaCppReference(t *testing.T) {
	for _, tc := range []struct{ vocab, tok string }{
		{"qwen2", "qwen2.5"}, {"llama-bpe", "llama3.2"}, {"gpt-2", "gpt2"},
	} {
		t.Run(tc.tok, func(t *testing.T) {
			tok := loadTok(t, tc.tok)
			for i, c := range llamaCppCases(t, tc.vocab) {
				got := tok.Encode(c.text, false)
				if !eqInts(got, c.ids) {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, c.text, got, c.ids)
					continue
				}
				want := c.text
				if tc.tok == "qwen2.5" {
					want = norm.NFC.String(want)
				}
				if dec := tok.Decode(got, false); dec != want {
					t.Errorf("case %d: decode %q, want %q", i, dec, want)
				}
			}
		})
	}
}

func checkTokens(t *testing.T, tok *Tokenizer, name string, ids []int, tokens []string) {
	t.Helper()
	if tokens == nil {
		return
	}
	if len(tokens) != len(ids) {
		t.Errorf("%s: %d tokens for %d ids", name, len(tokens), len(ids))
		return
	}
	for i, id := range ids {
		if got := tok.IDToToken(id); got != tokens[i] {
			t.Errorf("%s: IDToToken(%d) = %q, want %q", name, id, got, tokens[i])
		}
		if back, ok := tok.TokenToID(tokens[i]); !ok || back != id {
			t.Errorf("%s: TokenToID(%q) = %d,%v want %d", name, tokens[i], back, ok, id)
		}
	}
}

func TestTransformersJSReference(t *testing.T) {
	var f struct {
		Models map[string]map[string]tjsCase `json:"models"`
	}
	readJSON(t, "transformersjs_tokenization_tests.json", &f)
	models := map[string]struct {
		tok        string
		addSpecial bool
		cleanup    bool
	}{
		"Xenova/gpt2":                 {"gpt2", true, true},
		"openai-community/gpt2":       {"gpt2", true, true},
		"Xenova/Qwen1.5-0.5B-Chat":    {"qwen2.5", true, false},
		"Xenova/llama3-tokenizer":     {"llama3.2", false, true},
		"Xenova/llama3-tokenizer-new": {"llama3.2", true, true},
	}
	n := 0
	for model, cases := range f.Models {
		cfg, ok := models[model]
		if !ok {
			t.Fatalf("no tokenizer for %s", model)
		}
		tok := loadTok(t, cfg.tok)
		for name, c := range cases {
			n++
			got := tok.Encode(c.Text, cfg.addSpecial)
			if !eqInts(got, c.IDs) {
				t.Errorf("%s/%s %q:\n got %v\nwant %v", model, name, c.Text, got, c.IDs)
				continue
			}
			// The reference token strings leave out the post-processor's BOS.
			toks := got
			if cfg.addSpecial && len(c.Tokens) == len(got)-len(tok.SpecialPrefix()) {
				toks = got[len(tok.SpecialPrefix()):]
			}
			checkTokens(t, tok, model+"/"+name, toks, c.Tokens)
			dec := tok.Decode(got, false)
			if cfg.cleanup {
				dec = CleanUpTokenizationSpaces(dec)
			}
			if dec != c.Decoded {
				t.Errorf("%s/%s: decoded %q, want %q", model, name, dec, c.Decoded)
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d cases", n)
	}
}

func TestSwiftMultilingualReference(t *testing.T) {
	var inputs []multilingualInput
	readJSON(t, "swift/multilingual_inputs.json", &inputs)
	text := map[string]string{}
	for _, in := range inputs {
		text[in.ID] = in.Text
	}
	for _, tc := range []struct{ file, tok string }{
		{"swift/qwen2_5_multilingual.json", "qwen2.5"},
		{"swift/gpt2_multilingual.json", "gpt2"},
	} {
		tok := loadTok(t, tc.tok)
		var f multilingualFile
		readJSON(t, tc.file, &f)
		if len(f.Entries) != len(inputs) {
			t.Fatalf("%s: %d entries", tc.file, len(f.Entries))
		}
		for _, e := range f.Entries {
			s, ok := text[e.ID]
			if !ok {
				t.Fatalf("no input %s", e.ID)
			}
			got := tok.Encode(s, true)
			if !eqInts(got, e.InputIDs) {
				t.Errorf("%s %s %q:\n got %v\nwant %v", tc.tok, e.ID, s, got, e.InputIDs)
				continue
			}
			checkTokens(t, tok, tc.tok+"/"+e.ID, got, e.Tokens)
			if d := tok.Decode(got, false); d != e.DecodedWithSpecial {
				t.Errorf("%s %s: decoded %q, want %q", tc.tok, e.ID, d, e.DecodedWithSpecial)
			}
			if d := tok.Decode(got, true); d != e.DecodedSkipSpecial {
				t.Errorf("%s %s: decoded (skip) %q, want %q", tc.tok, e.ID, d, e.DecodedSkipSpecial)
			}
		}
	}
}

func TestSwiftEncodedReference(t *testing.T) {
	var ll struct {
		Text        string   `json:"text"`
		BPETokens   []string `json:"bpe_tokens"`
		TokenIDs    []int    `json:"token_ids"`
		DecodedText string   `json:"decoded_text"`
	}
	readJSON(t, "swift/llama_3.2_encoded.json", &ll)
	llama := loadTok(t, "llama3.2")
	got := llama.Encode(ll.Text, true)
	if !eqInts(got, ll.TokenIDs) {
		t.Errorf("llama_3.2_encoded:\n got %v\nwant %v", got, ll.TokenIDs)
	}
	checkTokens(t, llama, "llama_3.2_encoded", got[1:], ll.BPETokens)
	if d := llama.Decode(got, false); d != ll.DecodedText {
		t.Errorf("llama_3.2_encoded decoded %q, want %q", d, ll.DecodedText)
	}

	var g struct {
		Text        string   `json:"text"`
		EncodedText []string `json:"encoded_text"`
		BPETokens   []string `json:"bpe_tokens"`
		TokenIDs    []int    `json:"token_ids"`
		DecodedText string   `json:"decoded_text"`
	}
	readJSON(t, "swift/gpt2_encoded_tokens.json", &g)
	gpt2 := loadTok(t, "gpt2")
	var pre []string
	for _, p := range gpt2.PreTokenize(g.Text) {
		pre = append(pre, ByteLevelEncode(p))
	}
	if len(pre) != len(g.EncodedText) {
		t.Errorf("gpt2 pre-tokens: got %d, want %d", len(pre), len(g.EncodedText))
	} else {
		for i := range pre {
			if pre[i] != g.EncodedText[i] {
				t.Errorf("gpt2 pre-token %d: %q want %q", i, pre[i], g.EncodedText[i])
			}
		}
	}
	got = gpt2.Encode(g.Text, true)
	if !eqInts(got, g.TokenIDs) {
		t.Errorf("gpt2_encoded_tokens:\n got %v\nwant %v", got, g.TokenIDs)
	}
	checkTokens(t, gpt2, "gpt2_encoded_tokens", got, g.BPETokens)
	if d := gpt2.Decode(got, false); d != g.DecodedText {
		t.Errorf("gpt2 decoded %q, want %q", d, g.DecodedText)
	}
}

func TestSwiftTokenizerTests(t *testing.T) {
	var f map[string][]struct {
		Input   string `json:"input"`
		Encoded struct {
			InputIDs []int `json:"input_ids"`
		} `json:"encoded"`
		DecodedWithSpecial    string `json:"decoded_with_special"`
		DecodedWithoutSpecial string `json:"decoded_without_special"`
	}
	readJSON(t, "swift/tokenizer_tests.json", &f)
	for model, name := range map[string]string{
		"distilgpt2":                             "gpt2",
		"pcuenq/Llama-3.2-1B-Instruct-tokenizer": "llama3.2",
	} {
		tok := loadTok(t, name)
		if len(f[model]) == 0 {
			t.Fatalf("no cases for %s", model)
		}
		for _, c := range f[model] {
			got := tok.Encode(c.Input, true)
			if !eqInts(got, c.Encoded.InputIDs) {
				t.Errorf("%s %q:\n got %v\nwant %v", model, c.Input, got, c.Encoded.InputIDs)
				continue
			}
			if d := CleanUpTokenizationSpaces(tok.Decode(got, false)); d != c.DecodedWithSpecial {
				t.Errorf("%s: decoded %q, want %q", model, d, c.DecodedWithSpecial)
			}
			if d := CleanUpTokenizationSpaces(tok.Decode(got, true)); d != c.DecodedWithoutSpecial {
				t.Errorf("%s: decoded (skip) %q, want %q", model, d, c.DecodedWithoutSpecial)
			}
		}
	}
}
