package jsonlex

import (
	"errors"
	"strings"
	"testing"
)

// TestModes pins each decoding mode on invalid UTF-8 and lone surrogates
// (the callers' contracts: Replace for the tokenizer and RL keys,
// ReplaceRuns for chat-template values, WTF8 for the call store).
func TestModes(t *testing.T) {
	cases := []struct {
		raw                 string
		replace, runs, wtf8 string
	}{
		{`plain`, "plain", "plain", "plain"},
		{`\ud83d\ude00`, "😀", "😀", "😀"},
		{`\uD83D\uDE00`, "😀", "😀", "😀"},
		{`\ud800`, "\uFFFD", "\uFFFD", "\xed\xa0\x80"},
		{`\udfff`, "\uFFFD", "\uFFFD", "\xed\xbf\xbf"},
		{`\ud800\u0041`, "\uFFFDA", "\uFFFDA", "\xed\xa0\x80A"},
		{`\udc00\ud800`, "\uFFFD\uFFFD", "\uFFFD\uFFFD", "\xed\xb0\x80\xed\xa0\x80"},
		{`\ud800\ud800\udc00`, "\uFFFD𐀀", "\uFFFD𐀀", "\xed\xa0\x80𐀀"},
		{"a\xff\xfeb", "a\uFFFD\uFFFDb", "a\uFFFDb", "a\xff\xfeb"},
		{"\xe2\x82", "\uFFFD\uFFFD", "\uFFFD", "\xe2\x82"},
		{"\xff\\u0041\xfe", "\uFFFDA\uFFFD", "\uFFFDA\uFFFD", "\xffA\xfe"},
		{"\\ud800\xff", "\uFFFD\uFFFD", "\uFFFD\uFFFD", "\xed\xa0\x80\xff"},
		{`\"\\\/\b\f\n\r\t\u00e9`, "\"\\/\b\f\n\r\té", "\"\\/\b\f\n\r\té", "\"\\/\b\f\n\r\té"},
	}
	for _, c := range cases {
		tok := []byte(`"` + c.raw + `"`)
		end, esc, err := ScanString(tok, 0)
		if err != nil || end != len(tok) {
			t.Fatalf("ScanString(%q) = %d, %v", tok, end, err)
		}
		raw := tok[1 : len(tok)-1]
		for m, want := range map[Mode]string{Replace: c.replace, ReplaceRuns: c.runs, WTF8: c.wtf8} {
			if got := Unquote(raw, esc, m); got != want {
				t.Errorf("Unquote(%q, mode %d) = %q, want %q", c.raw, m, got, want)
			}
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	for in, want := range map[string]string{
		``:             "invalid JSON at byte 0: unexpected end of input",
		`[1, 2`:        "invalid JSON at byte 5: unexpected end of input",
		`{"a" 1}`:      "invalid JSON at byte 5: expected ':' after object key",
		`{"a": 1 "b"}`: "invalid JSON at byte 8: expected ',' or '}' in object",
		`[1 2]`:        "invalid JSON at byte 3: expected ',' or ']' in array",
		`{1: 2}`:       "invalid JSON at byte 1: expected a string key",
		`"a\qb"`:       "invalid JSON at byte 3: invalid escape in string",
		`"\u12x4"`:     "invalid JSON at byte 5: invalid \\u escape in string",
		"\"a\tb\"":     "invalid JSON at byte 2: control character in string",
		`"abc`:         "invalid JSON at byte 4: unterminated string",
		`-`:            "invalid JSON at byte 1: invalid number",
		`1.e5`:         "invalid JSON at byte 2: invalid number",
		`nul`:          "invalid JSON at byte 0: invalid literal",
		`[[[1]]]`:      "invalid JSON at byte 2: nesting too deep",
		`x`:            "invalid JSON at byte 0: expected a value",
	} {
		_, err := SkipValue([]byte(in), 0, 2, false)
		var se *SyntaxError
		if !errors.As(err, &se) || err.Error() != want {
			t.Errorf("SkipValue(%q): %v, want %s", in, err, want)
		}
	}
	// Python's non-finite numbers, only where asked
	for _, in := range []string{`NaN`, `Infinity`, `-Infinity`, `[1, -Infinity, {"a": NaN}]`} {
		if _, err := SkipValue([]byte(in), 0, 10, false); err == nil {
			t.Errorf("SkipValue(%s) accepted a non-finite number", in)
		}
		if end, err := SkipValue([]byte(in), 0, 10, true); err != nil || end != len(in) {
			t.Errorf("SkipValue(%s, nonFinite) = %d, %v", in, end, err)
		}
	}
}

func TestReaderPathKind(t *testing.T) {
	r := Reader{Data: []byte(` {"a": [1, "x\u00e9", {"b": null}], "c": true} `), MaxDepth: 3}
	var got []string
	err := r.Object(func(k string) error {
		if k != "a" {
			raw, err := r.Skip()
			got = append(got, k+"="+string(raw))
			return err
		}
		return r.Array(func(i int) error {
			got = append(got, KindOf(r.Peek()).String())
			_, err := r.Skip()
			return err
		})
	})
	if err != nil || r.End() != nil || strings.Join(got, ",") != "a number,a string,an object,c=true" {
		t.Fatalf("Reader: %q, %v", got, err)
	}
	if r := (Reader{Data: []byte(`[[[[1]]]]`), MaxDepth: 3}); r.Array(func(int) error { _, err := r.Skip(); return err }) == nil {
		t.Error("Reader went deeper than MaxDepth")
	}

	p := Path("").Key("messages").Index(2).Key("content")
	if p != "messages[2].content" || p.Mismatch("a string", Number) != "messages[2].content: expected a string, got a number" ||
		Path("").Mismatch("a JSON object", Array) != "expected a JSON object, got an array" {
		t.Errorf("path %q", p)
	}
	st := MakePathStack(1) // grows past its room
	st.PushKey("trajectory_groups")
	st.PushIndex(0)
	st.SetIndex(3)
	n := st.Len()
	st.PushKey("reward")
	if st.Path() != "trajectory_groups[3].reward" {
		t.Errorf("stack %q", st.Path())
	}
	st.Truncate(n)
	if st.Path() != "trajectory_groups[3]" {
		t.Errorf("stack %q", st.Path())
	}
	for c, k := range map[byte]Kind{'{': Object, '[': Array, '"': String, 't': Bool, 'f': Bool, 'n': Null, '-': Number, '7': Number, 0: None, '}': Invalid} {
		if KindOf(c) != k {
			t.Errorf("KindOf(%q) = %v", c, KindOf(c))
		}
	}
	if KindOfValue([]byte("  \n")) != None || KindOfValue([]byte(" [1]")) != Array || None.String() != "nothing" || Null.String() != "null" {
		t.Error("KindOfValue")
	}
}
