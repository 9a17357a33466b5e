package infer

import (
	"strings"

	"flywheel/internal/engine/tokenizer"
)

// textOutput turns one choice's tokens into output text: incremental
// detokenisation, then the stop strings, holding back text that may begin
// one.
type textOutput struct {
	dec  *tokenizer.StreamDecoder
	stop []string
	held string // text held back while it may begin a stop string
}

// add decodes tok (skip: a special token with no text) and returns the text
// safe to output now and whether a stop string was found; the text up to it
// is output, the stop string and what follows are dropped.
func (t *textOutput) add(tok int, skip bool) (string, bool) {
	var text string
	if !skip {
		text = t.dec.Add(tok)
	}
	if len(t.stop) == 0 {
		return text, false
	}
	return t.filter(text)
}

// filter passes text through the stop-string matcher (see add).
func (t *textOutput) filter(delta string) (string, bool) {
	t.held += delta
	best := -1
	for _, stop := range t.stop {
		if i := strings.Index(t.held, stop); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	if best >= 0 {
		out := t.held[:best]
		t.held = ""
		return out, true
	}
	keep := HeldPrefix(t.held, t.stop...)
	out := t.held[:len(t.held)-keep]
	t.held = t.held[len(t.held)-keep:]
	return out, false
}

// flush returns what is held back (bytes of an incomplete character, a
// possible start of a stop string): the choice ended without a stop string.
func (t *textOutput) flush() string {
	s := t.dec.Flush() + t.held
	t.held = ""
	return s
}

// HeldPrefix is the length of the longest suffix of s that is a proper
// prefix of one of tags: text a stream must hold back while it may still
// become one of them.
func HeldPrefix(s string, tags ...string) int {
	keep := 0
	for _, tag := range tags {
		for k := min(len(s), len(tag)-1); k > keep; k-- {
			if strings.HasSuffix(s, tag[:k]) {
				keep = k
				break
			}
		}
	}
	return keep
}
