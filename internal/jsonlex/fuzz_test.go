package jsonlex

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzJSON checks the lexer against encoding/json on arbitrary input:
//   - SkipValue accepts exactly what json.Valid accepts (same depth limit);
//   - the span it returns is the value, and the spans of an object's or an
//     array's members (Reader.Skip) are encoding/json's RawMessages;
//   - a string decodes (Mode Replace) to what json.Unmarshal gives, and the
//     other modes agree with it where they are meant to;
//   - a number token is what encoding/json reads as a json.Number.
//
// The seed corpus is in testdata/fuzz/FuzzJSON; run it longer with
//
//	go test -run '^$' -fuzz FuzzJSON -fuzztime 60s ./internal/jsonlex
func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{"a": [1, -2.5e3, true, false, null], "b": {"c": "d\u00e9\ud83d\ude00"}}`,
		`"\ud800"`, `"\udc00\ud800"`, `"\ud800\u0041"`, "\"\xff\xfe a \xed\xa0\x80\"", `[[[]]]`, ` 0 `, `-0.0e+1`,
		`{"a":1,}`, `[1,]`, `01`, `1.`, `"\x"`, `"\u12"`, "\"a\x01\"", `tru`, `{} {}`, `{a:1}`, `NaN`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const depth = 10000 // encoding/json's
		end, err := SkipValue(data, 0, depth, false)
		ok := err == nil && SkipSpace(data, end) == len(data)
		if ok != json.Valid(data) {
			t.Fatalf("SkipValue(%q): end %d, err %v; json.Valid = %v", data, end, err, json.Valid(data))
		}
		if err != nil {
			if se, isSyntax := err.(*SyntaxError); !isSyntax || se.Offset < 0 || se.Offset > len(data) {
				t.Fatalf("SkipValue(%q): error %#v", data, err)
			}
			return
		}
		if !ok {
			return
		}
		start := SkipSpace(data, 0)
		if !bytes.Equal(data[start:end], bytes.TrimRight(data[start:], " \t\r\n")) {
			t.Fatalf("SkipValue(%q) span %q", data, data[start:end])
		}
		checkMembers(t, data)
		switch data[start] {
		case '"':
			checkString(t, data[start:end])
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			n, _, err := ScanNumber(data, start)
			var num json.Number
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			if err != nil || n != end || dec.Decode(&num) != nil || string(num) != string(data[start:end]) {
				t.Fatalf("ScanNumber(%q) = %d, %v; encoding/json %q", data, n, err, num)
			}
		}
	})
}

// checkMembers compares the members a Reader skips with encoding/json's.
func checkMembers(t *testing.T, data []byte) {
	r := Reader{Data: data, MaxDepth: 10000}
	switch r.Peek() {
	case '{':
		var want map[string]json.RawMessage
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		got := map[string]json.RawMessage{}
		err := r.Object(func(key string) error {
			raw, err := r.Skip()
			got[key] = raw
			return err
		})
		if err != nil || r.End() != nil {
			t.Fatalf("Reader on %q: %v", data, err)
		}
		if len(got) != len(want) {
			t.Fatalf("Reader on %q: %d keys, encoding/json %d", data, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("member %q of %q: %q, encoding/json %q", k, data, got[k], v)
			}
		}
	case '[':
		var want []json.RawMessage
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		n := 0
		err := r.Array(func(i int) error {
			raw, err := r.Skip()
			if err == nil && (i >= len(want) || !bytes.Equal(raw, want[i])) {
				t.Fatalf("element %d of %q: %q", i, data, raw)
			}
			n++
			return err
		})
		if err != nil || r.End() != nil || n != len(want) {
			t.Fatalf("Reader on %q: %d elements, %v", data, n, err)
		}
	}
}

// checkString decodes the string token tok in every mode.
func checkString(t *testing.T, tok []byte) {
	end, esc, err := ScanString(tok, 0)
	if err != nil || end != len(tok) {
		t.Fatalf("ScanString(%q) = %d, %v", tok, end, err)
	}
	raw := tok[1 : len(tok)-1]
	var want string
	if err := json.Unmarshal(tok, &want); err != nil {
		t.Fatal(err)
	}
	if got := Unquote(raw, esc, Replace); got != want {
		t.Fatalf("Unquote(%q, Replace) = %q, encoding/json %q", tok, got, want)
	}
	runs := Unquote(raw, esc, ReplaceRuns)
	if !utf8.ValidString(runs) {
		t.Fatalf("Unquote(%q, ReplaceRuns) = %q: not UTF-8", tok, runs)
	}
	// ReplaceRuns is Replace with each run of U+FFFD for invalid bytes made
	// one; on valid input the two agree.
	if utf8.Valid(raw) && runs != want {
		t.Fatalf("Unquote(%q, ReplaceRuns) = %q, Replace %q", tok, runs, want)
	}
	if !utf8.Valid(raw) && strings.Count(runs, "\uFFFD") > strings.Count(want, "\uFFFD") {
		t.Fatalf("Unquote(%q, ReplaceRuns) = %q, Replace %q", tok, runs, want)
	}
	// WTF8 differs from Replace only where the input has invalid bytes or
	// lone surrogates; both are replaced by U+FFFD when the result is made
	// valid.
	wtf := Unquote(raw, esc, WTF8)
	if utf8.ValidString(wtf) && wtf != want {
		t.Fatalf("Unquote(%q, WTF8) = %q, Replace %q", tok, wtf, want)
	}
}
