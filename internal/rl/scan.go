package rl

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strconv"
	"strings"

	"flywheel/internal/httpx"
)

// scanner is a small, allocation-free JSON walker over a byte slice. It
// validates syntax as it goes and keeps the JSON path of where it is, so a
// schema written on top of it can report errors such as
// "trajectory_groups[3].trajectories[0].reward". Training payloads are large
// (tens of MB), so this walks the bytes once without building values;
// encoding/json would be several times slower and would not give indices.
//
// The scanner can also run while the body is still arriving (see
// ValidateStream): data is then the prefix of full received so far, and
// object and array call fill between members to extend it.
type scanner struct {
	data  []byte
	pos   int
	path  []seg
	depth int

	full  []byte     // the whole body; data is full[:n]
	more  <-chan int // while the body arrives: lengths of its received prefix
	ahead int        // fill keeps at least this many unread bytes in data when it can
}

// fillAhead is how far ahead of the scanner a streaming window is kept: a
// token that starts in the window is complete unless it is longer than
// this (then the scan fails on the window edge and ValidateStream scans
// again over the whole body).
const fillAhead = 1 << 20

// fill extends a streaming window so that at least s.ahead unread bytes are
// in it, or the whole body, waiting for them to arrive. It is called only
// right after consuming '{', '[' or ',', never between reading at the
// window edge and failing on it: a token cut by the edge (or peek's 0 there)
// always ends the scan with a syntax error before the window grows, and
// ValidateStream then scans the whole body again. Syntax errors are never
// swallowed (see eagerLogprobs), so a scan that ends on a complete window
// took exactly the decisions a scan of the whole body takes.
func (s *scanner) fill() {
	if s.more != nil && len(s.data)-s.pos < s.ahead {
		s.wait(s.pos + s.ahead)
	}
}

// wait blocks until data holds at least n bytes (at most the whole body) or
// the body stops arriving.
func (s *scanner) wait(n int) {
	n = min(n, len(s.full))
	for len(s.data) < n && s.more != nil {
		got, ok := <-s.more
		if !ok {
			s.more = nil
			return
		}
		s.data = s.full[:got]
	}
}

// seg is one step of a JSON path: an object key or an array index.
type seg struct {
	key string // "" for an array index
	idx int
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 256

func (s *scanner) push(key string)    { s.path = append(s.path, seg{key: key}) }
func (s *scanner) pushIdx(i int)      { s.path = append(s.path, seg{idx: i}) }
func (s *scanner) pop()               { s.path = s.path[:len(s.path)-1] }
func (s *scanner) setIdx(i int)       { s.path[len(s.path)-1].idx = i }
func (s *scanner) pathString() string { return pathOf(s.path) }

func pathOf(p []seg) string {
	var b strings.Builder
	for _, sg := range p {
		if sg.key == "" {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(sg.idx))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(sg.key)
	}
	return b.String()
}

// syntaxErr is a malformed-JSON error at the current byte.
func (s *scanner) syntaxErr(what string) error {
	if s.pos >= len(s.data) {
		return httpx.Invalid(s.pathString(), "invalid_json", "malformed JSON: unexpected end of input (%s)", what)
	}
	return httpx.Invalid(s.pathString(), "invalid_json", "malformed JSON at byte %d: %s", s.pos, what)
}

// typeErr reports that the value at the current path has the wrong type.
func (s *scanner) typeErr(want string) error {
	switch c := s.peek(); {
	case c == '{', c == '[', c == '"', c == 't', c == 'f', c == 'n', c == '-', c >= '0' && c <= '9':
	default:
		return s.syntaxErr("expected a value")
	}
	p := s.pathString()
	return httpx.Invalid(p, "invalid_type", "%s: expected %s, got %s", p, want, kindName(s.peek()))
}

func (s *scanner) invalid(code, format string, args ...any) error {
	p := s.pathString()
	return httpx.Invalid(p, code, p+": "+format, args...)
}

func kindName(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case 0:
		return "nothing"
	}
	return "a number"
}

