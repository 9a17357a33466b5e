package chattmpl

import (
	"strings"
	"testing"
)

// TestParseJSONStrings pins how JSON strings become template strings: each
// run of invalid UTF-8 bytes is one U+FFFD (strings.ToValidUTF8), a lone
// surrogate escape U+FFFD, a pair its code point; objects keep key order and
// numbers are int or float64.
func TestParseJSONStrings(t *testing.T) {
	for in, want := range map[string]string{
		"\"a\xff\xfeb\"":         "a\uFFFDb",
		"\"a\xff\\u0041\xfeb\"":  "a\uFFFDA\uFFFDb",
		`"\ud800c"`:              "\uFFFDc",
		`"\ud800\ud800"`:         "\uFFFD\uFFFD",
		`"\udc00\ud83d\ude00"`:   "\uFFFD😀",
		"\"\xef\xbf\xbd\xff\"":   "\uFFFD\uFFFD",
		"\"\\ud800\xff\xfe\"":    "\uFFFD\uFFFD",
		`"\u00e9\n\"\\\/\b\f\r"`: "é\n\"\\/\b\f\r",
	} {
		v, err := ParseJSON([]byte(in))
		if err != nil || v != want {
			t.Errorf("ParseJSON(%q) = %q, %v; want %q", in, v, err, want)
		}
	}
	v, err := ParseJSON([]byte(` {"b": [1, 2.5, 1e400, -3], "a": {"x": null, "y": true}} `))
	if err != nil {
		t.Fatal(err)
	}
	if got := pyRepr(v); got != "{'b': [1, 2.5, inf, -3], 'a': {'x': None, 'y': True}}" {
		t.Errorf("ParseJSON = %s", got)
	}
	for _, bad := range []string{``, `{`, `{"a"}`, `[1,]`, `01`, `"\x"`, "\"a\x01\"", `{} {}`, `NaN`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001)} {
		if _, err := ParseJSON([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "chattmpl: invalid JSON at byte ") {
			t.Errorf("ParseJSON(%.20q): %v", bad, err)
		}
	}
}
