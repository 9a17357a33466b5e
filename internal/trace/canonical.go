package trace

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonical JSON.
//
// Stored JSON (attributes, inputs, output, summary) is rewritten at write time
// into the form the common trace clients' servers produce with Python's
// json.dumps defaults, so storage figures agree with theirs:
//   - separators ", " and ": ", no other whitespace;
//   - object keys in the order received; a repeated key keeps its first
//     position and takes its last value (what a Python dict does);
//   - strings: ", \ and the short escapes \b \f \n \r \t; every other code
//     point outside 0x20..0x7e as \uXXXX (lowercase hex, surrogate pairs above
//     U+FFFF); invalid UTF-8 bytes become U+FFFD;
//   - integers as written ("-0" becomes "0"); numbers with a fraction or an
//     exponent as Python's repr of the float64 (1.0, 1e-05, 1e+16,
//     100000.0), overflow as Infinity / -Infinity.
//
// The canonicaliser is a single pass over the bytes and also validates them.

var errBadJSON = errors.New("invalid JSON")

type canon struct {
	in  []byte
	pos int
	out []byte
	// scratch for object members, reused by nested objects through the stack
	depth int
	// sortKeys orders object members by key (Python's sort_keys=True: code
	// point order, which is UTF-8 byte order), as object digests need.
	sortKeys bool
}

const maxJSONDepth = 512

// Canonicalize returns the canonical form of the JSON value in data.
func Canonicalize(data []byte) ([]byte, error) { return canonicalize(data, false) }

// canonicalSorted returns the canonical form of data with every object's
// members sorted by key: the text of Python's json.dumps(v, sort_keys=True),
// over which Weave computes object digests.
func canonicalSorted(data []byte) ([]byte, error) { return canonicalize(data, true) }

func canonicalize(data []byte, sortKeys bool) ([]byte, error) {
	c := canon{in: data, out: make([]byte, 0, len(data)+len(data)/8+8), sortKeys: sortKeys}
	c.skipWS()
	if err := c.value(); err != nil {
		return nil, err
	}
	c.skipWS()
	if c.pos != len(c.in) {
		return nil, c.errf("unexpected data after the JSON value")
	}
	return c.out, nil
}

func (c *canon) errf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", errBadJSON, c.pos, fmt.Sprintf(format, args...))
}

func (c *canon) skipWS() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canon) value() error {
	if c.pos >= len(c.in) {
		return c.errf("unexpected end of input")
	}
	switch b := c.in[c.pos]; {
	case b == '{':
		return c.object()
	case b == '[':
		return c.array()
	case b == '"':
		s, err := c.str()
		if err != nil {
			return err
		}
		c.out = appendPyString(c.out, s)
		return nil
	case b == 't':
		return c.lit("true")
	case b == 'f':
		return c.lit("false")
	case b == 'n':
		return c.lit("null")
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	default:
		return c.errf("unexpected character %q", b)
	}
}

func (c *canon) lit(s string) error {
	if len(c.in)-c.pos < len(s) || string(c.in[c.pos:c.pos+len(s)]) != s {
		return c.errf("invalid literal")
	}
	c.pos += len(s)
	c.out = append(c.out, s...)
	return nil
}

type member struct {
	key        string
	start, end int // the member's bytes in c.out, key included
}

