package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The regexes that the common byte-level BPE tokenizers declare. Texts using
// exactly these patterns are split by a hand-written matcher (much faster than
// a backtracking regex engine); any other pattern goes through regexp2.
const (
	// GPT-2's pattern, used by the ByteLevel pre-tokenizer when use_regex is true.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// Qwen2 / Qwen2.5 (single digits).
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama-3 (up to three digits).
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// matcher finds the regex matches in s and reports them in order as byte
// ranges [start, end).
type matcher interface {
	matches(s string, fn func(start, end int))
}

// splitBehavior is HF's SplitDelimiterBehavior.
type splitBehavior int

const (
	behRemoved splitBehavior = iota
	behIsolated
	behMergedWithPrevious
	behMergedWithNext
	behContiguous
)

func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return behRemoved, nil
	case "Isolated":
		return behIsolated, nil
	case "MergedWithPrevious":
		return behMergedWithPrevious, nil
	case "MergedWithNext":
		return behMergedWithNext, nil
	case "Contiguous":
		return behContiguous, nil
	}
	return 0, fmt.Errorf("unsupported Split behavior %q", s)
}

// preStep is one pre-tokenization step: it splits a piece into pieces.
type preStep interface {
	split(s string, emit func(string))
}

// splitStep is HF's Split pre-tokenizer (also used for ByteLevel with use_regex).
type splitStep struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (st *splitStep) split(s string, emit func(string)) {
	if s == "" {
		return
	}
	if st.behavior == behIsolated {
		// Matches and gaps each become a piece (invert makes no difference).
		prev := 0
		st.m.matches(s, func(a, b int) {
			if a > prev {
				emit(s[prev:a])
			}
			if b > a {
				emit(s[a:b])
			}
			prev = b
		})
		if prev < len(s) {
			emit(s[prev:])
		}
		return
	}
	// General case: build (range, isMatch) list covering s.
	type seg struct {
		a, b  int
		delim bool
	}
	var segs []seg
	prev := 0
	st.m.matches(s, func(a, b int) {
		if a > prev {
			segs = append(segs, seg{prev, a, st.invert})
		}
		segs = append(segs, seg{a, b, !st.invert})
		prev = b
	})
	if prev < len(s) {
		segs = append(segs, seg{prev, len(s), st.invert})
	}
	emitNonEmpty := func(a, b int) {
		if b > a {
			emit(s[a:b])
		}
	}
	switch st.behavior {
	case behRemoved:
		for _, g := range segs {
			if !g.delim {
				emitNonEmpty(g.a, g.b)
			}
		}
	case behMergedWithPrevious:
		start := -1
		for _, g := range segs {
			if start < 0 {
				start = g.a
			}
			if g.delim {
				emitNonEmpty(start, g.b)
				start = -1
			}
		}
		if start >= 0 {
			emitNonEmpty(start, len(s))
		}
	case behMergedWithNext:
		start := -1
		for _, g := range segs {
			if g.delim {
				if start >= 0 {
					emitNonEmpty(start, g.a)
				}
				start = g.a
			} else if start < 0 {
				start = g.a
			}
		}
		if start >= 0 {
			emitNonEmpty(start, len(s))
		}
	case behContiguous:
		start, inDelim := -1, false
		for _, g := range segs {
			if start >= 0 && !(g.delim && inDelim) {
				emitNonEmpty(start, g.a)
				start = -1
			}
			if start < 0 {
				start = g.a
			}
			inDelim = g.delim
		}
		if start >= 0 {
			emitNonEmpty(start, len(s))
		}
	}
}

// prefixSpaceStep is the add_prefix_space part of the ByteLevel pre-tokenizer.
type prefixSpaceStep struct{}

func (prefixSpaceStep) split(s string, emit func(string)) {
	if s == "" {
		return
	}
	if s[0] != ' ' {
		s = " " + s
	}
	emit(s)
}

