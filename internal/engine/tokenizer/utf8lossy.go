package tokenizer

import "unicode/utf8"

// seqStatus inspects the UTF-8 sequence that starts at b[0] using the
// "maximal subpart" rule (the one Rust's String::from_utf8_lossy and
// therefore Hugging Face tokenizers use).
//
//	n > 0, valid:            a complete, valid character of n bytes
//	n > 0, !valid, !partial:  an invalid subsequence of n bytes (one U+FFFD)
//	partial:                  b is a valid but truncated prefix (needs more bytes)
func seqStatus(b []byte) (n int, valid, partial bool) {
	c := b[0]
	if c < 0x80 {
		return 1, true, false
	}
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, false, false
	}
	i := 1
	for k := 0; k < need; k++ {
		if i >= len(b) {
			return i, false, true
		}
		x := b[i]
		if x < lo || x > hi {
			return i, false, false
		}
		lo, hi = 0x80, 0xBF
		i++
	}
	return i, true, false
}

// appendLossy appends src to dst replacing each maximal invalid subsequence
// with U+FFFD. If hold is true, a truncated (possibly valid) sequence at the
// end of src is not consumed; rest reports how many trailing bytes were held.
func appendLossy(dst, src []byte, hold bool) (out []byte, rest int) {
	for i := 0; i < len(src); {
		// Fast path for runs of ASCII.
		if src[i] < 0x80 {
			j := i + 1
			for j < len(src) && src[j] < 0x80 {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		n, valid, partial := seqStatus(src[i:])
		switch {
		case valid:
			dst = append(dst, src[i:i+n]...)
		case partial && hold:
			return dst, len(src) - i
		default:
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
		i += n
	}
	return dst, 0
}

// lossyString converts b to a string the way Rust's from_utf8_lossy does.
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out, _ := appendLossy(make([]byte, 0, len(b)+8), b, false)
	return string(out)
}
