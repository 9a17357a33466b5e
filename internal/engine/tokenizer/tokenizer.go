// Package tokenizer implements Hugging Face tokenizer.json byte-level BPE
// tokenizers (GPT-2, Qwen2/2.5, Llama-3 and the like) in pure Go, producing
// exactly the token ids of the reference implementation.
//
// Supported: model BPE (merges as "a b" strings or ["a","b"] pairs,
// ignore_merges) with a ByteLevel pre-tokenizer; normalizers NFC, NFD, NFKC,
// NFKD, Lowercase and Sequence; pre-tokenizers Sequence, Split (regex or
// string pattern, every behavior, invert), Digits and ByteLevel; post-processors
// TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing and
// Sequence; decoder ByteLevel (or none). Added tokens are matched before
// normalization (or after it for normalized ones) with HF's leftmost-longest
// rule and single_word/lstrip/rstrip handling.
//
// A *Tokenizer is safe for concurrent use.
package tokenizer

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

// Tokenizer is a loaded tokenizer.json. Safe for concurrent use.
type Tokenizer struct {
	model     bpeModel
	strVocab  map[string]int // model vocabulary as spelled in the file
	normalize func(string) string
	steps     []preStep

	rawAdded  *addedMatcher // added tokens with normalized=false
	normAdded *addedMatcher // added tokens with normalized=true
	added     []AddedToken  // sorted by id
	addedByC  map[string]int
	special   []bool // by id

	prefix, suffix []int // added by the post-processor when addSpecial

	n        int      // max id + 1
	tokens   []string // id -> token (added tokens take precedence)
	present  []bool
	tokBytes []byte
	tokOff   []uint32 // len n+1
	joinDec  bool     // no decoder: tokens are joined with " "
}

// Load reads a tokenizer.json file (optionally gzip-compressed).
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return LoadFromBytes(data)
}

// LoadFromBytes parses the contents of a tokenizer.json file (optionally
// gzip-compressed).
func LoadFromBytes(data []byte) (*Tokenizer, error) {
	return loadFromBytes(data, false)
}

func loadFromBytes(data []byte, noFast bool) (*Tokenizer, error) {
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: gzip: %w", err)
		}
		data, err = io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: gzip: %w", err)
		}
	}
	t, err := build(data, noFast)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// Encode tokenizes text. With addSpecial the post-processor's special tokens
// (e.g. Llama-3's <|begin_of_text|>) are added, as transformers does with
// add_special_tokens=True. Added tokens written in the text (e.g.
// "<|im_start|>") are always recognized.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	out := make([]int, 0, len(text)/3+len(t.prefix)+len(t.suffix)+4)
	if addSpecial {
		out = append(out, t.prefix...)
	}
	out = t.appendEncoded(out, text, false)
	if addSpecial {
		out = append(out, t.suffix...)
	}
	return out
}

// EncodeOrdinary tokenizes text treating special added tokens written in it
// (e.g. "<|im_end|>" typed by a user) as plain text, like HF with
// split_special_tokens=True; non-special added tokens are still recognized
// and no post-processor tokens are added.
func (t *Tokenizer) EncodeOrdinary(text string) []int {
	return t.appendEncoded(make([]int, 0, len(text)/3+4), text, true)
}

func (t *Tokenizer) appendEncoded(out []int, text string, skipSpecial bool) []int {
	emitWord := func(w string) { out = t.model.encode(w, out) }
	fast := t.fastSplit()
	t.rawAdded.split(text, skipSpecial, func(piece string, id int) {
		if id >= 0 {
			out = append(out, id)
			return
		}
		if t.normalize != nil {
			piece = t.normalize(piece)
		}
		t.normAdded.split(piece, skipSpecial, func(p string, id int) {
			if id >= 0 {
				out = append(out, id)
				return
			}
			if fast != nil {
				// Common case: one Split step with a hand-written matcher.
				for i := 0; i < len(p); {
					j := fast.matchAt(p, i)
					out = t.model.encode(p[i:j], out)
					i = j
				}
				return
			}
			t.preTokenize(p, 0, emitWord)
		})
	})
	return out
}

// fastSplit returns the hand-written matcher when pre-tokenization is a
// single isolating split with one (the usual case), else nil.
func (t *Tokenizer) fastSplit() *fastMatcher {
	if len(t.steps) != 1 {
		return nil
	}
	st, ok := t.steps[0].(*splitStep)
	if !ok || st.behavior != behIsolated {
		return nil
	}
	fm, _ := st.m.(*fastMatcher)
	return fm
}

func (t *Tokenizer) preTokenize(s string, k int, fn func(string)) {
	switch {
	case s == "":
	case k == len(t.steps):
		fn(s)
	case k == len(t.steps)-1:
		t.steps[k].split(s, fn)
	default:
		t.steps[k].split(s, func(p string) { t.preTokenize(p, k+1, fn) })
	}
}

// PreTokenize returns the pre-tokens (raw text pieces fed to BPE) of text,
// added tokens included as their own pieces. For inspection and tests.
func (t *Tokenizer) PreTokenize(text string) []string {
	var out []string
	t.rawAdded.split(text, false, func(piece string, id int) {
		if id >= 0 {
			out = append(out, piece)
			return
		}
		if t.normalize != nil {
			piece = t.normalize(piece)
		}
		t.normAdded.split(piece, false, func(p string, id int) {
			if id >= 0 {
				out = append(out, p)
				return
			}
			t.preTokenize(p, 0, func(w string) { out = append(out, w) })
		})
	})
	return out
}

