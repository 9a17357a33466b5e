package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"flywheel/internal/jsonlex"

	"golang.org/x/text/unicode/norm"
)

type fileJSON struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *modelJSON      `json:"model"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// componentJSON holds the fields of any normalizer, pre-tokenizer,
// post-processor or decoder we support.
type componentJSON struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	// Digits
	IndividualDigits bool `json:"individual_digits"`
	Single           []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
	Sep []json.RawMessage `json:"sep"`
	Cls []json.RawMessage `json:"cls"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func parseComponent(raw json.RawMessage, what string) (*componentJSON, error) {
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("malformed %s: %w", what, err)
	}
	return &c, nil
}

// newReader reads a part of tokenizer.json: the big parts (vocab and merges:
// hundreds of thousands of strings) are walked with jsonlex, several times
// faster than encoding/json's reflection; the small parts are handed to
// encoding/json as raw slices. Strings decode as encoding/json's do (invalid
// UTF-8 and lone surrogates become U+FFFD).
func newReader(data []byte) *jsonlex.Reader {
	return &jsonlex.Reader{Data: data, Mode: jsonlex.Replace, MaxDepth: 10000}
}

// readInt reads a JSON integer (a token id).
func readInt(sc *jsonlex.Reader) (int, error) {
	text, isFloat, err := sc.Number()
	if err != nil {
		return 0, err
	}
	n, perr := strconv.Atoi(string(text))
	if isFloat || perr != nil {
		return 0, fmt.Errorf("%s: want an integer", text)
	}
	return n, nil
}

// rawStr reads a merge's token: its bytes as they are in the input when it
// has no escapes (aliasing the input, so not to be kept), else decoded.
func rawStr(sc *jsonlex.Reader) ([]byte, error) {
	raw, esc, err := sc.RawString()
	if esc {
		raw = jsonlex.AppendUnquoted(nil, raw, jsonlex.Replace)
	}
	return raw, err
}

// parseFile reads the top level of tokenizer.json, keeping the big model
// vocab and merges as raw slices.
func parseFile(data []byte) (*fileJSON, error) {
	f := &fileJSON{}
	sc := newReader(data)
	if sc.Peek() != '{' {
		return nil, errors.New("malformed tokenizer.json: not a JSON object")
	}
	err := sc.Object(func(key string) error {
		if key == "model" {
			if sc.Peek() == 'n' {
				_, err := sc.Skip()
				return err
			}
			f.Model = &modelJSON{}
			return sc.Object(func(k string) error {
				raw, err := sc.Skip()
				if err != nil {
					return err
				}
				var dst any
				switch k {
				case "type":
					dst = &f.Model.Type
				case "dropout":
					dst = &f.Model.Dropout
				case "continuing_subword_prefix":
					dst = &f.Model.ContinuingSubwordPrefix
				case "end_of_word_suffix":
					dst = &f.Model.EndOfWordSuffix
				case "ignore_merges":
					dst = &f.Model.IgnoreMerges
				case "vocab":
					f.Model.Vocab = raw
				case "merges":
					f.Model.Merges = raw
				}
				if dst != nil {
					if err := json.Unmarshal(raw, dst); err != nil {
						return fmt.Errorf("model.%s: %w", k, err)
					}
				}
				return nil
			})
		}
		raw, err := sc.Skip()
		if err != nil {
			return err
		}
		switch key {
		case "added_tokens":
			if err := json.Unmarshal(raw, &f.AddedTokens); err != nil {
				return fmt.Errorf("added_tokens: %w", err)
			}
		case "normalizer":
			f.Normalizer = raw
		case "pre_tokenizer":
			f.PreTokenizer = raw
		case "post_processor":
			f.PostProcessor = raw
		case "decoder":
			f.Decoder = raw
		}
		return nil
	})
	if err == nil {
		err = sc.End()
	}
	if err != nil {
		return nil, fmt.Errorf("malformed tokenizer.json: %w", err)
	}
	return f, nil
}