func (c *canon) object() error {
	c.depth++
	if c.depth > maxJSONDepth {
		return c.errf("nesting too deep")
	}
	defer func() { c.depth-- }()
	objStart := len(c.out)
	c.pos++ // {
	c.out = append(c.out, '{')
	c.skipWS()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		return nil
	}
	var members []member
	var seen map[string]int
	dup := false
	for {
		c.skipWS()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.errf("expected a string key")
		}
		if len(members) > 0 {
			c.out = append(c.out, ", "...)
		}
		mStart := len(c.out)
		key, err := c.str()
		if err != nil {
			return err
		}
		c.out = appendPyString(c.out, key)
		c.skipWS()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.errf("expected ':'")
		}
		c.pos++
		c.out = append(c.out, ": "...)
		c.skipWS()
		if err := c.value(); err != nil {
			return err
		}
		m := member{key: key, start: mStart, end: len(c.out)}
		if seen == nil && len(members) >= 8 {
			seen = make(map[string]int, 16)
			for i, mm := range members {
				seen[mm.key] = i
			}
		}
		idx := -1
		if seen != nil {
			if i, ok := seen[key]; ok {
				idx = i
			}
		} else {
			for i := range members {
				if members[i].key == key {
					idx = i
					break
				}
			}
		}
		if idx >= 0 {
			dup = true
			members[idx].start, members[idx].end = m.start, m.end // last value, first position
		} else {
			if seen != nil {
				seen[key] = len(members)
			}
			members = append(members, m)
		}
		c.skipWS()
		if c.pos >= len(c.in) {
			return c.errf("unexpected end of input in object")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		return c.errf("expected ',' or '}'")
	}
	if c.sortKeys && len(members) > 1 {
		sort.SliceStable(members, func(i, j int) bool { return members[i].key < members[j].key })
		dup = true // rewrite in the new order
	}
	if dup {
		body := make([]byte, 0, len(c.out)-objStart)
		body = append(body, '{')
		for i, m := range members {
			if i > 0 {
				body = append(body, ", "...)
			}
			body = append(body, c.out[m.start:m.end]...)
		}
		body = append(body, '}')
		c.out = append(c.out[:objStart], body...)
		return nil
	}
	c.out = append(c.out, '}')
	return nil
}

func (c *canon) array() error {
	c.depth++
	if c.depth > maxJSONDepth {
		return c.errf("nesting too deep")
	}
	defer func() { c.depth-- }()
	c.pos++
	c.out = append(c.out, '[')
	c.skipWS()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	first := true
	for {
		c.skipWS()
		if !first {
			c.out = append(c.out, ", "...)
		}
		first = false
		if err := c.value(); err != nil {
			return err
		}
		c.skipWS()
		if c.pos >= len(c.in) {
			return c.errf("unexpected end of input in array")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] == ']' {
			c.pos++
			c.out = append(c.out, ']')
			return nil
		}
		return c.errf("expected ',' or ']'")
	}
}

// str decodes a JSON string at c.pos into UTF-16-ish code points kept as a Go
// string where lone surrogates are preserved as WTF-8 style sequences via
// the private marker below.
func (c *canon) str() (string, error) {
	c.pos++ // opening quote
	start := c.pos
	// fast path: no escapes, all printable ASCII or valid UTF-8
	for c.pos < len(c.in) {
		b := c.in[c.pos]
		if b == '"' {
			s := string(c.in[start:c.pos])
			c.pos++
			return s, nil
		}
		if b == '\\' || b < 0x20 {
			break
		}
		c.pos++
	}
	buf := []byte(string(c.in[start:c.pos]))
	for c.pos < len(c.in) {
		b := c.in[c.pos]
		switch {
		case b == '"':
			c.pos++
			return string(buf), nil
		case b < 0x20:
			return "", c.errf("control character in string")
		case b == '\\':
			if c.pos+1 >= len(c.in) {
				return "", c.errf("unexpected end of input in string")
			}
			e := c.in[c.pos+1]
			c.pos += 2
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
				r, ok := c.hex4()
				if !ok {
					return "", c.errf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if r < 0xdc00 && c.pos+6 <= len(c.in) && c.in[c.pos] == '\\' && c.in[c.pos+1] == 'u' {
						save := c.pos
						c.pos += 2
						r2, ok2 := c.hex4()
						if ok2 && r2 >= 0xdc00 && r2 <= 0xdfff {
							buf = utf8.AppendRune(buf, utf16.DecodeRune(r, r2))
							continue
						}
						c.pos = save
					}
					buf = appendLoneSurrogate(buf, r)
					continue
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", c.errf("invalid escape")
			}
		default:
			buf = append(buf, b)
			c.pos++
		}
	}
	return "", c.errf("unexpected end of input in string")
}