func (t *Tokenizer) valid(id int) bool { return id >= 0 && id < t.n && t.present[id] }

func (t *Tokenizer) rawBytes(id int) []byte { return t.tokBytes[t.tokOff[id]:t.tokOff[id+1]] }

// Decode turns ids back into text like HF's decode (without transformers'
// clean_up_tokenization_spaces; see CleanUpTokenizationSpaces). Unknown ids
// are ignored; with skipSpecial, added tokens marked special are dropped.
// Invalid UTF-8 is replaced by U+FFFD per maximal invalid subsequence.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	buf := make([]byte, 0, len(ids)*4)
	first := true
	for _, id := range ids {
		if !t.valid(id) || (skipSpecial && t.special[id]) {
			continue
		}
		if t.joinDec && !first {
			buf = append(buf, ' ')
		}
		first = false
		buf = append(buf, t.rawBytes(id)...)
	}
	return lossyString(buf)
}

// TokenBytes returns the bytes that token id stands for (what Decode would
// produce for it before UTF-8 repair), e.g. for OpenAI logprobs "bytes".
// nil for an unknown id.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if !t.valid(id) {
		return nil
	}
	return slices.Clone(t.rawBytes(id))
}

// TokenToID returns the id of a token as spelled in the vocabulary (byte-level
// form, e.g. "Ġthe") or the content of an added token.
func (t *Tokenizer) TokenToID(tok string) (int, bool) {
	if i, ok := t.addedByC[tok]; ok {
		return t.added[i].ID, true
	}
	id, ok := t.strVocab[tok]
	return id, ok
}

// IDToToken returns the token string of id (byte-level form for vocabulary
// tokens, content for added tokens), or "" for an unknown id.
func (t *Tokenizer) IDToToken(id int) string {
	if !t.valid(id) {
		return ""
	}
	return t.tokens[id]
}

// VocabSize returns the number of ids: the largest id (vocabulary or added
// token) plus one.
func (t *Tokenizer) VocabSize() int { return t.n }

// AddedTokens returns the added tokens, sorted by id.
func (t *Tokenizer) AddedTokens() []AddedToken { return slices.Clone(t.added) }

// AddedTokenID returns the id of the added token with this content.
func (t *Tokenizer) AddedTokenID(content string) (int, bool) {
	if i, ok := t.addedByC[content]; ok {
		return t.added[i].ID, true
	}
	return 0, false
}

// SpecialTokenID returns the id of the added token with this content if it is
// marked special (e.g. "<|im_end|>", "<|eot_id|>").
func (t *Tokenizer) SpecialTokenID(content string) (int, bool) {
	if i, ok := t.addedByC[content]; ok && t.added[i].Special {
		return t.added[i].ID, true
	}
	return 0, false
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool { return id >= 0 && id < t.n && t.special[id] }

// SpecialPrefix and SpecialSuffix return the ids that Encode adds around the
// text when addSpecial is true.
func (t *Tokenizer) SpecialPrefix() []int { return slices.Clone(t.prefix) }

// SpecialSuffix: see SpecialPrefix.
func (t *Tokenizer) SpecialSuffix() []int { return slices.Clone(t.suffix) }

// StreamDecoder decodes ids one at a time, returning only complete UTF-8 text:
// bytes of a character split across tokens are held back until complete. The
// concatenation of all Add results plus Flush equals Decode of all ids. Not
// safe for concurrent use (use one per stream).
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	started     bool
	pending     []byte
	out         []byte
}

// NewStreamDecoder returns a decoder for one stream of ids.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// SkipSpecial sets whether special added tokens are dropped; returns d.
func (d *StreamDecoder) SkipSpecial(skip bool) *StreamDecoder {
	d.skipSpecial = skip
	return d
}

// Add feeds one id and returns the newly completed text (possibly "").
func (d *StreamDecoder) Add(id int) string {
	t := d.t
	if !t.valid(id) || (d.skipSpecial && t.special[id]) {
		return ""
	}
	if t.joinDec && d.started {
		d.pending = append(d.pending, ' ')
	}
	d.started = true
	d.pending = append(d.pending, t.rawBytes(id)...)
	var rest int
	d.out, rest = appendLossy(d.out[:0], d.pending, true)
	d.pending = append(d.pending[:0], d.pending[len(d.pending)-rest:]...)
	return string(d.out)
}

// Pending reports whether bytes of an incomplete character are held back.
func (d *StreamDecoder) Pending() bool { return len(d.pending) > 0 }

// Flush returns the held-back bytes of an incomplete character as U+FFFD (as
// Decode would) and resets the hold.
func (d *StreamDecoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	s := lossyString(d.pending)
	d.pending = d.pending[:0]
	return s
}

// CleanUpTokenizationSpaces applies transformers' clean_up_tokenization (used
// by decode when the tokenizer config sets clean_up_tokenization_spaces, as
// GPT-2's and Llama-3's do): " ." -> "." and the like.
func CleanUpTokenizationSpaces(s string) string {
	for _, p := range cleanupPairs {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

var cleanupPairs = [][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

func sortAdded(a []AddedToken) {
	sort.SliceStable(a, func(i, j int) bool { return a[i].ID < a[j].ID })
}