// parseVocab reads the BPE vocab object {"token": id, ...}.
func parseVocab(raw []byte) (map[string]int, error) {
	sc := newReader(raw)
	if sc.Peek() != '{' {
		return nil, errors.New("malformed BPE vocab: want an object of token -> id")
	}
	vocab := make(map[string]int, len(raw)/16)
	err := sc.Object(func(tok string) error {
		id, err := readInt(sc)
		if err != nil {
			return fmt.Errorf("id of %q: %w", tok, err)
		}
		vocab[tok] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("malformed BPE vocab: %w", err)
	}
	return vocab, nil
}

func build(data []byte, noFast bool) (*Tokenizer, error) {
	f, err := parseFile(data)
	if err != nil {
		return nil, err
	}
	if f.Model == nil {
		return nil, errors.New("malformed tokenizer.json: no \"model\"")
	}
	m := f.Model
	typ := m.Type
	if typ == "" {
		switch {
		case !isNull(m.Merges):
			typ = "BPE"
		case bytes.HasPrefix(bytes.TrimSpace(m.Vocab), []byte("[")):
			typ = "Unigram"
		default:
			return nil, errors.New("malformed tokenizer.json: model has no \"type\" and is not recognizable as BPE")
		}
	}
	if typ != "BPE" {
		return nil, fmt.Errorf("unsupported model type %q (only byte-level BPE is supported)", typ)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return nil, errors.New("unsupported BPE option: dropout")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, errors.New("unsupported BPE option: continuing_subword_prefix")
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, errors.New("unsupported BPE option: end_of_word_suffix")
	}
	if isNull(m.Vocab) {
		return nil, errors.New("malformed tokenizer.json: BPE model has no vocab")
	}

	t := &Tokenizer{}
	if t.strVocab, err = parseVocab(m.Vocab); err != nil {
		return nil, err
	}

	// Pre-tokenizer (must contain ByteLevel: we only do byte-level BPE).
	byteLevel := false
	if !isNull(f.PreTokenizer) {
		steps, bl, err := parsePreTokenizer(f.PreTokenizer, noFast)
		if err != nil {
			return nil, err
		}
		t.steps, byteLevel = steps, bl
	}
	if !byteLevel {
		return nil, errors.New("unsupported tokenizer: BPE without a ByteLevel pre-tokenizer (only byte-level BPE is supported)")
	}

	// Normalizer.
	if !isNull(f.Normalizer) {
		fn, err := parseNormalizer(f.Normalizer)
		if err != nil {
			return nil, err
		}
		t.normalize = fn
	}

	// Decoder.
	if isNull(f.Decoder) {
		t.joinDec = true
	} else if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}

	// Id space.
	maxID := -1
	for tok, id := range t.strVocab {
		if id < 0 {
			return nil, fmt.Errorf("malformed BPE vocab: negative id %d for %q", id, tok)
		}
		maxID = max(maxID, id)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("malformed added token %q: negative id", a.Content)
		}
		maxID = max(maxID, a.ID)
	}
	if maxID >= 1<<31-1 {
		return nil, errors.New("malformed tokenizer.json: id too large")
	}
	t.n = maxID + 1
	t.tokens = make([]string, t.n)
	t.present = make([]bool, t.n)
	t.special = make([]bool, t.n)

	// Model tables.
	mod := &t.model
	mod.ignoreMerges = m.IgnoreMerges
	if mod.ignoreMerges { // the raw-bytes vocabulary is only needed for ignore_merges
		mod.vocab = make(map[string]int32, len(t.strVocab))
	}
	var buf []byte
	for tok, id := range t.strVocab {
		t.tokens[id], t.present[id] = tok, true
		if mod.ignoreMerges {
			var ok bool
			if buf, ok = appendByteLevelDecode(buf[:0], tok); ok {
				mod.vocab[string(buf)] = int32(id)
			}
		}
	}
	for b := range 256 {
		mod.byteIDs[b] = -1
		if id, ok := t.strVocab[string(byteToRune[b])]; ok {
			mod.byteIDs[b] = int32(id)
		}
	}
	if err := t.parseMerges(m.Merges); err != nil {
		return nil, err
	}
	mod.cache.init()

	// Added tokens.
	t.added = append([]AddedToken(nil), f.AddedTokens...)
	sortAdded(t.added)
	t.addedByC = make(map[string]int, len(t.added))
	var rawToks, normToks []*AddedToken
	var rawPats, normPats []string
	for i := range t.added {
		a := &t.added[i]
		if _, dup := t.addedByC[a.Content]; !dup {
			t.addedByC[a.Content] = i
		}
		t.tokens[a.ID], t.present[a.ID] = a.Content, true
		t.special[a.ID] = a.Special
		if a.Normalized {
			p := a.Content
			if t.normalize != nil {
				p = t.normalize(p)
			}
			normToks, normPats = append(normToks, a), append(normPats, p)
		} else {
			rawToks, rawPats = append(rawToks, a), append(rawPats, a.Content)
		}
	}
	if len(rawToks) > 0 {
		t.rawAdded = newAddedMatcher(rawToks, rawPats)
	}
	if len(normToks) > 0 {
		t.normAdded = newAddedMatcher(normToks, normPats)
	}

	// Token bytes.
	t.tokOff = make([]uint32, t.n+1)
	t.tokBytes = make([]byte, 0, len(m.Vocab)/3)
	for id := 0; id < t.n; id++ {
		t.tokOff[id] = uint32(len(t.tokBytes))
		if !t.present[id] {
			continue
		}
		tok := t.tokens[id]
		if !t.joinDec {
			var ok bool
			if t.tokBytes, ok = appendByteLevelDecode(t.tokBytes, tok); ok {
				continue
			}
		}
		t.tokBytes = append(t.tokBytes, tok...)
	}
	t.tokOff[t.n] = uint32(len(t.tokBytes))

	// Post-processor.
	if !isNull(f.PostProcessor) {
		pre, suf, err := t.parsePostProcessor(f.PostProcessor)
		if err != nil {
			return nil, err
		}
		t.prefix, t.suffix = pre, suf
	}
	return t, nil
}

