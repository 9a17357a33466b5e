package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text with leftmost-longest semantics
// (as the Aho-Corasick automaton of HF's AddedVocabulary does).
type addedMatcher struct {
	nodes    []trieNode
	first    [256]bool
	only     int // the single possible first byte, or -1
	toks     []*AddedToken
	nonEmpty bool
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index into toks, -1 if none
}

func newAddedMatcher(toks []*AddedToken, patterns []string) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{tok: -1}}, only: -1}
	firsts := 0
	for i, p := range patterns {
		if p == "" {
			continue
		}
		m.nonEmpty = true
		if !m.first[p[0]] {
			m.first[p[0]] = true
			firsts++
			m.only = int(p[0])
		}
		n := int32(0)
		for k := 0; k < len(p); k++ {
			if m.nodes[n].next == nil {
				m.nodes[n].next = make(map[byte]int32)
			}
			c, ok := m.nodes[n].next[p[k]]
			if !ok {
				c = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{tok: -1})
				m.nodes[n].next[p[k]] = c
			}
			n = c
		}
		if m.nodes[n].tok < 0 { // first declaration wins on duplicates
			m.nodes[n].tok = int32(i)
		}
	}
	m.toks = toks
	if firsts != 1 {
		m.only = -1
	}
	return m
}

// longestAt returns the longest token matching at s[i:], or (-1, 0).
func (m *addedMatcher) longestAt(s string, i int) (tok int, end int) {
	tok, n := -1, int32(0)
	for k := i; k < len(s); k++ {
		c, ok := m.nodes[n].next[s[k]]
		if !ok {
			break
		}
		n = c
		if t := m.nodes[n].tok; t >= 0 {
			tok, end = int(t), k+1
		}
	}
	return tok, end
}

// split calls fn for each piece of s: either text (id < 0) or an added token.
// With skipSpecial, tokens marked special are not matched (HF's
// encode_special_tokens / split_special_tokens).
func (m *addedMatcher) split(s string, skipSpecial bool, fn func(piece string, id int)) {
	if m == nil || !m.nonEmpty || s == "" {
		fn(s, -1)
		return
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if m.only >= 0 {
			j := indexByteFrom(s, i, byte(m.only))
			if j < 0 {
				break
			}
			i = j
		} else if !m.first[s[i]] {
			i++
			continue
		}
		ti, stop := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		t := m.toks[ti]
		start := i
		// A discarded match still consumes its text, as in HF (whose
		// Aho-Corasick iteration resumes after each match).
		if skipSpecial && t.Special {
			i = stop
			continue
		}
		if t.SingleWord {
			startOK := start == 0 || !endsWithWord(s[:start])
			stopOK := stop == len(s) || !startsWithWord(s[stop:])
			if !startOK || !stopOK {
				i = stop
				continue
			}
		}
		if t.LStrip {
			ns := spaceLeftmostAtEnd(s[:start])
			start = max(ns, startOffset)
		}
		if t.RStrip {
			stop += spaceRightmostAtStart(s[stop:])
		}
		if startOffset < start {
			fn(s[startOffset:start], -1)
		}
		fn(s[start:stop], t.ID)
		startOffset = stop
		i = stop
	}
	if startOffset < len(s) {
		fn(s[startOffset:], -1)
	}
}

func indexByteFrom(s string, i int, c byte) int {
	j := strings.IndexByte(s[i:], c)
	if j < 0 {
		return -1
	}
	return i + j
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordRune(r)
}

// spaceLeftmostAtEnd returns the offset where the trailing whitespace of s starts.
func spaceLeftmostAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= w
	}
	return i
}

// spaceRightmostAtStart returns the length of the leading whitespace of s.
func spaceRightmostAtStart(s string) int {
	for i, r := range s {
		if !unicode.IsSpace(r) {
			return i
		}
	}
	return len(s)
}
