package serve

// Structured outputs (response_format json_object / json_schema, strict
// tool parameters) are generated under a byte-level JSON grammar compiled
// from the schema: a graph of nodes (literals, sequences, alternatives,
// strings, numbers, lists, optional-property objects) run by a small
// nondeterministic pushdown matcher. Its state is a set of stacks (anyOf
// branches and optional properties are followed side by side until the
// bytes decide), each stack an immutable linked list of frames, so trying a
// token never disturbs the state it starts from.
//
// Output style is fixed: json.dumps spacing ({"a": 1, "b": [2, 3]}),
// properties in schema order, no other whitespace; strings are any JSON
// string (escapes, valid UTF-8), numbers -?(0|[1-9]d{0,15})(.d{1,16})?
// without exponents (so every parser reads them as a finite float), integers
// without a fraction.
//
// Termination: every node has a minimal completion length in bytes
// (minCost). The constraint allows a token only when what remains after it
// can still be completed within the tokens left (each byte being a token of
// its own at worst: byte-level vocabularies have them), so even random
// weights end with a complete document within max_tokens.

import (
	"sort"
	"unicode/utf8"
)

type jkind uint8

const (
	jLit    jkind = iota // exact bytes
	jSeq                 // items in order
	jAlt                 // one of items
	jStr                 // JSON string
	jNum                 // JSON number (intOnly: integer)
	jList                // open, items separated by ", ", close (arrays; objects of any keys)
	jProps               // "{" declared properties, some optional, in order "}"
	jAny                 // any JSON value, dispatched on its first byte
	jRef                 // another node (a $ref, resolved after compilation)
	jChoice              // one of sorted literals (lits), each followed by its own node (then[k], nil: none)
)

// jnode is a compiled grammar node.
type jnode struct {
	kind    jkind
	lit     string
	lits    []string // jChoice: sorted, distinct
	then    []*jnode // jChoice: what follows lits[k]
	items   []*jnode // seq items, alt branches
	suffix  []int    // seq: minCost of items[i:]
	intOnly bool
	open    byte
	close   byte
	item    *jnode    // list item
	props   []jprop   // jProps
	ref     *jnode    // jRef target
	minCost int       // bytes of the shortest instance
	anyOf   [3]*jnode // jAny: the object, array and scalar nodes it dispatches to
}

// jprop is a property of a jProps object.
type jprop struct {
	key      [2]*jnode // `"name": ` as the first property, and after ", "
	val      *jnode
	required bool
}

const (
	maxNumDigits   = 16   // integer and fraction digits of a number
	maxMatchStacks = 16   // alternative stacks followed at once (the cheapest to complete are kept)
	maxStackDepth  = 1024 // frames of one stack
	maxExpansions  = 256  // frames pushed for one byte (left recursion guard)
	infCost        = 1 << 30
)

// jstack is one stack of a matcher state: its top frame and the rest.
// Stacks are immutable; nil is the empty stack (the document is complete).
type jstack struct {
	n      *jnode
	i      int32 // lit offset, seq index, list item count, props next index
	st     uint8 // sub-state
	u      uint8 // string: UTF-8 continuation bytes or \u hex digits still due
	first  bool  // props: no property written yet
	lo, hi int32 // choice: the literals still matching, lits[lo:hi]
	depth  int32
	parent *jstack
}

func (s *jstack) with(f jstack) *jstack {
	f.parent, f.depth = s.parent, s.depth
	return &f
}

// push returns a stack with a fresh frame of n on top of s.
func push(s *jstack, n *jnode) *jstack {
	for n.kind == jRef {
		n = n.ref
	}
	d := int32(1)
	if s != nil {
		d = s.depth + 1
	}
	return &jstack{n: n, first: true, hi: int32(len(n.lits)), depth: d, parent: s}
}

// string sub-states
const (
	sOpen = iota // expect '"'
	sBody        // in the body
	sEsc         // after '\'
	sHex         // in \uXXXX (u digits due)
)