// literalMatcher matches a fixed string (Split with {"String": ...}).
type literalMatcher struct{ lit string }

func (m literalMatcher) matches(s string, fn func(int, int)) {
	if m.lit == "" {
		return
	}
	off := 0
	for {
		i := strings.Index(s[off:], m.lit)
		if i < 0 {
			return
		}
		fn(off+i, off+i+len(m.lit))
		off += i + len(m.lit)
	}
}

// digitsMatcher matches every numeric character (HF's Digits pre-tokenizer
// splits on char::is_numeric: general categories Nd, Nl, No).
type digitsMatcher struct{}

func (digitsMatcher) matches(s string, fn func(int, int)) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= '0' && c <= '9' {
				fn(i, i+1)
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if unicode.IsNumber(r) {
			fn(i, i+w)
		}
		i += w
	}
}

// regexMatcher is the general fallback, using regexp2 (supports lookaround,
// like the Oniguruma engine that Hugging Face tokenizers uses).
type regexMatcher struct{ re *regexp2.Regexp }

func newRegexMatcher(pattern string) (*regexMatcher, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compiling split regex %q: %w", pattern, err)
	}
	return &regexMatcher{re: re}, nil
}

func (m *regexMatcher) matches(s string, fn func(int, int)) {
	runes := []rune(s)
	// Byte offset of every rune index (invalid bytes count as one rune each,
	// as in the []rune conversion).
	offs := make([]int, 0, len(runes)+1)
	for i := 0; i < len(s); {
		offs = append(offs, i)
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	offs = append(offs, len(s))
	mt, err := m.re.FindRunesMatch(runes)
	for err == nil && mt != nil {
		fn(offs[mt.Index], offs[mt.Index+mt.Length])
		mt, err = m.re.FindNextMatch(mt)
	}
}

// Character classes for the hand-written matchers.
const (
	clsL  uint8 = iota + 1 // \p{L}
	clsN                   // \p{N}
	clsS                   // \s except \r and \n
	clsNL                  // \r or \n
	clsO                   // anything else
)

var asciiClass [128]uint8

func init() {
	for c := 0; c < 128; c++ {
		r := rune(c)
		switch {
		case c == '\r' || c == '\n':
			asciiClass[c] = clsNL
		case (c >= 9 && c <= 13) || c == ' ':
			asciiClass[c] = clsS
		case unicode.IsLetter(r):
			asciiClass[c] = clsL
		case unicode.IsNumber(r):
			asciiClass[c] = clsN
		default:
			asciiClass[c] = clsO
		}
	}
}

// bmpClass caches the class of every BMP rune; built on first use.
var (
	bmpClass     [0x10000]uint8
	bmpClassOnce sync.Once
)

func initBMPClass() {
	bmpClassOnce.Do(func() {
		for r := rune(0); r < 0x10000; r++ {
			if r < utf8.RuneSelf {
				bmpClass[r] = asciiClass[r]
			} else {
				bmpClass[r] = runeClass(r)
			}
		}
	})
}

// classAt returns the class and byte width of the character at s[i].
// initBMPClass must have run.
func classAt(s string, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return clsO, 1
	}
	if r < 0x10000 {
		return bmpClass[r], w
	}
	return runeClass(r), w
}

func runeClass(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case r == 0x85 || unicode.Is(unicode.Z, r):
		return clsS
	}
	return clsO
}

// runOf returns the end of the run of characters of class cls starting at i.
func runOf(s string, i int, cls uint8) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c != cls {
			break
		}
		i += w
	}
	return i
}

// fastMatcher implements the GPT-2, Qwen2 and Llama-3 split patterns by hand.
type fastMatcher struct {
	llamaStyle bool // Qwen2/Llama-3 family (vs GPT-2)
	maxDigits  int  // 0: unlimited
}