func (t *Tokenizer) parseMerges(raw json.RawMessage) error {
	mod := &t.model
	mod.merges = make(map[uint64]uint64, len(raw)/12)
	if isNull(raw) {
		return nil
	}
	sc := newReader(raw)
	rank := 0
	var buf []byte
	add := func(a, b []byte) error {
		ia, ok1 := t.strVocab[string(a)]
		ib, ok2 := t.strVocab[string(b)]
		buf = append(append(buf[:0], a...), b...)
		ic, ok3 := t.strVocab[string(buf)]
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("merge %d (%q, %q): token not in vocabulary", rank, a, b)
		}
		mod.merges[pairKey(int32(ia), int32(ib))] = uint64(rank)<<32 | uint64(uint32(ic))
		rank++
		return nil
	}
	err := sc.Array(func(int) error {
		if sc.Peek() == '[' {
			var pair [2][]byte
			n := 0
			err := sc.Array(func(int) error {
				s, err := rawStr(sc)
				if err != nil {
					return err
				}
				if n < 2 {
					pair[n] = s
				}
				n++
				return nil
			})
			if err != nil {
				return err
			}
			if n != 2 {
				return fmt.Errorf("merge %d: want 2 tokens, got %d", rank, n)
			}
			return add(pair[0], pair[1])
		}
		s, err := rawStr(sc)
		if err != nil {
			return err
		}
		sp := bytes.IndexByte(s, ' ')
		if sp < 0 || bytes.IndexByte(s[sp+1:], ' ') >= 0 {
			return fmt.Errorf("merge %d %q: want two tokens separated by one space", rank, s)
		}
		return add(s[:sp], s[sp+1:])
	})
	if err != nil {
		return fmt.Errorf("malformed BPE merge: %w", err)
	}
	return nil
}