func (c *canon) hex4() (rune, bool) {
	if c.pos+4 > len(c.in) {
		return 0, false
	}
	var r rune
	for i := 0; i < 4; i++ {
		h := c.in[c.pos+i]
		switch {
		case h >= '0' && h <= '9':
			r = r<<4 | rune(h-'0')
		case h >= 'a' && h <= 'f':
			r = r<<4 | rune(h-'a'+10)
		case h >= 'A' && h <= 'F':
			r = r<<4 | rune(h-'A'+10)
		default:
			return 0, false
		}
	}
	c.pos += 4
	return r, true
}

// Lone surrogates cannot live in valid UTF-8; they are kept as the 3-byte
// "WTF-8" encoding (ED A0..BF xx), which appendPyString recognises and writes
// back as \udXXX, as Python does.
func appendLoneSurrogate(buf []byte, r rune) []byte {
	return append(buf, 0xED, byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
}

const hexdigits = "0123456789abcdef"

func appendU4(out []byte, r rune) []byte {
	return append(out, '\\', 'u', hexdigits[(r>>12)&0xF], hexdigits[(r>>8)&0xF], hexdigits[(r>>4)&0xF], hexdigits[r&0xF])
}

// appendPyString writes s as Python's json.dumps(s, ensure_ascii=True) would.
func appendPyString(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"':
				out = append(out, '\\', '"')
			case b == '\\':
				out = append(out, '\\', '\\')
			case b == '\n':
				out = append(out, '\\', 'n')
			case b == '\r':
				out = append(out, '\\', 'r')
			case b == '\t':
				out = append(out, '\\', 't')
			case b == '\b':
				out = append(out, '\\', 'b')
			case b == '\f':
				out = append(out, '\\', 'f')
			case b < 0x20 || b == 0x7f:
				out = appendU4(out, rune(b))
			default:
				out = append(out, b)
			}
			i++
			continue
		}
		// lone surrogate kept as WTF-8
		if b == 0xED && i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF && s[i+2]&0xC0 == 0x80 {
			r := rune(0xD000) | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)
			out = appendU4(out, r)
			i += 3
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r > 0xFFFF {
			r1, r2 := utf16.EncodeRune(r)
			out = appendU4(out, r1)
			out = appendU4(out, r2)
			continue
		}
		out = appendU4(out, r) // invalid bytes decode to U+FFFD
	}
	return append(out, '"')
}

