package tokenizer

import (
	"bytes"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestSpecialTokens(t *testing.T) {
	qwen := loadTok(t, "qwen2.5")
	text := "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
	want := []int{151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 13048, 151645, 198}
	for _, add := range []bool{false, true} { // Qwen's post-processor adds nothing
		if got := qwen.Encode(text, add); !eqInts(got, want) {
			t.Errorf("qwen chat (add=%v):\n got %v\nwant %v", add, got, want)
		}
	}
	if d := qwen.Decode(want, false); d != text {
		t.Errorf("qwen decode %q", d)
	}
	if d := qwen.Decode(want, true); d != "system\nYou are a helpful assistant.\nuser\nHi\n" {
		t.Errorf("qwen decode skip special %q", d)
	}
	// <tool_call> is an added token that is not special: kept by skipSpecial.
	tc, ok := qwen.AddedTokenID("<tool_call>")
	if !ok || tc != 151657 || qwen.IsSpecial(tc) {
		t.Errorf("<tool_call>: %d %v special=%v", tc, ok, qwen.IsSpecial(tc))
	}
	if _, ok := qwen.SpecialTokenID("<tool_call>"); ok {
		t.Error("<tool_call> reported special")
	}
	if id, ok := qwen.SpecialTokenID("<|im_end|>"); !ok || id != 151645 {
		t.Errorf("SpecialTokenID(<|im_end|>) = %d %v", id, ok)
	}
	ids := qwen.Encode("<tool_call>{}</tool_call>", false)
	if d := qwen.Decode(ids, true); d != "<tool_call>{}</tool_call>" {
		t.Errorf("tool_call skip-special decode %q (ids %v)", d, ids)
	}
	// EncodeOrdinary: specials typed in text are plain text, <tool_call> (not
	// special) is still recognized.
	ord := qwen.EncodeOrdinary("<|im_end|><tool_call>")
	if ord[len(ord)-1] != 151657 || len(ord) < 3 || slices.Contains(ord, 151645) {
		t.Errorf("EncodeOrdinary: %v", ord)
	}
	if d := qwen.Decode(ord, false); d != "<|im_end|><tool_call>" {
		t.Errorf("EncodeOrdinary round trip %q", d)
	}
	// Longest match, and partial specials are plain text.
	if got := qwen.Encode("<|im_start<|im_end|>|>", false); len(got) != 7 || got[4] != 151645 {
		t.Errorf("partial special: %v", got)
	}

	llama := loadTok(t, "llama3.2")
	lt := "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
	if got, want := llama.Encode(lt, true), []int{128000, 128006, 882, 128007, 271, 13347, 128009}; !eqInts(got, want) {
		t.Errorf("llama chat:\n got %v\nwant %v", got, want)
	}
	if got, want := llama.Encode(lt, false), []int{128006, 882, 128007, 271, 13347, 128009}; !eqInts(got, want) {
		t.Errorf("llama chat (no BOS):\n got %v\nwant %v", got, want)
	}
	if got := llama.Encode("", true); !eqInts(got, []int{128000}) {
		t.Errorf("llama empty with special: %v", got)
	}
	if got := llama.Encode("", false); len(got) != 0 {
		t.Errorf("llama empty: %v", got)
	}
	if p := llama.SpecialPrefix(); !eqInts(p, []int{128000}) || len(llama.SpecialSuffix()) != 0 {
		t.Errorf("llama prefix %v suffix %v", p, llama.SpecialSuffix())
	}

	gpt2 := loadTok(t, "gpt2")
	if got, want := gpt2.Encode("Hello<|endoftext|> world", true), []int{15496, 50256, 995}; !eqInts(got, want) {
		t.Errorf("gpt2 eos: got %v want %v", got, want)
	}
}

func TestAPI(t *testing.T) {
	qwen := loadTok(t, "qwen2.5")
	if n := qwen.VocabSize(); n != 151665 {
		t.Errorf("qwen VocabSize %d", n)
	}
	if n := loadTok(t, "llama3.2").VocabSize(); n != 128256 {
		t.Errorf("llama VocabSize %d", n)
	}
	if n := loadTok(t, "gpt2").VocabSize(); n != 50257 {
		t.Errorf("gpt2 VocabSize %d", n)
	}
	if a := qwen.AddedTokens(); len(a) != 22 || a[0].Content != "<|endoftext|>" || a[0].ID != 151643 || !a[0].Special {
		t.Errorf("AddedTokens: %d %+v", len(a), a[0])
	}
	id, ok := qwen.TokenToID("Ġthe")
	if !ok || qwen.IDToToken(id) != "Ġthe" || string(qwen.TokenBytes(id)) != " the" {
		t.Errorf("Ġthe: %d %v %q %q", id, ok, qwen.IDToToken(id), qwen.TokenBytes(id))
	}
	if id, ok := qwen.TokenToID("<|im_start|>"); !ok || id != 151644 || string(qwen.TokenBytes(id)) != "<|im_start|>" {
		t.Errorf("<|im_start|>: %d %v", id, ok)
	}
	// A token holding part of a UTF-8 character.
	ids := qwen.Encode("😀", false)
	var all []byte
	for _, id := range ids {
		all = append(all, qwen.TokenBytes(id)...)
	}
	if string(all) != "😀" {
		t.Errorf("TokenBytes of 😀 pieces: %x", all)
	}
	if qwen.TokenBytes(-1) != nil || qwen.TokenBytes(1<<30) != nil || qwen.IDToToken(-5) != "" {
		t.Error("unknown ids should give nil/empty")
	}
	if _, ok := qwen.TokenToID("no such token here"); ok {
		t.Error("TokenToID of unknown token")
	}
	// Unknown ids are ignored by Decode.
	if d := qwen.Decode([]int{-1, 9707, 1 << 30}, false); d != "Hello" {
		t.Errorf("decode with bad ids: %q", d)
	}
	if got := CleanUpTokenizationSpaces("a , b . c ' d do n't"); got != "a, b. c'd don't" {
		t.Errorf("cleanup: %q", got)
	}
}

func TestRoundTrip(t *testing.T) {
	texts := allTexts(t)
	texts = append(texts, "func main() {\n\tfmt.Println(\"hi\")\r\n}\n\n\n   x\t\t\ty  \u00a0z", "a\u0301\u0308 e\u0301 Z\u200bW\u200dX\ufeff", "")
	for _, name := range []string{"qwen2.5", "llama3.2", "gpt2"} {
		tok := loadTok(t, name)
		for _, s := range texts {
			want := s
			if name == "qwen2.5" {
				want = norm.NFC.String(s)
			}
			if d := tok.Decode(tok.Encode(s, false), false); d != want {
				t.Errorf("%s round trip %q -> %q", name, s, d)
			}
		}
	}
}

// The hand-written matchers must agree with regexp2 running the declared regex.
func TestFastMatcherMatchesRegexp2(t *testing.T) {
	texts := allTexts(t)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "é", "ß", "中", "ſ", "1", "٣", "²", "Ⅻ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2003", "\u3000", "\u0085", "\u000b", "\f",
		"'", "'s", "'S", "'ll", "'LL", "'Re", "'ve", "'m", "'d", "'t", "'x", "!", "?", "...", "-", "_", "😀", "\u200d", "\u0301", "\u0e31", "\ufffd", "\x00", "€", "#", "\xff", "\xe2\x82",
		"\u2028", "\u2029", "\u1680", "\u202f", "𝐀", "𝟘", "\ue000", "ǅ", "ʰ", "\u0903", "½", "\u180e", "\ufeff", "ﬅ", "K", "İ", "\t\n", " \n ", "\u00a0\n"}
	for i := 0; i < 2500; i++ {
		var b strings.Builder
		n := 1 + rng.IntN(20)
		for k := 0; k < n; k++ {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, pat := range []string{gpt2Pattern, qwen2Pattern, llama3Pattern} {
		fast := fastMatcherFor(pat)
		slow, err := newRegexMatcher(pat)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, s := range texts {
			if !utf8.ValidString(s) {
				continue // regexp2 sees U+FFFD instead of the bytes
			}
			if strings.Contains(s, "'ſ") {
				continue // deliberate difference, see TestLongSContraction
			}
			var a, b [][2]int
			fast.matches(s, func(i, j int) { a = append(a, [2]int{i, j}) })
			slow.matches(s, func(i, j int) { b = append(b, [2]int{i, j}) })
			if !equalRanges(a, b) && bad < 5 {
				bad++
				t.Errorf("pattern %.20q on %q:\nfast  %v\nregex %v", pat, s, a, b)
			}
		}
	}
}

// Oniguruma (used by HF) applies Unicode case folding under (?i), so U+017F
// (ſ) matches 's' in the Qwen2/Llama-3 contraction group; regexp2 does not.
// The hand-written matcher follows Oniguruma.
func TestLongSContraction(t *testing.T) {
	fm := fastMatcherFor(qwen2Pattern)
	var got []string
	s := "'ſa"
	fm.matches(s, func(i, j int) { got = append(got, s[i:j]) })
	if strings.Join(got, "|") != "'ſ|a" {
		t.Errorf("got %q", got)
	}
	got = nil
	fastMatcherFor(gpt2Pattern).matches(s, func(i, j int) { got = append(got, s[i:j]) })
	if strings.Join(got, "|") != "'|ſa" { // GPT-2's pattern is case-sensitive
		t.Errorf("gpt2: got %q", got)
	}
}

func equalRanges(a, b [][2]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The O(n^2) and heap merge loops must agree.
func TestMergeVariantsAgree(t *testing.T) {
	for _, name := range []string{"qwen2.5", "gpt2"} {
		m := &loadTok(t, name).model
		rng := rand.New(rand.NewPCG(3, 4))
		texts := allTexts(t)
		words := strings.Fields(strings.Join(texts, " "))
		for i := 0; i < 400; i++ {
			var s string
			if i%2 == 0 {
				s = words[rng.IntN(len(words))] + words[rng.IntN(len(words))] + words[rng.IntN(len(words))]
			} else {
				b := make([]byte, 1+rng.IntN(120))
				for k := range b {
					b[k] = "aaab  ===\x00\xe4\xb8\xad"[rng.IntN(13)]
				}
				s = string(b)
			}
			var s1, s2 []int32
			for k := 0; k < len(s); k++ {
				s1 = append(s1, m.byteIDs[s[k]])
			}
			s2 = append(s2, s1...)
			a := m.mergeSmall(s1)
			b := m.mergeHeap(s2)
			if len(a) != len(b) {
				t.Fatalf("%s %q: small %v heap %v", name, s, a, b)
			}
			for k := range a {
				if a[k] != b[k] {
					t.Fatalf("%s %q: small %v heap %v", name, s, a, b)
				}
			}
		}
		// A long piece goes through the heap path in encode.
		long := strings.Repeat("abc", 2000)
		ids := loadTok(t, name).Encode(long, false)
		if d := loadTok(t, name).Decode(ids, false); d != long {
			t.Fatalf("%s long round trip", name)
		}
	}
}

func TestStreamDecoder(t *testing.T) {
	texts := append(allTexts(t), "日本語のテキスト🎉👨‍👩‍👧‍👦 ok", "\u00e9\u0301")
	for _, name := range []string{"qwen2.5", "llama3.2", "gpt2"} {
		tok := loadTok(t, name)
		held := false
		for _, s := range texts {
			ids := tok.Encode(s, true)
			for _, skip := range []bool{false, true} {
				d := tok.NewStreamDecoder().SkipSpecial(skip)
				var b strings.Builder
				for _, id := range ids {
					piece := d.Add(id)
					if !utf8.ValidString(piece) {
						t.Fatalf("%s: invalid UTF-8 piece %q", name, piece)
					}
					held = held || d.Pending()
					b.WriteString(piece)
				}
				b.WriteString(d.Flush())
				if want := tok.Decode(ids, skip); b.String() != want {
					t.Errorf("%s stream %q != decode %q", name, b.String(), want)
				}
			}
		}
		if !held {
			t.Errorf("%s: no character was ever split across tokens", name)
		}
	}
	// Explicit: GPT-2 splits 😀 (F0 9F 98 80) into several byte tokens.
	gpt2 := loadTok(t, "gpt2")
	ids := gpt2.Encode("a😀", false)
	d := gpt2.NewStreamDecoder()
	var outs []string
	for _, id := range ids {
		outs = append(outs, d.Add(id))
	}
	if len(ids) < 3 || strings.Join(outs, "") != "a😀" || outs[len(outs)-1] != "😀" || outs[1] != "" {
		t.Errorf("stream pieces %q for ids %v", outs, ids)
	}
	// A dangling partial character is flushed as U+FFFD, like Decode.
	d = gpt2.NewStreamDecoder()
	if s := d.Add(ids[1]); s != "" || !d.Pending() {
		t.Errorf("partial: %q", s)
	}
	if s := d.Flush(); s != "\ufffd" || d.Pending() {
		t.Errorf("flush: %q", s)
	}
	if s := gpt2.Decode(ids[1:2], false); s != "\ufffd" {
		t.Errorf("decode partial: %q", s)
	}
}

// Invalid byte sequences are replaced like Rust's String::from_utf8_lossy.
func TestLossyUTF8(t *testing.T) {
	gpt2 := loadTok(t, "gpt2")
	for _, tc := range []struct{ in, want string }{
		{"\xe2\x82A", "\ufffdA"},
		{"\xf0\x80", "\ufffd\ufffd"},
		{"\xc0\x80", "\ufffd\ufffd"},
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"},
		{"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"\xf0\x9f\x98", "\ufffd"},
		{"a\xffb\xe4\xb8", "a\ufffdb\ufffd"},
		{"\xe4\xb8\xad", "中"},
	} {
		var ids []int
		for i := 0; i < len(tc.in); i++ {
			ids = append(ids, int(gpt2.model.byteIDs[tc.in[i]]))
		}
		if got := gpt2.Decode(ids, false); got != tc.want {
			t.Errorf("decode %q = %q, want %q", tc.in, got, tc.want)
		}
		d := gpt2.NewStreamDecoder()
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		if b.String() != tc.want {
			t.Errorf("stream %q = %q, want %q", tc.in, b.String(), tc.want)
		}
		// Encoding invalid UTF-8 keeps the bytes.
		if got := gpt2.Encode(tc.in, false); !eqInts(got, gpt2.Encode(tc.in, false)) || len(got) == 0 {
			t.Errorf("encode %q: %v", tc.in, got)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadTok(t, "qwen2.5")
	texts := allTexts(t)
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, false)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range texts {
				k := (i + g*31) % len(texts)
				if got := tok.Encode(texts[k], false); !eqInts(got, want[k]) {
					t.Errorf("concurrent encode mismatch on %q", texts[k])
					return
				}
			}
		}()
	}
	wg.Wait()
}

// minimalTokenizer is what a tiny model's byte-level BPE tokenizer.json looks
// like: 256 byte tokens, a few merges, three added special tokens.
func minimalTokenizer(merges string, extra string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"version":"1.0","truncation":null,"padding":null,"added_tokens":[`)
	b.WriteString(`{"id":259,"content":"<|endoftext|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},`)
	b.WriteString(`{"id":260,"content":"<|im_start|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},`)
	b.WriteString(`{"id":261,"content":"<|im_end|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}` + extra + `],`)
	b.WriteString(`"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},`)
	b.WriteString(`"post_processor":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},`)
	b.WriteString(`"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},`)
	b.WriteString(`"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"vocab":{`)
	for i := 0; i < 256; i++ {
		tok := string(byteToRune[i])
		q, _ := jsonQuote(tok)
		b.WriteString(q + `:` + itoa(i) + `,`)
	}
	b.WriteString(`"he":256,"ll":257,"Ġhe":258},"merges":` + merges + `}}`)
	return b.Bytes()
}

func TestMinimalTokenizer(t *testing.T) {
	for _, merges := range []string{`["h e","l l","Ġ he"]`, `[["h","e"],["l","l"],["Ġ","he"]]`} {
		tok, err := LoadFromBytes(minimalTokenizer(merges, ""))
		if err != nil {
			t.Fatal(err)
		}
		text := "<|im_start|>user\nhello hello<|im_end|>\n"
		got := tok.Encode(text, true)
		// Ids 0-255 are the byte tokens in byte order here.
		want := []int{260, 'u', 's', 'e', 'r', '\n', 256, 257, 'o', 258, 257, 'o', 261, '\n'}
		if !eqInts(got, want) {
			t.Errorf("minimal (%s):\n got %v\nwant %v", merges, got, want)
		}
		if d := tok.Decode(got, false); d != text {
			t.Errorf("minimal decode %q", d)
		}
		if d := tok.Decode(got, true); d != "user\nhello hello\n" {
			t.Errorf("minimal decode skip %q", d)
		}
		if tok.VocabSize() != 262 {
			t.Errorf("VocabSize %d", tok.VocabSize())
		}
		if id, ok := tok.SpecialTokenID("<|endoftext|>"); !ok || id != 259 {
			t.Errorf("eos %d %v", id, ok)
		}
	}
}

func TestAddedTokenFlags(t *testing.T) {
	extra := `,{"id":262,"content":"<mask>","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":true}` +
		`,{"id":263,"content":"hello","single_word":true,"lstrip":false,"rstrip":false,"normalized":true,"special":false}`
	// Vocabulary has no id 262/263: added tokens extend it.
	tok, err := LoadFromBytes(minimalTokenizer(`["h e","l l","Ġ he"]`, extra))
	if err != nil {
		t.Fatal(err)
	}
	// lstrip/rstrip swallow surrounding whitespace.
	if got := tok.Encode("a  <mask>  b", false); !eqInts(got, []int{'a', 262, 'b'}) {
		t.Errorf("lstrip/rstrip: %v", got)
	}
	// single_word: only matches as a whole word.
	if got := tok.Encode("hello", false); !eqInts(got, []int{263}) {
		t.Errorf("single word alone: %v", got)
	}
	if got := tok.Encode("xhello", false); len(got) == 0 || got[len(got)-1] == 263 {
		t.Errorf("single word inside a word: %v", got)
	}
	if got := tok.Encode("a hello.", false); !eqInts(got, []int{'a', ' ', 263, '.'}) {
		t.Errorf("single word with neighbors: %v", got)
	}
}

func TestLoadErrors(t *testing.T) {
	good := string(minimalTokenizer(`["h e"]`, ""))
	for _, tc := range []struct{ name, data, want string }{
		{"not json", `{"model": `, "malformed tokenizer.json"},
		{"no model", `{"added_tokens": []}`, "no \"model\""},
		{"wordpiece", `{"model":{"type":"WordPiece","vocab":{"a":0}}}`, `unsupported model type "WordPiece"`},
		{"unigram", `{"model":{"type":"Unigram","vocab":[["a",0.0]]}}`, `unsupported model type "Unigram"`},
		{"unigram untyped", `{"model":{"vocab":[["a",0.0]]}}`, `unsupported model type "Unigram"`},
		{"bad merge", strings.Replace(good, `["h e"]`, `["h zz"]`, 1), "not in vocabulary"},
		{"bad merge format", strings.Replace(good, `["h e"]`, `["h e x"]`, 1), "malformed BPE merge"},
		{"metaspace", strings.Replace(good, `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`, `{"type":"Metaspace","replacement":"▁"}`, 1), `unsupported pre_tokenizer type "Metaspace"`},
		{"no byte level", strings.Replace(good, `"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`, `"pre_tokenizer":null`, 1), "without a ByteLevel"},
		{"normalizer", strings.Replace(good, `"normalizer":null`, `"normalizer":{"type":"BertNormalizer"}`, 1), `unsupported normalizer type "BertNormalizer"`},
		{"decoder", strings.Replace(good, `"decoder":{"type":"ByteLevel"`, `"decoder":{"type":"WordPiece"`, 1), `unsupported decoder type "WordPiece"`},
		{"split regex", strings.Replace(good, `"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`,
			`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(("},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}`, 1), "compiling split regex"},
		{"split behavior", strings.Replace(good, `"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`,
			`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"a"},"behavior":"Weird","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}`, 1), `unsupported Split behavior "Weird"`},
		{"dropout", strings.Replace(good, `"dropout":null`, `"dropout":0.1`, 1), "dropout"},
		{"vocab type", strings.Replace(good, `"vocab":{`, `"vocab":{"x":"y",`, 1), "malformed BPE vocab"},
	} {
		_, err := LoadFromBytes([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
			t.Errorf("%s: error %v, want containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := Load("testdata/does-not-exist.json"); err == nil {
		t.Error("missing file: no error")
	}
	if _, err := LoadFromBytes([]byte{0x1f, 0x8b, 0, 1}); err == nil {
		t.Error("bad gzip: no error")
	}
}

func TestSplitBehaviors(t *testing.T) {
	for _, tc := range []struct {
		beh  splitBehavior
		want []string
	}{
		{behRemoved, []string{"the", "final", "countdown"}},
		{behIsolated, []string{"the", "-", "final", "-", "-", "countdown"}},
		{behMergedWithPrevious, []string{"the-", "final-", "-", "countdown"}},
		{behMergedWithNext, []string{"the", "-final", "-", "-countdown"}},
		{behContiguous, []string{"the", "-", "final", "--", "countdown"}},
	} {
		st := &splitStep{m: literalMatcher{"-"}, behavior: tc.beh}
		var got []string
		st.split("the-final--countdown", func(s string) { got = append(got, s) })
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("behavior %d: got %q want %q", tc.beh, got, tc.want)
		}
	}
	// invert: the matches are the kept pieces.
	st := &splitStep{m: literalMatcher{"-"}, behavior: behRemoved, invert: true}
	var got []string
	st.split("a-b--c", func(s string) { got = append(got, s) })
	if strings.Join(got, "|") != "-|-|-" {
		t.Errorf("invert removed: %q", got)
	}
}

func TestConfig(t *testing.T) {
	q, err := LoadConfig("testdata/qwen2.5.tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if q.EOSToken != "<|im_end|>" || q.PadToken != "<|endoftext|>" || q.BOSToken != "" || q.CleanUpTokenizationSpaces ||
		!strings.Contains(q.ChatTemplate, "<tool_call>") || len(q.AdditionalSpecialTokens) != 13 || q.AddBOSToken == nil || *q.AddBOSToken {
		t.Errorf("qwen config: %+v", q)
	}
	if id, ok := loadTok(t, "qwen2.5").SpecialTokenID(q.EOSToken); !ok || id != 151645 {
		t.Errorf("eos id %d", id)
	}
	l, err := LoadConfig("testdata/llama3.2.tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if l.BOSToken != "<|begin_of_text|>" || l.EOSToken != "<|eot_id|>" || !l.CleanUpTokenizationSpaces || l.ModelMaxLength != 131072 {
		t.Errorf("llama config: %+v", l)
	}
	c, err := ParseConfig([]byte(`{"eos_token":{"content":"</s>","lstrip":false},"chat_template":[{"name":"default","template":"A"},{"name":"tool_use","template":"B"}]}`))
	if err != nil || c.EOSToken != "</s>" || c.ChatTemplate != "A" || c.ChatTemplates["tool_use"] != "B" {
		t.Errorf("object/list forms: %+v %v", c, err)
	}
	if _, err := ParseConfig([]byte(`{"eos_token": 5}`)); err == nil {
		t.Error("bad eos_token: no error")
	}
}

func TestNFCFastPath(t *testing.T) {
	initNFCInert()
	texts := append(allTexts(t), "e\u0301", "\u1100\u1161\u11a8", "\u212b", "Å", "\u0958", "a\u0308\u0323", "ﬅ", "\uac00\u11a8")
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"a", "e", "A", " ", "\u0301", "\u0308", "\u0323", "\u0327", "\u1100", "\u1161", "\u11a8", "\uac00", "\u0b47", "\u0b3e",
		"\u212b", "\u2126", "\u0958", "中", "😀", "\U0001d15e", "\u0915", "\u093c", "\u0e31", "\u05b4", "ω", "\u0345", "\u0342", "é", "\xff", "ｶ", "\uff9e"}
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		for k := rng.IntN(12); k >= 0; k-- {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, s := range texts {
		if got, want := nfcString(s), norm.NFC.String(s); got != want {
			t.Errorf("nfcString(%q) = %q, want %q", s, got, want)
		}
	}
	// Every inert rune, alone and after a letter, is NFC.
	for r := rune(0x80); r < 0x10000; r++ {
		if nfcInert[r>>6]&(1<<(r&63)) != 0 {
			s := "a" + string(r) + "b"
			if !norm.NFC.IsNormalString(s) || !norm.NFC.IsNormalString(string(r)+string(r)) {
				t.Fatalf("rune %U marked inert but %q is not NFC", r, s)
			}
		}
	}
}

// The hand-written JSON reader must decode like encoding/json.
func TestScannerMatchesEncodingJSON(t *testing.T) {
	raw := []byte(`{"a":1, "\u0120the" : 2,"q\"uote":3,"back\\slash":4,"\/":5,"\ud83d\ude00":6,"\ud800x":7,"tab\there\n":8,"é中":9,"\u00e9\u4e2D":10, "x":-1}`)
	got, err := parseVocab(raw)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]int
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	// The whole GPT-2 vocabulary.
	data := mustGunzip(t, "testdata/gpt2.tokenizer.json.gz")
	f, err := parseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Model struct {
			Vocab  map[string]int `json:"vocab"`
			Merges []string       `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	v, err := parseVocab(f.Model.Vocab)
	if err != nil || !maps.Equal(v, ref.Model.Vocab) {
		t.Errorf("gpt2 vocab differs (err %v)", err)
	}
	for _, bad := range []string{`{"a":1.5}`, `{"a":}`, `{"a":1`, `{"a" 1}`, `{"\x01":1}`, `{"\q":1}`, `["a"]`} {
		if _, err := parseVocab([]byte(bad)); err == nil {
			t.Errorf("parseVocab(%q): no error", bad)
		}
	}
	for _, bad := range []string{`{"model":{}} x`, `{"model":{"vocab":{"a":1}`, `[]`, `{"model":{"vocab":"unterminated}}`} {
		if _, err := parseFile([]byte(bad)); err == nil {
			t.Errorf("parseFile(%q): no error", bad)
		}
	}
}

// SmolLM2-style pre-tokenizer: Sequence[Digits, ByteLevel with regex].
func TestDigitsPreTokenizer(t *testing.T) {
	for _, tc := range []struct {
		individual bool
		want       string
	}{{true, "abc| |1|2|3|4|5| x|٣|٤"}, {false, "abc| |12345| x|٣٤"}} {
		pre := `"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":` + strconv.FormatBool(tc.individual) +
			`},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]}`
		data := strings.Replace(string(minimalTokenizer(`[]`, "")), `"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`, pre, 1)
		tok, err := LoadFromBytes([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(tok.PreTokenize("abc 12345 x٣٤"), "|"); got != tc.want {
			t.Errorf("individual=%v: %q, want %q", tc.individual, got, tc.want)
		}
	}
}

// End to end through the generic regexp2 pre-tokenizer path.
func TestRegexp2PathEndToEnd(t *testing.T) {
	slow, err := loadFromBytes(mustGunzip(t, "testdata/gpt2.tokenizer.json.gz"), true)
	if err != nil {
		t.Fatal(err)
	}
	if slow.fastSplit() != nil {
		t.Fatal("noFast tokenizer uses the hand-written matcher")
	}
	fast := loadTok(t, "gpt2")
	for _, c := range llamaCppCases(t, "gpt-2") {
		if got := slow.Encode(c.text, false); !eqInts(got, c.ids) {
			t.Errorf("regexp2 path %q:\n got %v\nwant %v", c.text, got, c.ids)
		}
	}
	for _, s := range allTexts(t) {
		if a, b := slow.Encode(s, false), fast.Encode(s, false); !eqInts(a, b) {
			t.Errorf("regexp2 vs fast on %q", s)
		}
	}
}