// number sub-states
const (
	nStart = iota // nothing yet
	nMinus        // after '-'
	nZero         // after a leading 0
	nInt          // in integer digits (i of them)
	nDot          // after '.'
	nFrac         // in fraction digits (i of them)
)

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// list sub-states
const (
	lOpen  = iota // expect open
	lFirst        // after open: close or an item
	lAfter        // after an item: ", " or close
	lComma        // after ','
	lNext         // after ", ": an item
)

// stepper feeds one byte to stacks, collecting the successors.
type stepper struct {
	out []*jstack
	exp int // expansions for the current byte
}

// feed appends to st.out the stacks s becomes after consuming b.
func (st *stepper) feed(s *jstack, b byte) {
	if s == nil || s.depth > maxStackDepth {
		return
	}
	n := s.n
	switch n.kind {
	case jLit:
		if n.lit[s.i] != b {
			return
		}
		if int(s.i)+1 == len(n.lit) {
			st.emit(s.parent)
			return
		}
		f := *s
		f.i++
		st.emit(s.with(f))
	case jSeq:
		if int(s.i) == len(n.items) {
			st.feed(s.parent, b)
			return
		}
		if !st.expand() {
			return
		}
		f := *s
		f.i++
		st.feed(push(s.with(f), n.items[s.i]), b)
	case jAlt:
		if !st.expand() {
			return
		}
		for _, it := range n.items {
			st.feed(push(s.parent, it), b)
		}
	case jAny:
		if !st.expand() {
			return
		}
		var next *jnode
		switch {
		case b == '{':
			next = n.anyOf[0]
		case b == '[':
			next = n.anyOf[1]
		default:
			next = n.anyOf[2]
		}
		st.feed(push(s.parent, next), b)
	case jChoice:
		st.feedChoice(s, b)
	case jStr:
		st.feedStr(s, b)
	case jNum:
		f := *s
		if jnumFeed(&f, b) {
			st.emit(s.with(f))
			return
		}
		if jnumCanEnd(s) {
			st.feed(s.parent, b)
		}
	case jList:
		f := *s
		switch s.st {
		case lOpen:
			if b == n.open {
				f.st = lFirst
				st.emit(s.with(f))
			}
		case lFirst, lNext:
			if s.st == lFirst && b == n.close {
				st.emit(s.parent)
				return
			}
			if !st.expand() {
				return
			}
			f.st = lAfter
			f.i++
			st.feed(push(s.with(f), n.item), b)
		case lAfter:
			if b == n.close {
				st.emit(s.parent)
			} else if b == ',' {
				f.st = lComma
				st.emit(s.with(f))
			}
		case lComma:
			if b == ' ' {
				f.st = lNext
				st.emit(s.with(f))
			}
		}
	case jProps:
		if s.st == 0 {
			if b == '{' {
				f := *s
				f.st = 1
				st.emit(s.with(f))
			}
			return
		}
		// Next: one of the properties from i on with only optional ones
		// skipped, or '}' when none of the rest is required.
		for j := int(s.i); j < len(n.props); j++ {
			if !st.expand() {
				return
			}
			p := n.props[j]
			f := *s
			f.i, f.first = int32(j+1), false
			key := p.key[0]
			if !s.first {
				key = p.key[1]
			}
			st.feed(push(push(s.with(f), p.val), key), b)
			if p.required {
				return
			}
		}
		if b == '}' {
			st.emit(s.parent)
		}
	}
}

func (st *stepper) expand() bool {
	st.exp++
	return st.exp <= maxExpansions
}

func (st *stepper) emit(s *jstack) {
	// finished sequences are popped at once, so a complete document is the
	// empty stack
	for s != nil && s.n.kind == jSeq && int(s.i) == len(s.n.items) {
		s = s.parent
	}
	for _, o := range st.out {
		if sameStack(o, s) {
			return
		}
	}
	if len(st.out) < 4*maxMatchStacks {
		st.out = append(st.out, s)
	}
}

// sameStack reports whether two stacks are the same state.
func sameStack(a, b *jstack) bool {
	for a != b {
		if a == nil || b == nil || a.n != b.n || a.i != b.i || a.st != b.st || a.u != b.u || a.first != b.first || a.lo != b.lo || a.hi != b.hi {
			return false
		}
		a, b = a.parent, b.parent
	}
	return true
}

