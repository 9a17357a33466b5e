package jsonlex

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// PathAt names the innermost value holding a byte: scalars, containers by
// their brackets and the space between members, escaped keys unquoted,
// indices counted; offsets past the document, in invalid JSON or below
// encoding/json's nesting limit are not found.
func TestPathAt(t *testing.T) {
	doc := ` {"a": 1, "b\u0021": [true, {"c": "x,y"}, [ ]], "d": null} `
	cases := []struct {
		at   string // the first occurrence of this text in doc
		plus int    // bytes past its start
		want Path
		ok   bool
	}{
		{`{"a"`, 0, "", true},
		{`1`, 0, "a", true},
		{`"b\u0021"`, 3, "", true}, // a key is its object's
		{`[true`, 0, "b!", true},
		{`true`, 3, "b![0]", true},
		{`, {"c"`, 0, "b!", true}, // the comma between elements
		{`"x,y"`, 2, "b![1].c", true},
		{`[ ]`, 1, "b![2]", true},
		{`null`, 2, "d", true},
		{`} `, 0, "", true},
	}
	for _, c := range cases {
		i := indexOf(doc, c.at) + c.plus
		got, ok := PathAt([]byte(doc), i)
		if got != c.want || ok != c.ok {
			t.Errorf("PathAt at %d (%q+%d) = %q, %v; want %q, %v", i, c.at, c.plus, got, ok, c.want, c.ok)
		}
	}
	for _, c := range []struct {
		doc string
		off int
		// deeper than encoding/json's limit on the way
	}{{doc, len(doc) - 1}, {doc, len(doc) + 5}, {` [1, 2`, 6}, {`{"a" 1}`, 5}, {`{"a": 1}`, -1}, {``, 0},
		{strings.Repeat("[", 10002) + "1" + strings.Repeat("]", 10002), 10002}} {
		if got, ok := PathAt([]byte(c.doc), c.off); ok {
			t.Errorf("PathAt(%q, %d) = %q, true; want not found", c.doc, c.off, got)
		}
	}
}

// The offset of an encoding/json type error, less one, is the offending
// value's last byte (a scalar) or its opening bracket (a container of the
// wrong type): PathAt names the field with its indices, where the error's
// Field has none.
func TestPathAtTypeErrors(t *testing.T) {
	type msg struct {
		Content string `json:"content"`
	}
	type req struct {
		Messages []msg `json:"messages"`
		N        int   `json:"n"`
	}
	for _, c := range []struct {
		doc  string
		want Path
	}{
		{`{"messages": [{"content": "a"}, {"content": 5}]}`, "messages[1].content"},
		{`{"n": {"a": 1}}`, "n"},
		{`{"n": [1, 2]}`, "n"},
		{`{"messages": {"x": 1}}`, "messages"},
		{`{"messages": [{"content": "a"}, 7]}`, "messages[1]"},
		{`[1]`, ""},
	} {
		var r req
		err := json.Unmarshal([]byte(c.doc), &r)
		te, ok := err.(*json.UnmarshalTypeError)
		if !ok {
			t.Fatalf("%s: %v, want a type error", c.doc, err)
		}
		if got, ok := PathAt([]byte(c.doc), int(te.Offset)-1); got != c.want || !ok {
			t.Errorf("%s: PathAt(offset %d - 1) = %q, %v; want %q", c.doc, te.Offset, got, ok, c.want)
		}
	}
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	panic("no " + sub)
}

// FuzzPathAt: on arbitrary input PathAt never panics; on a valid document
// every byte of its value has a path, a byte before or after it none, and
// each path names a value that is there (a member's key path ends in an
// object, an index path in an array long enough).
//
//	go test -run '^$' -fuzz FuzzPathAt -fuzztime 60s ./internal/jsonlex
func FuzzPathAt(f *testing.F) {
	for _, s := range []string{
		` {"a": [1, {"b\u00e9": "x"}], "c": null} `, `[[], {}, [[1]]]`, `"s"`, ` 1 `, `{"a" 1}`, `[1,`, `{"a": {"b": [true, false]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for off := -1; off <= len(data)+1; off++ {
			PathAt(data, off)
		}
		end, err := SkipValue(data, 0, 10000, false)
		if err != nil || SkipSpace(data, end) != len(data) {
			return
		}
		var doc any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber() // numbers beyond float64's range are valid JSON
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%q: SkipValue accepts it, encoding/json does not: %v", data, err)
		}
		start := SkipSpace(data, 0)
		for off := range len(data) {
			p, ok := PathAt(data, off)
			if ok != (off >= start && off < end) {
				t.Fatalf("PathAt(%q, %d) = %q, %v; the value spans [%d, %d)", data, off, p, ok, start, end)
			}
			if ok && !pathExists(doc, string(p)) {
				t.Fatalf("PathAt(%q, %d) = %q, which the document does not have", data, off, p)
			}
		}
	})
}

// pathExists reports whether path (Path's syntax) names a value of doc;
// past a key holding '.' or '[' it is not checked further.
func pathExists(doc any, path string) bool {
	for path != "" {
		switch {
		case path[0] == '[':
			if m, ok := doc.(map[string]any); ok { // an empty key: Path writes "" + "[0]"
				v, ok := m[""]
				if !ok {
					return false
				}
				doc = v
				continue
			}
			j := strings.IndexByte(path, ']')
			n, err := strconv.Atoi(path[1:j])
			a, ok := doc.([]any)
			if err != nil || !ok || n >= len(a) {
				return false
			}
			doc, path = a[n], path[j+1:]
		default:
			path = strings.TrimPrefix(path, ".")
			j := strings.IndexAny(path, ".[")
			if j < 0 {
				j = len(path)
			}
			m, ok := doc.(map[string]any)
			if !ok {
				return false
			}
			v, ok := m[path[:j]]
			if !ok {
				return true // a key holding '.' or '[' splits here: not checked further
			}
			doc, path = v, path[j:]
		}
	}
	return true
}