// ws skips whitespace. Most values follow ": " or ", " or nothing, so the
// common case (the next byte is not whitespace) returns at once.
func (s *scanner) ws() {
	if s.pos < len(s.data) && s.data[s.pos] > ' ' {
		return
	}
	s.wsSlow()
}

func (s *scanner) wsSlow() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// space skips one ' ', the usual separator after ':' and ',', so that the
// next peek takes its fast path.
func (s *scanner) space() {
	if s.pos < len(s.data) && s.data[s.pos] == ' ' {
		s.pos++
	}
}

// peek returns the first byte of the next value (after whitespace), 0 at EOF.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		if c := s.data[s.pos]; c > ' ' {
			return c
		}
	}
	s.wsSlow()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

// str consumes a string and returns its raw (still escaped) bytes and
// whether it contains escapes.
func (s *scanner) str() ([]byte, bool, error) {
	if s.peek() != '"' {
		return nil, false, s.syntaxErr("expected a string")
	}
	s.pos++
	start := s.pos
	esc := false
	d := s.data
	for i := s.pos; i < len(d); i++ {
		// Fast path: skip 8 plain bytes at a time (no quote, backslash or
		// control character among them), then jump straight to the first
		// special byte of the word: the lowest set bit of the mask is exact
		// (the borrow false positives of hasZero/hasLess only appear above a
		// byte that really matches).
		for i+8 <= len(d) {
			w := binary.LittleEndian.Uint64(d[i:])
			if m := hasZero(w^(lo8*'"')) | hasZero(w^(lo8*'\\')) | hasLess(w, 0x20); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(d) {
			break
		}
		c := d[i]
		if c == '"' {
			s.pos = i + 1
			return d[start:i], esc, nil
		}
		if c == '\\' {
			esc = true
			i++
			if i >= len(d) {
				break
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(d) || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					s.pos = i
					return nil, false, s.syntaxErr("invalid \\u escape in string")
				}
				i += 4
			default:
				s.pos = i
				return nil, false, s.syntaxErr("invalid escape in string")
			}
			continue
		}
		if c < 0x20 {
			s.pos = i
			return nil, false, s.syntaxErr("control character in string")
		}
	}
	s.pos = len(d)
	return nil, false, s.syntaxErr("unterminated string")
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

// hasZero is non-zero when a byte of w is zero.
func hasZero(w uint64) uint64 { return (w - lo8) & ^w & hi8 }

// hasLess is non-zero when a byte of w is less than n (n <= 128).
func hasLess(w uint64, n byte) uint64 { return (w - lo8*uint64(n)) & ^w & hi8 }

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// num consumes a number and returns its text. A number that reaches the
// edge of a streaming window may continue beyond it, so it is a syntax
// error there (see fill).
func (s *scanner) num() ([]byte, error) {
	s.ws()
	d := s.data
	start := s.pos
	i := s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		s.pos = i
		return nil, s.syntaxErr("invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			s.pos = i
			return nil, s.syntaxErr("invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			s.pos = i
			return nil, s.syntaxErr("invalid number")
		}
	}
	s.pos = i
	if i == len(d) && len(d) < len(s.full) {
		return nil, s.syntaxErr("number cut by the end of the data received so far")
	}
	return d[start:i], nil
}

func (s *scanner) lit(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.syntaxErr("invalid literal")
	}
	s.pos += len(word)
	return nil
}

// skip consumes any value, validating its syntax.
func (s *scanner) skip() error {
	switch c := s.peek(); c {
	case '{':
		return s.object(func([]byte) error { return s.skip() })
	case '[':
		return s.array(func(int) error { return s.skip() })
	case '"':
		_, _, err := s.str()
		return err
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			_, err := s.num()
			return err
		}
		return s.syntaxErr("expected a value")
	}
}

