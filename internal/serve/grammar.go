package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	"flywheel/internal/infer"
)

// Forced tool calls are generated under a byte-level grammar: every token the
// model may sample must keep the output a prefix of a valid tool call of the
// model's tool-call syntax whose arguments follow the function's JSON schema.
// The grammar is bounded (strings up to maxGrammarString printable ASCII
// bytes, numbers up to a few digits, arrays and free-form objects up to a few
// items, nesting up to a small depth), so even a model with random weights
// completes a valid call within a bounded number of tokens. Keys and
// punctuation are fixed literals in json.dumps spacing ({"a": 1, "b": 2}).

const (
	maxGrammarString = 16
	maxGrammarItems  = 3
	maxGrammarDigits = 6
	maxGrammarDepth  = 2
	maxFrames        = 24
)

type gkind uint8

const (
	gLit    gkind = iota // exact bytes
	gSeq                 // items in order
	gChoice              // one of several literals, each followed by its own node
	gStr                 // JSON string (quotes included), restricted charset, bounded
	gNum                 // JSON number; intOnly for integers
	gList                // open, items separated by ", ", close; up to max items
	gAny                 // any JSON value, dispatched on its first byte
)

type gnode struct {
	kind    gkind
	lit     string
	items   []*gnode
	opts    []gopt
	intOnly bool
	open    byte
	close   byte
	item    *gnode
	max     int
	depth   int
}

type gopt struct {
	lit  string
	then *gnode // nil: nothing follows
}

func glit(s string) *gnode { return &gnode{kind: gLit, lit: s} }

// gseq builds a sequence, merging adjacent literals and flattening.
func gseq(items ...*gnode) *gnode {
	var out []*gnode
	for _, it := range items {
		if it == nil {
			continue
		}
		if it.kind == gSeq {
			for _, sub := range it.items {
				out = appendNode(out, sub)
			}
			continue
		}
		out = appendNode(out, it)
	}
	if len(out) == 1 {
		return out[0]
	}
	return &gnode{kind: gSeq, items: out}
}

func appendNode(out []*gnode, n *gnode) []*gnode {
	if n.kind == gLit && n.lit == "" {
		return out
	}
	if n.kind == gLit && len(out) > 0 && out[len(out)-1].kind == gLit {
		out[len(out)-1] = glit(out[len(out)-1].lit + n.lit)
		return out
	}
	return append(out, n)
}

type gframe struct {
	n     *gnode
	i     int    // lit/choice position, seq index, string length, digit count, list count
	st    uint8  // sub-state
	alive uint64 // gChoice: candidates still matching
}

// gmachine is the state of a grammar match. It is a value type: copying it
// (for a token trial) allocates nothing.
type gmachine struct {
	st [maxFrames]gframe
	d  int
	ok bool // false once a push overflowed
}

func newMachine(root *gnode) gmachine {
	var m gmachine
	m.ok = true
	m.push(root)
	return m
}

func (m *gmachine) push(n *gnode) {
	if m.d == maxFrames {
		m.ok = false
		return
	}
	f := gframe{n: n}
	if n.kind == gChoice {
		if len(n.opts) >= 64 {
			panic("grammar: too many choices")
		}
		f.alive = (uint64(1) << uint(len(n.opts))) - 1
	}
	m.st[m.d] = f
	m.d++
}

// done reports whether the grammar is complete: nothing more may follow.
func (m *gmachine) done() bool { return m.ok && m.d == 0 }

// canStop reports whether the output so far is a complete match (numbers
// and enum values may end here or continue).
func (m *gmachine) canStop() bool {
	if !m.ok {
		return false
	}
	for i := 0; i < m.d; i++ {
		if !frameCanEnd(&m.st[i]) {
			return false
		}
	}
	return true
}