func (c *canon) number() error {
	start := c.pos
	isFloat := false
	if c.in[c.pos] == '-' {
		c.pos++
	}
	if c.pos >= len(c.in) {
		return c.errf("invalid number")
	}
	if c.in[c.pos] == '0' {
		c.pos++
	} else if c.in[c.pos] >= '1' && c.in[c.pos] <= '9' {
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
	} else {
		return c.errf("invalid number")
	}
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		isFloat = true
		c.pos++
		d := c.pos
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
		if c.pos == d {
			return c.errf("invalid number")
		}
	}
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		isFloat = true
		c.pos++
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			c.pos++
		}
		d := c.pos
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
		if c.pos == d {
			return c.errf("invalid number")
		}
	}
	lit := c.in[start:c.pos]
	if !isFloat {
		if string(lit) == "-0" {
			c.out = append(c.out, '0')
		} else {
			c.out = append(c.out, lit...)
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil && !math.IsInf(f, 0) {
		return c.errf("invalid number")
	}
	c.out = appendPyFloat(c.out, f)
	return nil
}

// appendPyFloat writes f as Python's float repr (what json.dumps emits).
func appendPyFloat(out []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(out, "Infinity"...)
	case math.IsInf(f, -1):
		return append(out, "-Infinity"...)
	case math.IsNaN(f):
		return append(out, "NaN"...)
	}
	if f == 0 {
		if math.Signbit(f) {
			return append(out, "-0.0"...)
		}
		return append(out, "0.0"...)
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // -d.ddddde±XX
	neg := false
	if e[0] == '-' {
		neg = true
		e = e[1:]
	}
	// split mantissa digits and exponent
	var digits []byte
	i := 0
	for ; i < len(e) && e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits = append(digits, e[i])
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	if neg {
		out = append(out, '-')
	}
	if exp < -4 || exp >= 16 {
		out = append(out, digits[0])
		if len(digits) > 1 {
			out = append(out, '.')
			out = append(out, digits[1:]...)
		}
		out = append(out, 'e')
		if exp < 0 {
			out = append(out, '-')
			exp = -exp
		} else {
			out = append(out, '+')
		}
		if exp < 10 {
			out = append(out, '0')
		}
		return strconv.AppendInt(out, int64(exp), 10)
	}
	if exp < 0 {
		out = append(out, '0', '.')
		for j := 0; j < -exp-1; j++ {
			out = append(out, '0')
		}
		return append(out, digits...)
	}
	// exp >= 0: integer part has exp+1 digits
	if len(digits) <= exp+1 {
		out = append(out, digits...)
		for j := len(digits); j < exp+1; j++ {
			out = append(out, '0')
		}
		return append(out, '.', '0')
	}
	out = append(out, digits[:exp+1]...)
	out = append(out, '.')
	return append(out, digits[exp+1:]...)
}

// rawMember is one top-level member of a canonical JSON object.
type rawMember struct {
	Key   string
	Value []byte
}

// splitObject splits a JSON object into its members in order. It is meant
// for stored (canonical, already validated) text: values are delimited
// structurally, not re-validated. It returns ok=false when data is not an
// object.
func splitObject(data []byte) ([]rawMember, bool) {
	c := canon{in: data}
	c.skipWS()
	if c.pos >= len(c.in) || c.in[c.pos] != '{' {
		return nil, false
	}
	c.pos++
	ms := make([]rawMember, 0, 4)
	c.skipWS()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		return ms, true
	}
	for {
		c.skipWS()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return nil, false
		}
		key, err := c.str()
		if err != nil {
			return nil, false
		}
		c.skipWS()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return nil, false
		}
		c.pos++
		c.skipWS()
		vs := c.pos
		end, ok := skipStructural(data, vs)
		if !ok {
			return nil, false
		}
		c.pos = end
		ms = append(ms, rawMember{Key: key, Value: data[vs:end]})
		c.skipWS()
		if c.pos >= len(c.in) {
			return nil, false
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] == '}' {
			return ms, true
		}
		return nil, false
	}
}

// skipStructural returns the end of the JSON value starting at i, matching
// brackets and skipping strings; it does not validate scalars.
func skipStructural(data []byte, i int) (int, bool) {
	depth := 0
	for i < len(data) {
		switch data[i] {
		case '"':
			i++
			for i < len(data) && data[i] != '"' {
				if data[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(data) {
				return 0, false
			}
			i++
			if depth == 0 {
				return i, true
			}
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 { // ends a scalar member of the enclosing value
				return i, true
			}
			depth--
			i++
			if depth == 0 {
				return i, true
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i, true
			}
			i++
		default:
			i++
		}
	}
	if depth == 0 {
		return i, true
	}
	return 0, false
}

// jsonKindOf reports the kind of the JSON value in data: 'o' object, 'a'
// array, 's' string, 'n' number, 'b' boolean, 'z' null, 0 when empty.
func jsonKindOf(data []byte) byte {
	for _, b := range data {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return 'o'
		case '[':
			return 'a'
		case '"':
			return 's'
		case 't', 'f':
			return 'b'
		case 'n':
			return 'z'
		default:
			return 'n'
		}
	}
	return 0
}
