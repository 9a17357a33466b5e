package trace

import (
	"strings"
	"testing"
)

// TestCanonicalStrings pins how stored strings treat bad text, as Python's
// json.dumps of what Python's json.loads reads: a lone surrogate escape is
// kept and written back as that escape; each invalid UTF-8 byte is written
// as \ufffd; a pair is one code point, written as its pair.
func TestCanonicalStrings(t *testing.T) {
	for in, want := range map[string]string{
		`"\udc00\ud800"`:           `"\udc00\ud800"`,
		`"\ud800\u0041"`:           `"\ud800A"`,
		`"\ud83d\ude00\ud83d"`:     `"\ud83d\ude00\ud83d"`,
		"\"a\xff\xfeb\"":           `"a\ufffd\ufffdb"`,
		"\"\xe2\x82\"":             `"\ufffd\ufffd"`,
		"{\"k\xff\": \"\\udfff\"}": `{"k\ufffd": "\udfff"}`,
	} {
		got, err := Canonicalize([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("Canonicalize(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	// stored text may hold a float's overflow; splitObject reads it
	ms, ok := splitObject([]byte(`{"a": Infinity, "b": [-Infinity, NaN], "c": "x"}`))
	if !ok || len(ms) != 3 || string(ms[0].Value) != "Infinity" || string(ms[1].Value) != "[-Infinity, NaN]" {
		t.Errorf("splitObject = %+v, %v", ms, ok)
	}
	_, err := Canonicalize([]byte(`{"a": [1, 2,]}`))
	if err == nil || !strings.HasPrefix(err.Error(), "invalid JSON at byte 12: ") {
		t.Errorf("Canonicalize error %v", err)
	}
}