// feedChoice narrows a choice to the literals with b at its offset; a
// literal complete at the offset may also end here, b going to what follows
// it.
func (st *stepper) feedChoice(s *jstack, b byte) {
	n := s.n
	i := int(s.i)
	lo, hi := int(s.lo), int(s.hi)
	if lo < hi && len(n.lits[lo]) == i { // sorted: a complete literal comes first
		if st.expand() {
			next := s.parent
			if n.then[lo] != nil {
				next = push(s.parent, n.then[lo])
			}
			st.feed(next, b)
		}
		lo++
	}
	a := lo + sort.Search(hi-lo, func(k int) bool { return n.lits[lo+k][i] >= b })
	z := a + sort.Search(hi-a, func(k int) bool { return n.lits[a+k][i] > b })
	if a == z {
		return
	}
	if z-a == 1 && len(n.lits[a]) == i+1 { // the one literal left is complete
		if n.then[a] != nil {
			st.emit(push(s.parent, n.then[a]))
		} else {
			st.emit(s.parent)
		}
		return
	}
	f := *s
	f.i, f.lo, f.hi = int32(i+1), int32(a), int32(z)
	st.emit(s.with(f))
}

// choiceCost is the shortest completion of a choice frame from offset i
// among lits[lo:hi].
func choiceCost(n *jnode, i, lo, hi int) int {
	c := infCost
	for k := lo; k < hi; k++ {
		v := len(n.lits[k]) - i
		if n.then[k] != nil {
			v += n.then[k].minCost
		}
		c = min(c, v)
	}
	return c
}

func (st *stepper) feedStr(s *jstack, b byte) {
	f := *s
	switch s.st {
	case sOpen:
		if b != '"' {
			return
		}
		f.st = sBody
	case sBody:
		switch {
		case s.u > 0:
			if b&0xC0 != 0x80 {
				return
			}
			f.u--
			// reject overlong / surrogate / out-of-range forms
			if f.i == 0xE0 && b < 0xA0 || f.i == 0xED && b > 0x9F || f.i == 0xF0 && b < 0x90 || f.i == 0xF4 && b > 0x8F {
				return
			}
			f.i = 0
		case b == '"':
			st.emit(s.parent)
			return
		case b == '\\':
			f.st = sEsc
		case b < 0x20:
			return
		case b < 0x80:
		case b >= 0xC2 && b <= 0xDF:
			f.u, f.i = 1, 0
		case b >= 0xE0 && b <= 0xEF:
			f.u, f.i = 2, int32(b)
		case b >= 0xF0 && b <= 0xF4:
			f.u, f.i = 3, int32(b)
		default:
			return
		}
	case sEsc:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.st = sBody
		case 'u':
			f.st, f.u = sHex, 4
		default:
			return
		}
	case sHex:
		if !(isDigit(b) || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F') {
			return
		}
		f.u--
		if f.u == 0 {
			f.st = sBody
		}
	}
	st.emit(s.with(f))
}

func jnumFeed(f *jstack, b byte) bool {
	switch f.st {
	case nStart, nMinus:
		if b == '-' && f.st == nStart {
			f.st = nMinus
			return true
		}
		if b == '0' {
			f.st, f.i = nZero, 1
			return true
		}
		if isDigit(b) {
			f.st, f.i = nInt, 1
			return true
		}
	case nZero, nInt:
		if f.st == nInt && isDigit(b) && f.i < maxNumDigits {
			f.i++
			return true
		}
		if b == '.' && !f.n.intOnly {
			f.st, f.i = nDot, 0
			return true
		}
	case nDot, nFrac:
		if isDigit(b) && f.i < maxNumDigits {
			f.st = nFrac
			f.i++
			return true
		}
	}
	return false
}

func jnumCanEnd(s *jstack) bool { return s.st == nZero || s.st == nInt || s.st == nFrac }

// cost is the length in bytes of the shortest completion of s.
func cost(s *jstack) int {
	c := 0
	for ; s != nil; s = s.parent {
		c += frameCost(s)
		if c >= infCost {
			return infCost
		}
	}
	return c
}

