package trace

import (
	"strings"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"a":5,"b":10}`, `{"a": 5, "b": 10}`},
		{" { \"a\" :\n5 ,\t\"b\": 10 } ", `{"a": 5, "b": 10}`},
		{`{"b": 1, "a": 2}`, `{"b": 1, "a": 2}`}, // order received
		{`{}`, `{}`},
		{`[]`, `[]`},
		{`[1,[2,{}],{"x":[]}]`, `[1, [2, {}], {"x": []}]`},
		{`null`, `null`},
		{`true`, `true`},
		{`"caf\u00e9"`, `"caf\u00e9"`},
		{`"café"`, `"caf\u00e9"`},
		{`"日本"`, `"\u65e5\u672c"`},
		{`"😀"`, `"\ud83d\ude00"`},
		{`"\ud83d\ude00"`, `"\ud83d\ude00"`},
		{`"\uD83D\uDE00"`, `"\ud83d\ude00"`},
		{`"\ud800"`, `"\ud800"`}, // lone surrogate kept, as Python does
		{`"\u0041\/"`, `"A/"`},
		{`"a\"b\\c\n\r\t\b\f"`, `"a\"b\\c\n\r\t\b\f"`},
		{`"\u0001\u001f\u007f"`, `"\u0001\u001f\u007f"`},
		{`"<&>"`, `"<&>"`},
		{`{"a": 1, "b": 2, "a": 3}`, `{"a": 3, "b": 2}`}, // first position, last value
		{`1.0`, `1.0`},
		{`1.50`, `1.5`},
		{`1e-05`, `1e-05`},
		{`0.00001`, `1e-05`},
		{`0.0001`, `0.0001`},
		{`1E5`, `100000.0`},
		{`1e16`, `1e+16`},
		{`1.5e300`, `1.5e+300`},
		{`123456789.125`, `123456789.125`},
		{`0.1`, `0.1`},
		{`-2.5`, `-2.5`},
		{`-0.0`, `-0.0`},
		{`-0`, `0`},
		{`12345678901234567890123`, `12345678901234567890123`},
		{`1e400`, `Infinity`},
		{`3e-05`, `3e-05`},
	}
	for _, c := range cases {
		got, err := Canonicalize([]byte(c.in))
		if err != nil {
			t.Errorf("Canonicalize(%s): %v", c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("Canonicalize(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	if got, _ := Canonicalize([]byte(`{"a": 5, "b": 10}`)); len(got) != 17 {
		t.Errorf("size of the example inputs = %d, want 17", len(got))
	}
	for _, bad := range []string{``, `{`, `{"a"}`, `{"a":}`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `"\x"`, `"\u12"`,
		"\"a\x01\"", `tru`, `{} {}`, `{a:1}`, `NaN`, strings.Repeat("[", 600) + strings.Repeat("]", 600)} {
		if _, err := Canonicalize([]byte(bad)); err == nil {
			t.Errorf("Canonicalize(%q) accepted invalid JSON", bad)
		}
	}
}

func TestSplitObject(t *testing.T) {
	ms, ok := splitObject([]byte(`{"a": {"x": [1, 2]}, "b": "s", "c": null}`))
	if !ok || len(ms) != 3 || ms[0].Key != "a" || string(ms[0].Value) != `{"x": [1, 2]}` || string(ms[2].Value) != "null" {
		t.Fatalf("splitObject = %+v, %v", ms, ok)
	}
	ms, ok = splitObject([]byte(`{"s": "a\"}b", "n": -1.5e3, "t": true, "o": {"x": "]"}, "z": null}`))
	if !ok || len(ms) != 5 || string(ms[0].Value) != `"a\"}b"` || string(ms[1].Value) != "-1.5e3" || string(ms[3].Value) != `{"x": "]"}` || string(ms[4].Value) != "null" {
		t.Fatalf("splitObject = %+v, %v", ms, ok)
	}
	if _, ok := splitObject([]byte(`[1]`)); ok {
		t.Fatal("splitObject accepted an array")
	}
}

func TestUUIDv7AndIDs(t *testing.T) {
	prev := ""
	for i := 0; i < 5000; i++ {
		id := NewUUIDv7()
		if len(id) != 36 || id[14] != '7' || !strings.ContainsAny(id[19:20], "89ab") || !validID(id) {
			t.Fatalf("bad UUIDv7 %q", id)
		}
		if id <= prev {
			t.Fatalf("UUIDv7 not increasing: %s after %s", id, prev)
		}
		prev = id
	}
	for _, ok := range []string{"0190f4d2-1c2b-7cc3-8a3e-5f4c2b1a0e9d", "0190F4D2-1C2B-7CC3-8A3E-5F4C2B1A0E9D",
		"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"} {
		if !validID(ok) {
			t.Errorf("validID(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "abc", "not-a-uuid-not-a-uuid-not-a-uuid-123", "0190f4d2-1c2b-7cc3-8a3e-5f4c2b1a0e9", "0190f4d21c2b-7cc3-8a3e-5f4c2b1a0e9dd",
		"00000000000000000000000000000000", "0000000000000000", "zz0f067aa0ba902b", "4bf92f3577b34da6a3ce929d0e0e47"} {
		if validID(bad) {
			t.Errorf("validID(%q) = true", bad)
		}
	}
}

func TestParseTime(t *testing.T) {
	want := int64(1735787045123456)
	for _, s := range []string{"2025-01-02T03:04:05.123456Z", "2025-01-02T03:04:05.123456+00:00", "2025-01-02T03:04:05.123456",
		"2025-01-02 03:04:05.123456", "2025-01-02T04:04:05.123456789+01:00"} {
		got, ok := parseTime(s)
		if !ok || got != want {
			t.Errorf("parseTime(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	if formatTime(want) != "2025-01-02T03:04:05.123456Z" {
		t.Errorf("formatTime = %s", formatTime(want))
	}
	if _, ok := parseTime("yesterday"); ok {
		t.Error("parseTime accepted garbage")
	}
}
