package rl

import (
	"errors"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
)

// scanner is a small, allocation-free JSON walker over a byte slice, on
// jsonlex's tokens. It validates syntax as it goes and keeps the JSON path of where it is, so a
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
	path  jsonlex.PathStack
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

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 256

func (s *scanner) push(key string)    { s.path.PushKey(key) }
func (s *scanner) pushIdx(i int)      { s.path.PushIndex(i) }
func (s *scanner) pop()               { s.path.Pop() }
func (s *scanner) setIdx(i int)       { s.path.SetIndex(i) }
func (s *scanner) pathString() string { return string(s.path.Path()) }

// syntaxErr is a malformed-JSON error at the current byte.
func (s *scanner) syntaxErr(what string) error {
	if s.pos >= len(s.data) {
		return httpx.Invalid(s.pathString(), "invalid_json", "malformed JSON: unexpected end of input (%s)", what)
	}
	return httpx.Invalid(s.pathString(), "invalid_json", "malformed JSON at byte %d: %s", s.pos, what)
}

// lexErr is syntaxErr for a jsonlex error, at its offset.
func (s *scanner) lexErr(err error) error {
	var se *jsonlex.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	s.pos = se.Offset
	return s.syntaxErr(se.Msg)
}

// typeErr reports that the value at the current path has the wrong type.
func (s *scanner) typeErr(want string) error {
	switch c := s.peek(); {
	case c == '{', c == '[', c == '"', c == 't', c == 'f', c == 'n', c == '-', c >= '0' && c <= '9':
	default:
		return s.syntaxErr("expected a value")
	}
	return httpx.TypeMismatch(s.pathString(), want, jsonlex.KindOf(s.peek()))
}

func (s *scanner) invalid(code, format string, args ...any) error {
	p := s.pathString()
	return httpx.Invalid(p, code, p+": "+format, args...)
}

// ws skips whitespace. Most values follow ": " or ", " or nothing, so the
// common case (the next byte is not whitespace) returns at once.
func (s *scanner) ws() {
	if s.pos < len(s.data) && s.data[s.pos] > ' ' {
		return
	}
	s.wsSlow()
}

func (s *scanner) wsSlow() { s.pos = jsonlex.SkipSpace(s.data, s.pos) }

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
	start := s.pos
	end, esc, err := jsonlex.ScanString(s.data, start)
	if err != nil {
		return nil, false, s.lexErr(err)
	}
	s.pos = end
	return s.data[start+1 : end-1], esc, nil
}

// num consumes a number and returns its text. A number that reaches the
// edge of a streaming window may continue beyond it, so it is a syntax
// error there (see fill).
func (s *scanner) num() ([]byte, error) {
	s.ws()
	d := s.data
	start := s.pos
	i, _, err := jsonlex.ScanNumber(d, start)
	if err != nil {
		return nil, s.lexErr(err)
	}
	s.pos = i
	if i == len(d) && len(d) < len(s.full) {
		return nil, s.syntaxErr("number cut by the end of the data received so far")
	}
	return d[start:i], nil
}

func (s *scanner) lit(word string) error {
	end, err := jsonlex.ScanLiteral(s.data, s.pos, word)
	if err != nil {
		return s.lexErr(err)
	}
	s.pos = end
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
		if esc { // as encoding/json decodes it
			key = jsonlex.AppendUnquoted(nil, key, jsonlex.Replace)
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