func frameCost(s *jstack) int {
	n := s.n
	switch n.kind {
	case jLit:
		return len(n.lit) - int(s.i)
	case jSeq:
		return n.suffix[s.i]
	case jAlt, jAny, jRef:
		return n.minCost
	case jChoice:
		return choiceCost(n, int(s.i), int(s.lo), int(s.hi))
	case jStr:
		switch s.st {
		case sOpen:
			return 2
		case sBody:
			return 1 + int(s.u)
		case sEsc:
			return 2
		default:
			return 1 + int(s.u)
		}
	case jNum:
		switch s.st {
		case nStart, nMinus, nDot:
			return 1
		}
		return 0
	case jList:
		switch s.st {
		case lOpen:
			return 2
		case lFirst, lAfter:
			return 1
		case lComma:
			return 2 + n.item.minCost
		default:
			return 1 + n.item.minCost
		}
	case jProps:
		if s.st == 0 {
			return n.minCost
		}
		return propsCost(n, int(s.i), s.first)
	}
	return infCost
}

// propsCost is the shortest completion of a jProps object from property i
// on: its required properties, then '}'.
func propsCost(n *jnode, i int, first bool) int {
	c := 1
	for _, p := range n.props[i:] {
		if !p.required {
			continue
		}
		k := p.key[0]
		if !first {
			k = p.key[1]
		}
		c += len(k.lit) + p.val.minCost
		first = false
	}
	return c
}

// jstate is a matcher state: the stacks still alive.
type jstate []*jstack

// feedByte returns the state after b (empty: b is not allowed).
func (js jstate) feedByte(st *stepper, b byte) jstate {
	st.out = st.out[:0]
	for _, s := range js {
		st.exp = 0
		st.feed(s, b)
	}
	out := append(jstate(nil), st.out...)
	if len(out) > maxMatchStacks {
		// Too many alternatives alive: keep those with the shortest
		// completions (the state's shortest completion is unchanged, so
		// the document still ends within the tokens left); the others'
		// continuations are no longer offered.
		sort.SliceStable(out, func(i, j int) bool { return cost(out[i]) < cost(out[j]) })
		out = out[:maxMatchStacks]
	}
	return out
}

// feedBytes feeds p; nil when some byte is not allowed.
func (js jstate) feedBytes(p []byte) jstate {
	var st stepper
	for _, b := range p {
		js = js.feedByte(&st, b)
		if len(js) == 0 {
			return nil
		}
	}
	return js
}

// minCost is the shortest completion over the state's stacks.
func (js jstate) minCost() int {
	c := infCost
	for _, s := range js {
		c = min(c, cost(s))
	}
	return c
}

// complete reports whether the document may end here.
func (js jstate) complete() bool { return js.minCost() == 0 }

// closed reports whether the document is complete and nothing may follow.
func (js jstate) closed() bool {
	for _, s := range js {
		if s != nil {
			return false
		}
	}
	return len(js) > 0
}

// pendingLiteral returns the literal the state requires next ("" when the
// next bytes are not fixed).
func (js jstate) pendingLiteral() string {
	if len(js) != 1 || js[0] == nil {
		return ""
	}
	s := js[0]
	switch s.n.kind {
	case jLit:
		return s.n.lit[s.i:]
	case jChoice:
		if s.hi-s.lo == 1 {
			return s.n.lits[s.lo][s.i:]
		}
	case jSeq:
		if int(s.i) < len(s.n.items) && s.n.items[s.i].kind == jLit {
			return s.n.items[s.i].lit
		}
	}
	return ""
}

// stringBody reports whether every stack of the state is inside a string
// body between characters: any complete UTF-8 text without '"', '\' or
// control characters keeps them there, at the same cost.
func (js jstate) stringBody() bool {
	for _, s := range js {
		if s == nil || s.n.kind != jStr || s.st != sBody || s.u != 0 {
			return false
		}
	}
	return len(js) > 0
}

// plainString reports whether p may stand inside a JSON string as is:
// valid, complete UTF-8 with no '"', '\' or control characters.
func plainString(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, b := range p {
		if b < 0x20 || b == '"' || b == '\\' {
			return false
		}
	}
	return len(p) > 0
}