func fastMatcherFor(pattern string) *fastMatcher {
	initBMPClass()
	switch pattern {
	case gpt2Pattern:
		return &fastMatcher{}
	case qwen2Pattern:
		return &fastMatcher{llamaStyle: true, maxDigits: 1}
	case llama3Pattern:
		return &fastMatcher{llamaStyle: true, maxDigits: 3}
	}
	return nil
}

func (m *fastMatcher) matches(s string, fn func(int, int)) {
	for i := 0; i < len(s); {
		j := m.matchAt(s, i)
		fn(i, j)
		i = j
	}
}

// contraction returns the end of a contraction ('s 't 're 've 'm 'll 'd) at i,
// or -1. ci makes the letters case-insensitive (with Unicode simple case
// folding, so U+017F LATIN SMALL LETTER LONG S also matches 's').
func contraction(s string, i int, ci bool) int {
	if i+1 >= len(s) {
		return -1
	}
	low := func(c byte) byte {
		if ci && c >= 'A' && c <= 'Z' {
			return c + 32
		}
		return c
	}
	c := low(s[i+1])
	switch c {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && low(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && low(s[i+2]) == 'l' {
			return i + 3
		}
	case 0xC5:
		// U+017F (ſ) = C5 BF folds to 's'.
		if ci && i+2 < len(s) && s[i+2] == 0xBF {
			return i + 3
		}
	}
	return -1
}

// matchAt returns the end of the match starting at i (there always is one:
// every character is a letter, number, whitespace or "other").
func (m *fastMatcher) matchAt(s string, i int) int {
	if s[i] == '\'' {
		if j := contraction(s, i, m.llamaStyle); j > 0 {
			return j
		}
	}
	c, w := classAt(s, i)
	if m.llamaStyle {
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if c == clsL {
			return runOf(s, i+w, clsL)
		}
		if (c == clsS || c == clsO) && i+w < len(s) {
			if c2, w2 := classAt(s, i+w); c2 == clsL {
				return runOf(s, i+w+w2, clsL)
			}
		}
		// \p{N}{1,k}
		if c == clsN {
			j := i + w
			for n := 1; j < len(s) && (m.maxDigits == 0 || n < m.maxDigits); n++ {
				c2, w2 := classAt(s, j)
				if c2 != clsN {
					break
				}
				j += w2
			}
			return j
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		start := -1
		if c == clsO {
			start = i
		} else if s[i] == ' ' && i+1 < len(s) {
			if c2, _ := classAt(s, i+1); c2 == clsO {
				start = i + 1
			}
		}
		if start >= 0 {
			j := runOf(s, start, clsO)
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j
		}
		// Whitespace (c is clsS or clsNL).
		end, lastNL, lastStart := i, -1, i
		for end < len(s) {
			c2, w2 := classAt(s, end)
			if c2 != clsS && c2 != clsNL {
				break
			}
			if c2 == clsNL {
				lastNL = end
			}
			lastStart = end
			end += w2
		}
		// \s*[\r\n]+
		if lastNL >= 0 {
			return lastNL + 1
		}
		return wsTail(s, i, end, lastStart)
	}

	// GPT-2: ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
	if c == clsL || c == clsN || c == clsO {
		return runOf(s, i+w, c)
	}
	if s[i] == ' ' && i+1 < len(s) {
		if c2, w2 := classAt(s, i+1); c2 == clsL || c2 == clsN || c2 == clsO {
			return runOf(s, i+1+w2, c2)
		}
	}
	end, lastStart := i, i
	for end < len(s) {
		c2, w2 := classAt(s, end)
		if c2 != clsS && c2 != clsNL {
			break
		}
		lastStart = end
		end += w2
	}
	return wsTail(s, i, end, lastStart)
}

// wsTail resolves '\s+(?!\S)|\s+' for the whitespace run [i, end) whose last
// character starts at lastStart.
func wsTail(s string, i, end, lastStart int) int {
	if end == len(s) || lastStart == i {
		return end
	}
	return lastStart
}