// object consumes an object, calling fn for each key with the scanner
// positioned at the value; fn must consume the value. Keys with escapes are
// unescaped before fn sees them.
func (s *scanner) object(fn func(key []byte) error) error {
	if s.peek() != '{' {
		return s.syntaxErr("expected an object")
	}
	if s.depth++; s.depth > maxDepth {
		return s.syntaxErr("nesting too deep")
	}
	s.pos++
	s.fill()
	if s.peek() == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		key, esc, err := s.str()
		if err != nil {
			return err
		}
		if esc {
			var u string
			if err := jsonUnquote(key, &u); err != nil {
				return s.syntaxErr("invalid key")
			}
			key = []byte(u)
		}
		if s.peek() != ':' {
			return s.syntaxErr("expected ':' after object key")
		}
		s.pos++
		s.space()
		if err := fn(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
			s.fill()
			s.space()
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.syntaxErr("expected ',' or '}' in object")
		}
	}
}

// array consumes an array, calling fn for each element index with the
// scanner positioned at the element; fn must consume it.
func (s *scanner) array(fn func(i int) error) error {
	if s.peek() != '[' {
		return s.syntaxErr("expected an array")
	}
	if s.depth++; s.depth > maxDepth {
		return s.syntaxErr("nesting too deep")
	}
	s.pos++
	s.fill()
	if s.peek() == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for i := 0; ; i++ {
		if err := fn(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
			s.fill()
			s.space()
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.syntaxErr("expected ',' or ']' in array")
		}
	}
}

// Typed helpers: each checks the kind of the next value at the current path
// and consumes it.

func (s *scanner) wantObject(nullable bool, fn func(key []byte) error) error {
	switch c := s.peek(); {
	case c == '{':
		return s.object(fn)
	case c == 'n' && nullable:
		return s.lit("null")
	}
	return s.typeErr("an object")
}

func (s *scanner) wantArray(nullable bool, fn func(i int) error) (int, error) {
	n := 0
	switch c := s.peek(); {
	case c == '[':
		s.pushIdx(0)
		err := s.array(func(i int) error {
			s.setIdx(i)
			n = i + 1
			return fn(i)
		})
		if err != nil {
			return n, err
		}
		s.pop()
		return n, nil
	case c == 'n' && nullable:
		return 0, s.lit("null")
	}
	return 0, s.typeErr("an array")
}

func (s *scanner) wantString(nullable bool) ([]byte, error) {
	switch c := s.peek(); {
	case c == '"':
		b, _, err := s.str()
		return b, err
	case c == 'n' && nullable:
		return nil, s.lit("null")
	}
	return nil, s.typeErr("a string")
}

// wantNumber consumes a number (or null when nullable) and checks that it
// is finite; ok is false for null. The value itself is not needed by the
// schema, so it is only parsed when it could be out of range (see
// certainlyFinite).
func (s *scanner) wantNumber(nullable bool) (ok bool, err error) {
	c := s.peek()
	if c == 'n' && nullable {
		return false, s.lit("null")
	}
	if c != '-' && (c < '0' || c > '9') {
		return false, s.typeErr("a number")
	}
	b, err := s.num()
	if err != nil {
		return false, err
	}
	if certainlyFinite(b) {
		return true, nil
	}
	if _, err := strconv.ParseFloat(string(b), 64); err != nil { // out of range: ±Inf
		return false, s.invalid("invalid_value", "number %s is out of range; numbers must be finite", b)
	}
	return true, nil
}

// certainlyFinite reports, without parsing, that the valid JSON number b
// fits a float64: with no exponent it has at most len(b) integer digits, and
// any number below 1e308 is finite (MaxFloat64 is about 1.8e308; underflow
// rounds to zero without error). Other numbers need strconv.ParseFloat.
func certainlyFinite(b []byte) bool {
	if len(b) > 308 {
		return false
	}
	for _, c := range b {
		if c|0x20 == 'e' {
			return false
		}
	}
	return true
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end() error {
	s.ws()
	if s.pos != len(s.data) {
		return s.syntaxErr("unexpected data after the JSON value")
	}
	return nil
}

// jsonUnquote decodes the raw contents of a JSON string (rare path: keys
// written with escapes).
func jsonUnquote(raw []byte, out *string) error {
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	return json.Unmarshal(q, out)
}
