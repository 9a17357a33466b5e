package tokenizer

import "testing"

// TestVocabStrings pins how tokenizer.json's strings decode, as
// encoding/json does: each invalid UTF-8 byte and each lone surrogate
// escape becomes U+FFFD; a surrogate pair is one code point. A merge's
// token without escapes is taken as its bytes.
func TestVocabStrings(t *testing.T) {
	v, err := parseVocab([]byte("{\"a\xff\xfeb\": 1, \"\\ud800x\": 2, \"\\ud83d\\ude00\": 3, \"\\udc00\\ud800\": 4}"))
	if err != nil {
		t.Fatal(err)
	}
	for k, id := range map[string]int{"a\uFFFD\uFFFDb": 1, "\uFFFDx": 2, "😀": 3, "\uFFFD\uFFFD": 4} {
		if v[k] != id {
			t.Errorf("vocab[%q] = %d, want %d (vocab %v)", k, v[k], id, v)
		}
	}
	for _, bad := range []string{`{"a": 1.5}`, `{"a": "1"}`, `{"a": 1,}`, `{"a" 1}`, `{"a": 01}`} {
		if _, err := parseVocab([]byte(bad)); err == nil {
			t.Errorf("parseVocab(%s) accepted", bad)
		}
	}
	sc := newReader([]byte("[\"a\xffb\", \"c\\u00e9\\ud800\"]"))
	var got []string
	if err := sc.Array(func(int) error {
		s, err := rawStr(sc)
		got = append(got, string(s))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "a\xffb" || got[1] != "cé\uFFFD" {
		t.Errorf("merge tokens %q", got)
	}
}
