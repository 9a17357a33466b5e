// Package jsonlex is the tree's one JSON lexer: whitespace, strings (checked
// as tokens, decoded with a chosen treatment of invalid UTF-8 and lone
// surrogates), numbers (as their raw text), literals, skipping a whole value
// under a depth limit, and a small Reader that walks objects and arrays with
// callbacks. Errors carry the byte offset (SyntaxError). Path and Kind name a
// value's place and type for "expected X, got Y" errors.
//
// It is the shape of encoding/json's scanner without its reflection: the
// call store's ingest (trace), the RL training-payload validator (rl), the
// tokenizer.json loader and the chat template's JSON values (chattmpl) are
// builders on top of it, each producing what it needs (canonical text, a
// validated summary, a vocabulary, template values) in one pass over the
// bytes. What it accepts is exactly RFC 8259 JSON, as encoding/json does
// (fuzzed against it in fuzz_test.go), plus, only where asked, Python's
// NaN / Infinity / -Infinity (the call store writes overflow that way).
package jsonlex

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// SyntaxError is malformed JSON at a byte offset of the input.
type SyntaxError struct {
	Offset int    // where the problem is; len(input) when the input ended early
	Msg    string // what is wrong, e.g. "unterminated string"
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at byte " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

func errAt(off int, msg string) error { return &SyntaxError{Offset: off, Msg: msg} }

// SkipSpace returns the offset of the first byte at or after i that is not
// whitespace (len(d) when there is none).
func SkipSpace(d []byte, i int) int {
	for ; i < len(d); i++ {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return i
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

// ScanString checks the string token that starts at d[i] (a '"') and
// returns the offset just past its closing quote and whether it holds
// escapes; its contents are d[i+1:end-1]. It checks the token's syntax
// (escapes, no control characters), not its UTF-8: decoding decides that
// (see Mode).
func ScanString(d []byte, i int) (end int, escaped bool, err error) {
	if i >= len(d) || d[i] != '"' {
		return i, false, errAt(i, "expected a string")
	}
	for i++; i < len(d); i++ {
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
		switch c := d[i]; {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			i++
			if i >= len(d) {
				return len(d), false, errAt(len(d), "unterminated string")
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if i+k >= len(d) {
						return len(d), false, errAt(len(d), "unterminated string")
					}
					if !isHex(d[i+k]) {
						return i + k, false, errAt(i+k, `invalid \u escape in string`)
					}
				}
				i += 4
			default:
				return i, false, errAt(i, "invalid escape in string")
			}
		case c < 0x20:
			return i, false, errAt(i, "control character in string")
		}
	}
	return len(d), false, errAt(len(d), "unterminated string")
}

// Mode says how a decoded string treats bytes that are not valid UTF-8 and
// \u escapes of lone surrogates (a high one not followed by a low one's
// escape, or a low one alone). A valid pair decodes to its code point in
// every mode.
type Mode uint8

const (
	// Replace makes each invalid byte and each lone surrogate U+FFFD, as
	// encoding/json does.
	Replace Mode = iota
	// ReplaceRuns makes each run of invalid bytes one U+FFFD (as
	// strings.ToValidUTF8 does) and each lone surrogate U+FFFD.
	ReplaceRuns
	// WTF8 keeps invalid bytes as they are and writes a lone surrogate as its
	// 3-byte generalised UTF-8 form (ED A0..BF 80..BF), so that a writer can
	// give it back as the \udXXX escape it came from, as Python does.
	WTF8
)

// hex4 decodes the 4 hex digits at d[i:].
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

// AppendUnquoted appends the decoded contents of a string token to dst: raw
// is what lies between the quotes of a token ScanString accepted.
func AppendUnquoted(dst, raw []byte, m Mode) []byte {
	badRun := false // the last thing written was U+FFFD for invalid bytes (ReplaceRuns)
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			if c < utf8.RuneSelf || m == WTF8 {
				j := i + 1
				for j < len(raw) && raw[j] != '\\' && (raw[j] < utf8.RuneSelf || m == WTF8) {
					j++
				}
				dst = append(dst, raw[i:j]...)
				i, badRun = j, false
				continue
			}
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				if !badRun || m != ReplaceRuns {
					dst = utf8.AppendRune(dst, utf8.RuneError)
				}
				i, badRun = i+1, true
				continue
			}
			dst = append(dst, raw[i:i+size]...)
			i, badRun = i+size, false
			continue
		}
		badRun = false
		if i+1 >= len(raw) {
			return append(dst, c) // not from ScanString; kept as it is
		}
		e := raw[i+1]
		i += 2
		switch e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw, i)
			if !ok {
				dst = append(dst, '\\', 'u') // not from ScanString; kept as it is
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// the tree's one surrogate-pair decoder
				if r < 0xDC00 && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r2, ok := hex4(raw, i+2); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
						dst = utf8.AppendRune(dst, utf16.DecodeRune(r, r2))
						i += 6
						continue
					}
				}
				if m == WTF8 {
					dst = append(dst, 0xED, byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
				} else {
					dst = utf8.AppendRune(dst, utf8.RuneError)
				}
				continue
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
	}
	return dst
}

