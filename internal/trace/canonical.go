package trace

import (
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"flywheel/internal/jsonlex"
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
// The canonicaliser is a single pass over the bytes (lexed by jsonlex) and
// also validates them. Strings decode in jsonlex's WTF8 mode: invalid UTF-8
// bytes are kept until appendPyString writes them as U+FFFD, and a lone
// surrogate escape is kept so that it is written back as that escape.

type canon struct {
	// the cursor: Data and Pos; strings decode in WTF8 mode (see above)
	jsonlex.Reader
	out []byte
	// scratch for object members, reused by nested objects through the stack
	depth int
	// sortKeys orders object members by key (Python's sort_keys=True: code
	// point order, which is UTF-8 byte order), as object digests need.
	sortKeys bool
}

// newCanon is a canonicaliser reading data.
func newCanon(data []byte) canon {
	return canon{Reader: jsonlex.Reader{Data: data, Mode: jsonlex.WTF8, MaxDepth: maxJSONDepth}}
}

const maxJSONDepth = 512

// Canonicalize returns the canonical form of the JSON value in data.
func Canonicalize(data []byte) ([]byte, error) { return canonicalize(data, false) }

// canonicalSorted returns the canonical form of data with every object's
// members sorted by key: the text of Python's json.dumps(v, sort_keys=True),
// over which Weave computes object digests.
func canonicalSorted(data []byte) ([]byte, error) { return canonicalize(data, true) }

func canonicalize(data []byte, sortKeys bool) ([]byte, error) {
	c := newCanon(data)
	c.out, c.sortKeys = make([]byte, 0, len(data)+len(data)/8+8), sortKeys
	c.skipWS()
	if err := c.value(); err != nil {
		return nil, err
	}
	if err := c.End(); err != nil {
		return nil, err
	}
	return c.out, nil
}

func (c *canon) skipWS() { c.Peek() }

func (c *canon) value() error {
	if c.Pos >= len(c.Data) {
		return c.Errorf("unexpected end of input")
	}
	switch b := c.Data[c.Pos]; {
	case b == '{':
		return c.object()
	case b == '[':
		return c.array()
	case b == '"':
		s, err := c.String()
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
		return c.Errorf("expected a value")
	}
}

func (c *canon) lit(s string) error {
	if err := c.Literal(s); err != nil {
		return err
	}
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
		return c.Errorf("nesting too deep")
	}
	defer func() { c.depth-- }()
	objStart := len(c.out)
	c.Pos++ // {
	c.out = append(c.out, '{')
	c.skipWS()
	if c.Pos < len(c.Data) && c.Data[c.Pos] == '}' {
		c.Pos++
		c.out = append(c.out, '}')
		return nil
	}
	var members []member
	var seen map[string]int
	dup := false
	for {
		c.skipWS()
		if c.Pos >= len(c.Data) || c.Data[c.Pos] != '"' {
			return c.Errorf("expected a string key")
		}
		if len(members) > 0 {
			c.out = append(c.out, ", "...)
		}
		mStart := len(c.out)
		key, err := c.String()
		if err != nil {
			return err
		}
		c.out = appendPyString(c.out, key)
		c.skipWS()
		if c.Pos >= len(c.Data) || c.Data[c.Pos] != ':' {
			return c.Errorf("expected ':'")
		}
		c.Pos++
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
		if c.Pos >= len(c.Data) {
			return c.Errorf("unexpected end of input in object")
		}
		if c.Data[c.Pos] == ',' {
			c.Pos++
			continue
		}
		if c.Data[c.Pos] == '}' {
			c.Pos++
			break
		}
		return c.Errorf("expected ',' or '}'")
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
		return c.Errorf("nesting too deep")
	}
	defer func() { c.depth-- }()
	c.Pos++
	c.out = append(c.out, '[')
	c.skipWS()
	if c.Pos < len(c.Data) && c.Data[c.Pos] == ']' {
		c.Pos++
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
		if c.Pos >= len(c.Data) {
			return c.Errorf("unexpected end of input in array")
		}
		if c.Data[c.Pos] == ',' {
			c.Pos++
			continue
		}
		if c.Data[c.Pos] == ']' {
			c.Pos++
			c.out = append(c.out, ']')
			return nil
		}
		return c.Errorf("expected ',' or ']'")
	}
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
	lit, isFloat, err := c.Number()
	if err != nil {
		return err
	}
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
		return c.Errorf("invalid number")
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
// for stored (canonical) text, which may hold Infinity, -Infinity and NaN
// where a float overflowed. It returns ok=false when data is not such an
// object.
func splitObject(data []byte) ([]rawMember, bool) {
	r := jsonlex.Reader{Data: data, Mode: jsonlex.WTF8, MaxDepth: maxJSONDepth}
	if r.Peek() != '{' {
		return nil, false
	}
	ms := make([]rawMember, 0, 4)
	err := r.Object(func(key string) error {
		start := r.Pos
		end, err := jsonlex.SkipValue(data, start, maxJSONDepth, true)
		r.Pos = end
		ms = append(ms, rawMember{Key: key, Value: data[start:end]})
		return err
	})
	if err != nil {
		return nil, false
	}
	return ms, true
}

// jsonKindOf reports the kind of the JSON value in data: 'o' object, 'a'
// array, 's' string, 'n' number, 'b' boolean, 'z' null, 0 when empty.
var jsonKindOf = jsonlex.KindOfValue
