package tokenizer

import (
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// nfcInert marks BMP runes that are NFC-stable, have combining class 0 and
// never combine with a preceding character. A string made only of such
// runes is already in NFC, which lets the common case skip x/text's slower
// per-rune quick check.
var (
	nfcInert     [0x10000 / 64]uint64
	nfcInertOnce sync.Once
)

func initNFCInert() {
	nfcInertOnce.Do(func() {
		var buf [4]byte
		for r := rune(0x80); r < 0x10000; r++ {
			if !utf8.ValidRune(r) { // a surrogate
				continue
			}
			n := utf8.EncodeRune(buf[:], r)
			p := norm.NFC.Properties(buf[:n])
			if p.CCC() == 0 && p.BoundaryBefore() && p.BoundaryAfter() && norm.NFC.IsNormal(buf[:n]) {
				nfcInert[r>>6] |= 1 << (r & 63)
			}
		}
	})
}

func isNFCInert(r rune) bool { return r < 0x10000 && nfcInert[r>>6]&(1<<(r&63)) != 0 }

// nfcString returns s in NFC. Only the stretches around non-inert runes go
// through x/text/norm; they are cut at normalization boundaries (ASCII and
// inert runes), so normalizing them separately gives the same result.
func nfcString(s string) string {
	var out []byte // nil while nothing changed
	copied := 0    // s[:copied] is already in out
	prevStart := 0 // start of the last ASCII/inert rune: a boundary
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			prevStart = i
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if isNFCInert(r) {
			prevStart = i
			i += w
			continue
		}
		j := i + w
		for j < len(s) {
			if s[j] < utf8.RuneSelf {
				break
			}
			r2, w2 := utf8.DecodeRuneInString(s[j:])
			if isNFCInert(r2) {
				break
			}
			j += w2
		}
		chunk := s[prevStart:j]
		if n := norm.NFC.String(chunk); n != chunk {
			if out == nil {
				out = make([]byte, 0, len(s)+8)
			}
			out = append(out, s[copied:prevStart]...)
			out = append(out, n...)
			copied = j
		}
		i = j
	}
	if out == nil {
		return s
	}
	return string(append(out, s[copied:]...))
}