// Unquote is AppendUnquoted as a string; contents without escapes that need
// no repair are converted directly.
func Unquote(raw []byte, escaped bool, m Mode) string {
	if !escaped && (m == WTF8 || utf8.Valid(raw)) {
		return string(raw)
	}
	return string(AppendUnquoted(make([]byte, 0, len(raw)), raw, m))
}

// ScanNumber checks the number token that starts at d[i] and returns the
// offset just past it (its text is d[i:end]) and whether it has a fraction
// or an exponent. A number that ends at len(d) is complete only if d is the
// whole input.
func ScanNumber(d []byte, i int) (end int, isFloat bool, err error) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i++; i < len(d) && d[i] >= '0' && d[i] <= '9'; i++ {
		}
	default:
		return i, false, errAt(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		isFloat = true
		if i, err = digits(d, i+1); err != nil {
			return i, false, err
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		isFloat = true
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i, err = digits(d, i); err != nil {
			return i, false, err
		}
	}
	return i, isFloat, nil
}

// digits reads the one or more digits at d[i] of a fraction or an exponent.
func digits(d []byte, i int) (int, error) {
	j := i
	for j < len(d) && d[j] >= '0' && d[j] <= '9' {
		j++
	}
	if j == i {
		return j, errAt(j, "invalid number")
	}
	return j, nil
}

// ScanLiteral checks that word (true, false, null) is at d[i] and returns
// the offset just past it.
func ScanLiteral(d []byte, i int, word string) (int, error) {
	if len(d)-i < len(word) || string(d[i:i+len(word)]) != word {
		return i, errAt(i, "invalid literal")
	}
	return i + len(word), nil
}

// scanNonFinite reads Python's NaN, Infinity or -Infinity at d[i].
func scanNonFinite(d []byte, i int) (int, bool) {
	for _, w := range [...]string{"NaN", "Infinity", "-Infinity"} {
		if end, err := ScanLiteral(d, i, w); err == nil {
			return end, true
		}
	}
	return i, false
}

// SkipValue checks the value that starts at d[i] (whitespace before it
// skipped) and returns the offset just past it. Objects and arrays may nest
// at most maxDepth deep (maxDepth <= 0: not at all). With nonFinite,
// Python's NaN, Infinity and -Infinity are numbers too.
func SkipValue(d []byte, i, maxDepth int, nonFinite bool) (int, error) {
	var small [64]byte
	stack := small[:0] // the closing bracket of each open container
	i = SkipSpace(d, i)
	for {
		// a value at d[i]
		if i >= len(d) {
			return i, errAt(i, "unexpected end of input")
		}
		var err error
		switch c := d[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return i, errAt(i, "nesting too deep")
			}
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			stack = append(stack, closer)
			i = SkipSpace(d, i+1)
			if i < len(d) && d[i] == closer {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i, err = skipKey(d, i); err != nil {
					return i, err
				}
			}
			continue
		case c == '"':
			i, _, err = ScanString(d, i)
		case c == 't':
			i, err = ScanLiteral(d, i, "true")
		case c == 'f':
			i, err = ScanLiteral(d, i, "false")
		case c == 'n':
			i, err = ScanLiteral(d, i, "null")
		case c == '-' || c >= '0' && c <= '9':
			if nonFinite && c == '-' {
				if end, ok := scanNonFinite(d, i); ok {
					i = end
					break
				}
			}
			i, _, err = ScanNumber(d, i)
		case nonFinite && (c == 'N' || c == 'I'):
			var ok bool
			if i, ok = scanNonFinite(d, i); !ok {
				err = errAt(i, "invalid literal")
			}
		default:
			return i, errAt(i, "expected a value")
		}
		if err != nil {
			return i, err
		}
		// after a value: closer containers or go on to the next member
		for {
			if len(stack) == 0 {
				return i, nil
			}
			i = SkipSpace(d, i)
			if i >= len(d) {
				return i, errAt(i, "unexpected end of input")
			}
			closer := stack[len(stack)-1]
			if d[i] == closer {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if d[i] != ',' {
				if closer == '}' {
					return i, errAt(i, "expected ',' or '}' in object")
				}
				return i, errAt(i, "expected ',' or ']' in array")
			}
			i = SkipSpace(d, i+1)
			if closer == '}' {
				if i, err = skipKey(d, i); err != nil {
					return i, err
				}
			}
			break
		}
	}
}

// skipKey reads `"key" :` and the whitespace after it.
func skipKey(d []byte, i int) (int, error) {
	if i >= len(d) || d[i] != '"' {
		return i, errAt(i, "expected a string key")
	}
	i, _, err := ScanString(d, i)
	if err != nil {
		return i, err
	}
	i = SkipSpace(d, i)
	if i >= len(d) || d[i] != ':' {
		return i, errAt(i, "expected ':' after object key")
	}
	return SkipSpace(d, i+1), nil
}
