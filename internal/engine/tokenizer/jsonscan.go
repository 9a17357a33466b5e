package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a small JSON reader used for the big parts of tokenizer.json
// (vocab and merges: hundreds of thousands of strings), several times faster
// than encoding/json's reflection-based decoding. The small parts are
// handed to encoding/json as raw slices.
type scanner struct {
	data []byte
	pos  int
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.errorf("unexpected end of input, want %q", c)
		}
		return s.errorf("unexpected %q, want %q", s.data[s.pos], c)
	}
	s.pos++
	return nil
}

// object calls fn for each key; fn must consume the value.
func (s *scanner) object(fn func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array calls fn for each element; fn must consume it.
func (s *scanner) array(fn func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := fn(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// str reads a JSON string.
func (s *scanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.pos
	d := s.data
	for i := start; i < len(d); i++ {
		c := d[i]
		if c == '"' {
			s.pos = i + 1
			if !utf8.Valid(d[start:i]) {
				return string([]rune(string(d[start:i]))), nil // invalid bytes -> U+FFFD, like encoding/json
			}
			return string(d[start:i]), nil
		}
		if c == '\\' {
			return s.strSlow(start)
		}
		if c < 0x20 {
			s.pos = i
			return "", s.errorf("control character in string")
		}
	}
	s.pos = len(d)
	return "", s.errorf("unterminated string")
}

func (s *scanner) strSlow(start int) (string, error) {
	d := s.data
	buf := make([]byte, 0, 32)
	i := start
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			s.pos = i + 1
			if !utf8.Valid(buf) {
				return string([]rune(string(buf))), nil
			}
			return string(buf), nil
		case c < 0x20:
			s.pos = i
			return "", s.errorf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(d) {
			break
		}
		e := d[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(d, i)
			if !ok {
				s.pos = i
				return "", s.errorf("bad \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if i+6 <= len(d) && d[i] == '\\' && d[i+1] == 'u' {
					r2, ok = hex4(d, i+2)
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			s.pos = i - 1
			return "", s.errorf("bad escape \\%c", e)
		}
	}
	s.pos = len(d)
	return "", s.errorf("unterminated string")
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// integer reads a JSON integer.
func (s *scanner) integer() (int, error) {
	s.ws()
	start := s.pos
	i := start
	if i < len(s.data) && s.data[i] == '-' {
		i++
	}
	for i < len(s.data) && s.data[i] >= '0' && s.data[i] <= '9' {
		i++
	}
	if i < len(s.data) {
		if c := s.data[i]; c == '.' || c == 'e' || c == 'E' {
			return 0, s.errorf("want an integer")
		}
	}
	n, err := strconv.Atoi(string(s.data[start:i]))
	if err != nil {
		return 0, s.errorf("want an integer")
	}
	s.pos = i
	return n, nil
}

// skip skips one value without decoding it and returns its raw bytes
// (structure is checked loosely; the caller decodes what it needs).
func (s *scanner) skip() ([]byte, error) {
	c := s.peek()
	start := s.pos
	d := s.data
	switch c {
	case 0:
		return nil, s.errorf("unexpected end of input")
	case '{', '[', '"':
	default:
		i := s.pos
		for i < len(d) {
			b := d[i]
			if b == ',' || b == '}' || b == ']' || b == ' ' || b == '\n' || b == '\r' || b == '\t' || b == ':' {
				break
			}
			i++
		}
		if i == s.pos {
			return nil, s.errorf("unexpected %q", c)
		}
		s.pos = i
		return d[start:i], nil
	}
	depth := 0
	for i := s.pos; i < len(d); i++ {
		switch d[i] {
		case '"':
			i++
			for i < len(d) && d[i] != '"' {
				if d[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(d) {
				s.pos = len(d)
				return nil, s.errorf("unterminated string")
			}
			if depth == 0 {
				s.pos = i + 1
				return d[start:s.pos], nil
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.pos = i + 1
				return d[start:s.pos], nil
			}
		}
	}
	s.pos = len(d)
	return nil, s.errorf("unexpected end of input")
}

// rawStr reads a JSON string and returns its bytes; without escapes these
// alias the input (no allocation), so they must not be kept.
func (s *scanner) rawStr() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.expect('"')
	}
	d := s.data
	for i := s.pos + 1; i < len(d); i++ {
		c := d[i]
		if c == '"' {
			b := d[s.pos+1 : i]
			s.pos = i + 1
			return b, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
	}
	str, err := s.str()
	return []byte(str), err
}

var errTrailing = errors.New("trailing data after the top-level object")