func frameCanEnd(f *gframe) bool {
	switch f.n.kind {
	case gLit:
		return f.i == len(f.n.lit)
	case gSeq:
		return f.i == len(f.n.items)
	case gNum:
		return numCanEnd(f)
	case gChoice:
		for k, o := range f.n.opts {
			if f.alive&(1<<uint(k)) != 0 && len(o.lit) == f.i && o.then == nil {
				return true
			}
		}
	}
	return false
}

// number states
const (
	nStart = iota // nothing yet
	nMinus        // after '-'
	nZero         // after a leading 0
	nInt          // in integer digits
	nDot          // after '.'
	nFrac         // in fraction digits
)

func numCanEnd(f *gframe) bool {
	return f.st == nZero || f.st == nInt || f.st == nFrac
}

// settle pops frames that are complete and can take nothing more.
func (m *gmachine) settle() {
	for m.d > 0 {
		f := &m.st[m.d-1]
		switch f.n.kind {
		case gLit:
			if f.i < len(f.n.lit) {
				return
			}
		case gSeq:
			if f.i < len(f.n.items) {
				return
			}
		default:
			return
		}
		m.d--
	}
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// feed consumes one byte; false means the byte is not allowed here.
func (m *gmachine) feed(b byte) bool {
	for m.ok && m.d > 0 {
		f := &m.st[m.d-1]
		n := f.n
		switch n.kind {
		case gSeq:
			child := n.items[f.i]
			f.i++
			m.push(child)
			continue
		case gLit:
			if n.lit[f.i] != b {
				return false
			}
			f.i++
			m.settle()
			return true
		case gStr:
			if f.st == 0 {
				if b != '"' {
					return false
				}
				f.st = 1
				return true
			}
			if b == '"' {
				m.d--
				m.settle()
				return true
			}
			if b >= 0x20 && b < 0x7f && b != '\\' && f.i < n.max {
				f.i++
				return true
			}
			return false
		case gNum:
			if m.numFeed(f, b) {
				return true
			}
			if !numCanEnd(f) {
				return false
			}
			m.d--
			m.settle()
			continue
		case gChoice:
			var next uint64
			complete := -1
			for k, o := range n.opts {
				bit := uint64(1) << uint(k)
				if f.alive&bit == 0 {
					continue
				}
				if f.i < len(o.lit) && o.lit[f.i] == b {
					next |= bit
				} else if f.i == len(o.lit) {
					complete = k
				}
			}
			if next == 0 {
				if complete < 0 {
					return false
				}
				m.finishChoice(complete)
				continue
			}
			f.alive = next
			f.i++
			// a single survivor fully matched: commit to it
			if next&(next-1) == 0 {
				k := 0
				for next>>uint(k)&1 == 0 {
					k++
				}
				if len(n.opts[k].lit) == f.i {
					m.finishChoice(k)
				}
			}
			return true
		case gList:
			switch f.st {
			case 0: // expect open
				if b != n.open {
					return false
				}
				f.st = 1
				return true
			case 1: // after open: close or first item
				if b == n.close {
					m.d--
					m.settle()
					return true
				}
				if f.i >= n.max {
					return false
				}
				f.i++
				f.st = 2
				m.push(n.item)
				continue
			case 2: // after an item: ", " or close
				if b == n.close {
					m.d--
					m.settle()
					return true
				}
				if b == ',' && f.i < n.max {
					f.st = 3
					return true
				}
				return false
			case 3: // after ','
				if b != ' ' {
					return false
				}
				f.st = 4
				return true
			case 4: // next item
				f.i++
				f.st = 2
				m.push(n.item)
				continue
			}
		case gAny:
			var next *gnode
			switch {
			case b == '"':
				next = strNode
			case b == '-' || isDigit(b):
				next = numNode
			case b == 't' || b == 'f':
				next = boolNode
			case b == 'n':
				next = nullNode
			case b == '{' && n.depth > 0:
				next = anyObjNodes[n.depth]
			case b == '[' && n.depth > 0:
				next = anyArrNodes[n.depth]
			default:
				return false
			}
			m.d--
			m.push(next)
			continue
		}
		return false
	}
	return false
}

func (m *gmachine) finishChoice(k int) {
	f := &m.st[m.d-1]
	then := f.n.opts[k].then
	m.d--
	if then != nil {
		m.push(then)
	}
	m.settle()
}

func (m *gmachine) numFeed(f *gframe, b byte) bool {
	switch f.st {
	case nStart, nMinus:
		if b == '-' && f.st == nStart {
			f.st = nMinus
			return true
		}
		if b == '0' {
			f.st = nZero
			f.i = 1
			return true
		}
		if isDigit(b) {
			f.st = nInt
			f.i = 1
			return true
		}
	case nZero, nInt:
		if f.st == nInt && isDigit(b) && f.i < maxGrammarDigits {
			f.i++
			return true
		}
		if b == '.' && !f.n.intOnly {
			f.st = nDot
			f.i = 0
			return true
		}
	case nDot, nFrac:
		if isDigit(b) && f.i < maxGrammarDigits {
			f.st = nFrac
			f.i++
			return true
		}
	}
	return false
}

// pendingLiteral returns the literal text the grammar requires next ("" when
// the next bytes are not fixed).
func (m *gmachine) pendingLiteral() string {
	if !m.ok || m.d == 0 {
		return ""
	}
	f := &m.st[m.d-1]
	switch f.n.kind {
	case gLit:
		return f.n.lit[f.i:]
	case gSeq:
		if f.i < len(f.n.items) && f.n.items[f.i].kind == gLit {
			return f.n.items[f.i].lit
		}
	}
	return ""
}

// inString reports whether the machine is inside a string body, and how
// many more bytes the string may take.
func (m *gmachine) inString() (int, bool) {
	if !m.ok || m.d == 0 {
		return 0, false
	}
	f := &m.st[m.d-1]
	if f.n.kind != gStr || f.st != 1 {
		return 0, false
	}
	return f.n.max - f.i, true
}

// feedBytes feeds every byte of p; false when one is rejected.
func (m *gmachine) feedBytes(p []byte) bool {
	for _, b := range p {
		if !m.feed(b) {
			return false
		}
	}
	return len(p) > 0
}

var (
	strNode     = &gnode{kind: gStr, max: maxGrammarString}
	numNode     = &gnode{kind: gNum}
	intNode     = &gnode{kind: gNum, intOnly: true}
	boolNode    = &gnode{kind: gChoice, opts: []gopt{{lit: "true"}, {lit: "false"}}}
	nullNode    = glit("null")
	anyNodes    [maxGrammarDepth + 1]*gnode
	anyObjNodes [maxGrammarDepth + 1]*gnode
	anyArrNodes [maxGrammarDepth + 1]*gnode
)

func init() {
	for d := 0; d <= maxGrammarDepth; d++ {
		anyNodes[d] = &gnode{kind: gAny, depth: d}
		if d > 0 {
			anyArrNodes[d] = &gnode{kind: gList, open: '[', close: ']', max: maxGrammarItems, item: anyNodes[d-1]}
			entry := gseq(strNode, glit(": "), anyNodes[d-1])
			anyObjNodes[d] = &gnode{kind: gList, open: '{', close: '}', max: maxGrammarItems, item: entry}
		}
	}
}

// schemaNode compiles a JSON schema (the subset tools use) to a grammar node.
// Unknown or missing schemas accept any bounded JSON value.
func schemaNode(raw json.RawMessage, depth int) (*gnode, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "true" || string(raw) == "{}" {
		return anyNodes[min(depth, maxGrammarDepth)], nil
	}
	var s struct {
		Type       json.RawMessage   `json:"type"`
		Enum       []json.RawMessage `json:"enum"`
		Const      json.RawMessage   `json:"const"`
		Properties json.RawMessage   `json:"properties"`
		Required   []string          `json:"required"`
		Items      json.RawMessage   `json:"items"`
		AnyOf      []json.RawMessage `json:"anyOf"`
		OneOf      []json.RawMessage `json:"oneOf"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("invalid JSON schema: %v", err)
	}
	if len(s.Const) > 0 {
		return glit(compactJSON(s.Const)), nil
	}
	if len(s.Enum) > 0 {
		if len(s.Enum) > 63 {
			return nil, fmt.Errorf("enum with more than 63 values is not supported")
		}
		var opts []gopt
		for _, e := range s.Enum {
			opts = append(opts, gopt{lit: compactJSON(e)})
		}
		return &gnode{kind: gChoice, opts: opts}, nil
	}
	if len(s.AnyOf) > 0 {
		return schemaNode(s.AnyOf[0], depth)
	}
	if len(s.OneOf) > 0 {
		return schemaNode(s.OneOf[0], depth)
	}
	typ := ""
	if len(s.Type) > 0 {
		var one string
		var many []string
		if json.Unmarshal(s.Type, &one) == nil {
			typ = one
		} else if json.Unmarshal(s.Type, &many) == nil {
			for _, t := range many {
				if t != "null" {
					typ = t
					break
				}
			}
			if typ == "" && len(many) > 0 {
				typ = many[0]
			}
		}
	}
	if typ == "" && len(s.Properties) > 0 {
		typ = "object"
	}
	switch typ {
	case "string":
		return strNode, nil
	case "integer":
		return intNode, nil
	case "number":
		return numNode, nil
	case "boolean":
		return boolNode, nil
	case "null":
		return nullNode, nil
	case "array":
		if depth <= 0 {
			return glit("[]"), nil
		}
		item, err := schemaNode(s.Items, depth-1)
		if err != nil {
			return nil, err
		}
		return &gnode{kind: gList, open: '[', close: ']', max: maxGrammarItems, item: item}, nil
	case "object":
		keys, vals, err := orderedObject(s.Properties)
		if err != nil {
			return nil, fmt.Errorf("properties: %v", err)
		}
		if len(keys) == 0 {
			if depth <= 0 {
				return glit("{}"), nil
			}
			return anyObjNodes[min(depth, maxGrammarDepth)], nil
		}
		if len(s.Required) > 0 {
			req := map[string]bool{}
			for _, r := range s.Required {
				req[r] = true
			}
			var k2 []string
			var v2 []json.RawMessage
			for i, k := range keys {
				if req[k] {
					k2, v2 = append(k2, k), append(v2, vals[i])
				}
			}
			keys, vals = k2, v2
		}
		parts := []*gnode{glit("{")}
		for i, k := range keys {
			kb, _ := json.Marshal(k)
			sep := ", "
			if i == 0 {
				sep = ""
			}
			v, err := schemaNode(vals[i], max(depth-1, 0))
			if err != nil {
				return nil, err
			}
			parts = append(parts, glit(sep+string(kb)+": "), v)
		}
		parts = append(parts, glit("}"))
		return gseq(parts...), nil
	}
	return anyNodes[min(depth, maxGrammarDepth)], nil
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// orderedObject returns the keys and values of a JSON object in document order.
func orderedObject(raw json.RawMessage) ([]string, []json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
		vals = append(vals, v)
	}
	return keys, vals, nil
}

// toolFormat is a model's tool-call syntax.
type toolFormat int

const (
	fmtHermes    toolFormat = iota // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen, Hermes)
	fmtLlamaJSON                   // {"name": ..., "parameters": {...}} (Llama 3.1/3.2)
)

// toolCallGrammar builds the grammar of one call of one of the given
// functions in the model's syntax.
func toolCallGrammar(fns []ToolFunction, format toolFormat) (*gnode, error) {
	if len(fns) == 0 {
		return nil, fmt.Errorf("no functions to call")
	}
	if len(fns) > 63 {
		return nil, fmt.Errorf("at most 63 tools can be forced")
	}
	argKey := "arguments"
	if format == fmtLlamaJSON {
		argKey = "parameters"
	}
	fns = append([]ToolFunction(nil), fns...)
	sort.SliceStable(fns, func(i, j int) bool { return fns[i].Name < fns[j].Name })
	var opts []gopt
	for _, fn := range fns {
		args, err := schemaNode(fn.Parameters, maxGrammarDepth+1)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %v", fn.Name, err)
		}
		if args.kind == gAny { // arguments are always an object
			args = anyObjNodes[maxGrammarDepth]
		}
		name, _ := json.Marshal(fn.Name)
		opts = append(opts, gopt{lit: string(name), then: gseq(glit(", "+strconv.Quote(argKey)+": "), args)})
	}
	call := gseq(glit(`{"name": `), &gnode{kind: gChoice, opts: opts}, glit("}"))
	if format == fmtLlamaJSON {
		return call, nil
	}
	return gseq(glit("<tool_call>\n"), call, glit("\n</tool_call>")), nil
}

// toolConstraint is the forced tool call as an infer.Constraint: one choice
// of a request with a forced tool choice generates under the grammar.
type toolConstraint struct {
	lm     *lmodel
	gm     gmachine
	masked []float32
}

var _ infer.Constraint = (*toolConstraint)(nil)

// newToolConstraint returns the per-choice factory of the grammar root for
// the model lm.
func newToolConstraint(lm *lmodel, root *gnode) func() infer.Constraint {
	return func() infer.Constraint { return &toolConstraint{lm: lm, gm: newMachine(root)} }
}

// Advance feeds the sampled token's bytes to the grammar; once the call is
// complete an end-of-turn token ends the choice (even with ignore_eos).
func (c *toolConstraint) Advance(tok int) bool {
	if c.gm.done() && c.lm.isEOS(tok) {
		return true
	}
	c.gm.feedBytes(c.lm.tok.TokenBytes(tok))
	return false
}

// Mask returns logits where every token that would break the grammar is
// -Inf. Tool-call markers that are added tokens are produced as those single
// tokens; once the call is complete only the end-of-turn token is allowed.
// When nothing fits (a vocabulary without the needed bytes) the logits are
// left unconstrained.
func (c *toolConstraint) Mask(lg []float32) []float32 {
	if cap(c.masked) < len(lg) {
		c.masked = make([]float32, len(lg))
	}
	m := c.masked[:len(lg)]
	neg := float32(math.Inf(-1))
	for i := range m {
		m[i] = neg
	}
	lm := c.lm
	any := false
	if c.gm.done() {
		for _, id := range lm.endIDs {
			if id >= 0 && id < len(m) {
				m[id] = lg[id]
				any = true
			}
		}
	} else if id, ok := lm.markerFor(c.gm.pendingLiteral()); ok && id < len(m) {
		// A tool-call marker (e.g. <tool_call>, an added token) is
		// produced as its own token, as the template renders it, never
		// spelled out in pieces.
		m[id] = lg[id]
		any = true
	} else if rem, ok := c.gm.inString(); ok {
		// Fast path inside a string body: a token of plain string bytes
		// fits while there is room; only tokens that close the string
		// need a trial through the machine.
		g := lm.grammarVocab()
		for _, id := range g.ids {
			b := g.bytes[id]
			pl := int(g.plain[id])
			if pl > rem || int(id) >= len(m) {
				continue
			}
			if pl == len(b) {
				m[id] = lg[id]
				any = true
				continue
			}
			if b[pl] != '"' {
				continue
			}
			t2 := c.gm
			if t2.feedBytes(b) {
				m[id] = lg[id]
				any = true
			}
		}
	} else {
		g := lm.grammarVocab()
		for b := 0; b < 256; b++ {
			ids := g.byFirst[b]
			if len(ids) == 0 {
				continue
			}
			trial := c.gm
			if !trial.feed(byte(b)) {
				continue
			}
			for _, id := range ids {
				t2 := c.gm
				if t2.feedBytes(g.bytes[id]) && int(id) < len(m) {
					m[id] = lg[id]
					any = true
				}
			}
		}
	}
	if !any {
		return lg
	}
	return m
}
