package serve

import (
	"encoding/json"
	"errors"
	"math"
	"sort"

	"flywheel/internal/httpx"
	"flywheel/internal/infer"
)

// jsonVocab indexes a model's vocabulary for JSON grammar masks: a trie of
// the bytes of every token the grammar may use (special tokens never), and
// the same for the tokens that are not plain string text, which is all a
// string body needs walked (plain ones fit there as a whole).
type jsonVocab struct {
	all, nonPlain *vocabTrie
	plain         []int32 // tokens that are plain string text (plainString)
	bytes         [][]byte
}

// vocabTrie is a prefix tree of token bytes.
type vocabTrie struct {
	nodes []trieNode
}

type trieNode struct {
	edges []trieEdge // by byte, ascending
	ends  []int32    // tokens whose bytes end here
}

type trieEdge struct {
	b  byte
	to int32
}

func newVocabTrie(ids []int32, bytesOf [][]byte) *vocabTrie {
	sorted := append([]int32(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return string(bytesOf[sorted[i]]) < string(bytesOf[sorted[j]]) })
	t := &vocabTrie{nodes: []trieNode{{}}}
	for _, id := range sorted {
		n := int32(0)
		for _, b := range bytesOf[id] {
			es := t.nodes[n].edges
			if k := len(es) - 1; k >= 0 && es[k].b == b {
				n = es[k].to // sorted input: a shared prefix is always the last edge
				continue
			}
			t.nodes = append(t.nodes, trieNode{})
			to := int32(len(t.nodes) - 1)
			t.nodes[n].edges = append(t.nodes[n].edges, trieEdge{b, to})
			n = to
		}
		t.nodes[n].ends = append(t.nodes[n].ends, id)
	}
	return t
}

func (l *servedModel) jsonVocab() *jsonVocab {
	l.jvOnce.Do(func() {
		n := min(l.tok.VocabSize(), l.m.Config.VocabSize)
		v := &jsonVocab{bytes: make([][]byte, n)}
		var ids, nonPlain []int32
		for id := 0; id < n; id++ {
			if l.rules.IsEOS(id) || l.tok.IsSpecial(id) || l.rules.Kept(id) { // markers only where the grammar puts them
				continue
			}
			b := l.tok.TokenBytes(id)
			if len(b) == 0 {
				continue
			}
			v.bytes[id] = b
			ids = append(ids, int32(id))
			if plainString(b) {
				v.plain = append(v.plain, int32(id))
			} else {
				nonPlain = append(nonPlain, int32(id))
			}
		}
		v.all = newVocabTrie(ids, v.bytes)
		v.nonPlain = newVocabTrie(nonPlain, v.bytes)
		l.jv = v
	})
	return l.jv
}

// jsonConstraint generates one JSON document of a grammar (see
// jsongrammar.go) as an infer.Constraint.
type jsonConstraint struct {
	lm     *servedModel
	v      *jsonVocab
	state  jstate
	left   int // tokens the choice may still generate, this one included
	masked []float32
	st     stepper
	work   int // stack steps left to this mask's trie walk
}

// maskWork bounds the grammar steps (a byte fed to one stack) of one mask:
// a schema whose anyOf branches stay alive side by side multiplies the
// walk by their number, and a mask runs in the batch's sampling step. Past
// it the walk stops: the tokens found so far (the single-byte ones always
// among them, so the document can still be completed) are the ones
// allowed.
const maskWork = 400_000

var _ infer.Constraint = (*jsonConstraint)(nil)

// newJSONConstraint returns the per-choice factory of root's constraint for
// choices of at most maxTokens tokens.
func newJSONConstraint(lm *servedModel, root *jnode, maxTokens int) func() infer.Constraint {
	v := lm.jsonVocab()
	return func() infer.Constraint {
		return &jsonConstraint{lm: lm, v: v, state: jstate{push(nil, root)}, left: maxTokens}
	}
}

// Advance feeds the token's bytes; an end-of-turn token after a complete
// document ends the choice.
func (c *jsonConstraint) Advance(tok int) bool {
	c.left--
	if c.lm.rules.IsEOS(tok) && c.state.complete() {
		return true
	}
	c.state = c.state.feedBytes(c.lm.tok.TokenBytes(tok))
	return false
}

