// Package names decides which characters a user-chosen name may hold:
// entity, project and model names, user and key names, file names, metric
// splits, call-store projects. Names are shown in listings, logs and
// terminals, so characters that are invisible or that change how the text
// around them is displayed are refused: control characters (C0, DEL, C1),
// format characters (bidirectional overrides and isolates, zero-width
// characters, the BOM), line and paragraph separators, and bytes that are
// not UTF-8.
package names

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check returns an error describing the first character of s a name may
// not hold (its position in bytes and its code point), or nil.
func Check(s string) error {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			return fmt.Errorf("is not valid UTF-8 (at byte %d)", i)
		case unicode.IsControl(r):
			return fmt.Errorf("must not contain control characters (U+%04X at byte %d)", r, i)
		case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r):
			return fmt.Errorf("must not contain invisible or bidirectional formatting characters (U+%04X at byte %d)", r, i)
		}
	}
	return nil
}

// validAt reports whether the U+FFFD at byte i of s is really encoded
// there (and not a decoding error).
func validAt(s string, i int) bool {
	r, n := utf8.DecodeRuneInString(s[i:])
	return r == utf8.RuneError && n == 3
}
