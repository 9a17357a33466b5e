package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's bytes_to_unicode table: every byte maps to a printable
// rune; runeToByte is its inverse.
var (
	byteToRune [256]rune
	runeToByte [324]int16 // -1: not in the alphabet (the largest rune is U+0143)
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// appendByteLevelDecode appends the raw bytes of a byte-level token string to
// dst. ok is false (and dst unchanged) when some rune is outside the byte
// alphabet.
func appendByteLevelDecode(dst []byte, tok string) (out []byte, ok bool) {
	n := len(dst)
	for _, r := range tok {
		if r >= rune(len(runeToByte)) || runeToByte[r] < 0 {
			return dst[:n], false
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst, true
}

// ByteLevelEncode maps raw bytes to the byte-level alphabet (the form in which
// byte-level BPE vocabularies spell their tokens, e.g. " the" -> "Ġthe").
func ByteLevelEncode(raw string) string {
	buf := make([]byte, 0, len(raw)*2)
	for i := 0; i < len(raw); i++ {
		buf = utf8.AppendRune(buf, byteToRune[raw[i]])
	}
	return string(buf)
}