// Mask leaves the logits of the tokens that keep the output a prefix of a
// document of the grammar that can still be completed within the tokens
// left; the end-of-turn tokens once the document is complete.
func (c *jsonConstraint) Mask(lg []float32) []float32 {
	if cap(c.masked) < len(lg) {
		c.masked = make([]float32, len(lg))
	}
	m := c.masked[:len(lg)]
	neg := float32(math.Inf(-1))
	for i := range m {
		m[i] = neg
	}
	any := false
	allow := func(id int32) {
		if int(id) < len(m) {
			m[id] = lg[id]
			any = true
		}
	}
	// Bytes (at worst tokens) left after this token; when even the
	// shortest completion no longer fits (a max_tokens below it), tokens
	// that shorten it are still allowed, so the output gets as far as it
	// can.
	budget := max(c.left-1, c.state.minCost()-1)
	if c.state.complete() {
		for _, id := range c.lm.rules.TurnEnd() {
			allow(int32(id))
		}
	}
	if id, ok := c.lm.markerFor(c.state.pendingLiteral()); ok {
		// A tool-call marker (e.g. <tool_call>, an added token) is
		// produced as its own token, as the template renders it, never
		// spelled out in pieces.
		allow(int32(id))
	} else if len(c.state) > 0 && !c.state.closed() {
		t := c.v.all
		if c.state.stringBody() {
			if c.state.minCost() <= budget {
				for _, id := range c.v.plain {
					allow(id)
				}
			}
			t = c.v.nonPlain
		}
		c.work = maskWork
		c.walkSingleBytes(t, budget, m, lg, &any)
		c.walk(t, 0, c.state, budget, m, lg, &any)
	}
	if !any {
		// Nothing fits (a vocabulary without the bytes the grammar needs):
		// end the choice rather than break the grammar.
		for _, id := range c.lm.rules.TurnEnd() {
			allow(int32(id))
		}
	}
	return m
}

// walk allows the tokens under trie node n from state js.
func (c *jsonConstraint) walk(t *vocabTrie, n int32, js jstate, budget int, m, lg []float32, any *bool) {
	node := &t.nodes[n]
	if n != 0 && len(node.ends) > 0 && js.minCost() <= budget {
		for _, id := range node.ends {
			if int(id) < len(m) {
				m[id] = lg[id]
				*any = true
			}
		}
	}
	for _, e := range node.edges {
		if c.work <= 0 {
			return
		}
		c.work -= len(js)
		next := js.feedByte(&c.st, e.b)
		if len(next) > 0 {
			c.walk(t, e.to, next, budget, m, lg, any)
		}
	}
}

// walkSingleBytes allows the single-byte tokens that fit, before the walk
// whose work is bounded: the next byte of the shortest completion is always
// among them.
func (c *jsonConstraint) walkSingleBytes(t *vocabTrie, budget int, m, lg []float32, any *bool) {
	for _, e := range t.nodes[0].edges {
		ends := t.nodes[e.to].ends
		if len(ends) == 0 {
			continue
		}
		next := c.state.feedByte(&c.st, e.b)
		if len(next) > 0 && next.minCost() <= budget {
			for _, id := range ends {
				if int(id) < len(m) {
					m[id] = lg[id]
					*any = true
				}
			}
		}
	}
}

// parseResponseFormat returns the grammar of response_format: nil for
// text (or none), any JSON object for json_object, the schema's for
// json_schema (strict or not, see jsonschema.go).
func parseResponseFormat(raw json.RawMessage) (*jnode, error) {
	if isNull(raw) {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, httpx.Invalid("response_format", "invalid_type", "response_format: expected an object with a type")
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return anyGrammar().object, nil
	case "json_schema":
		if rf.JSONSchema == nil {
			return nil, httpx.Invalid("response_format.json_schema", "missing_field", "response_format.json_schema is required when type is \"json_schema\"")
		}
		if isNull(rf.JSONSchema.Schema) {
			return anyGrammar().object, nil
		}
		strict := rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict
		root, err := compileSchema(rf.JSONSchema.Schema, strict, "response_format.json_schema.schema")
		if err != nil {
			return nil, schemaHTTPError(err)
		}
		return root, nil
	}
	return nil, unsupported("response_format.type", "response_format type %q is not supported (text, json_object, json_schema)", rf.Type)
}

// schemaHTTPError is the 400 of a schema the grammar cannot enforce, naming
// the schema path.
func schemaHTTPError(err error) error {
	var se *schemaError
	if errors.As(err, &se) {
		return httpx.Invalid(se.path, "unsupported_schema", "%s", se.Error())
	}
	return err
}