func parseNormalizer(raw json.RawMessage) (func(string) string, error) {
	c, err := parseComponent(raw, "normalizer")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "NFC":
		initNFCInert()
		return nfcString, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Sequence":
		var fns []func(string) string
		for _, sub := range c.Normalizers {
			fn, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			fns = append(fns, fn)
		}
		return func(s string) string {
			for _, fn := range fns {
				s = fn(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", c.Type)
}

func parsePreTokenizer(raw json.RawMessage, noFast bool) (steps []preStep, byteLevel bool, err error) {
	c, err := parseComponent(raw, "pre_tokenizer")
	if err != nil {
		return nil, false, err
	}
	switch c.Type {
	case "Sequence":
		for _, sub := range c.Pretokenizers {
			s, bl, err := parsePreTokenizer(sub, noFast)
			if err != nil {
				return nil, false, err
			}
			steps = append(steps, s...)
			byteLevel = byteLevel || bl
		}
		return steps, byteLevel, nil
	case "Split":
		if c.Pattern == nil || (c.Pattern.Regex == nil) == (c.Pattern.String == nil) {
			return nil, false, errors.New("malformed Split pre-tokenizer: pattern must have one of Regex or String")
		}
		beh, err := parseBehavior(c.Behavior)
		if err != nil {
			return nil, false, err
		}
		st := &splitStep{behavior: beh, invert: c.Invert}
		if c.Pattern.String != nil {
			st.m = literalMatcher{*c.Pattern.String}
		} else if st.m, err = newMatcher(*c.Pattern.Regex, noFast); err != nil {
			return nil, false, err
		}
		return []preStep{st}, false, nil
	case "Digits":
		beh := behContiguous
		if c.IndividualDigits {
			beh = behIsolated
		}
		return []preStep{&splitStep{m: digitsMatcher{}, behavior: beh}}, false, nil
	case "ByteLevel":
		// HF's ByteLevel defaults: add_prefix_space true, use_regex true.
		if c.AddPrefixSpace == nil || *c.AddPrefixSpace {
			steps = append(steps, prefixSpaceStep{})
		}
		if c.UseRegex == nil || *c.UseRegex {
			m, err := newMatcher(gpt2Pattern, noFast)
			if err != nil {
				return nil, false, err
			}
			steps = append(steps, &splitStep{m: m, behavior: behIsolated})
		}
		return steps, true, nil
	}
	return nil, false, fmt.Errorf("unsupported pre_tokenizer type %q", c.Type)
}

func newMatcher(pattern string, noFast bool) (matcher, error) {
	if !noFast {
		if fm := fastMatcherFor(pattern); fm != nil {
			return fm, nil
		}
	}
	return newRegexMatcher(pattern)
}

func checkDecoder(raw json.RawMessage) error {
	c, err := parseComponent(raw, "decoder")
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(c.Decoders) == 1 {
			return checkDecoder(c.Decoders[0])
		}
	}
	return fmt.Errorf("unsupported decoder type %q (only ByteLevel is supported)", c.Type)
}

// parsePostProcessor returns the ids added before and after the sequence.
func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) (prefix, suffix []int, err error) {
	c, err := parseComponent(raw, "post_processor")
	if err != nil {
		return nil, nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for _, sub := range c.Processors {
			p, s, err := t.parsePostProcessor(sub)
			if err != nil {
				return nil, nil, err
			}
			prefix = append(append([]int(nil), p...), prefix...)
			suffix = append(suffix, s...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, it := range c.Single {
			switch {
			case it.Sequence != nil:
				if seen {
					return nil, nil, errors.New("unsupported TemplateProcessing: sequence appears twice in single template")
				}
				seen = true
			case it.SpecialToken != nil:
				st, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("malformed TemplateProcessing: special token %q not in special_tokens", it.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if !t.valid(id) {
						return nil, nil, fmt.Errorf("malformed TemplateProcessing: special token id %d out of vocabulary", id)
					}
				}
				if seen {
					suffix = append(suffix, st.IDs...)
				} else {
					prefix = append(prefix, st.IDs...)
				}
			default:
				return nil, nil, errors.New("malformed TemplateProcessing: template piece is neither SpecialToken nor Sequence")
			}
		}
		if !seen {
			return nil, nil, errors.New("malformed TemplateProcessing: single template lacks the sequence")
		}
		return prefix, suffix, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenRef(c.Cls, "cls")
		if err != nil {
			return nil, nil, err
		}
		sep, err := tokenRef(c.Sep, "sep")
		if err != nil {
			return nil, nil, err
		}
		return []int{cls}, []int{sep}, nil
	}
	return nil, nil, fmt.Errorf("unsupported post_processor type %q", c.Type)
}

func tokenRef(v []json.RawMessage, what string) (int, error) {
	if len(v) != 2 {
		return 0, fmt.Errorf("malformed post_processor %s: want [token, id]", what)
	}
	id, err := strconv.Atoi(string(bytes.TrimSpace(v[1])))
	if err != nil {
		return 0, fmt.Errorf("malformed post_processor %s id: %w", what, err)
	}
	return id, nil
}
