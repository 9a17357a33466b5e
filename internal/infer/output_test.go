package infer

import (
	"strings"
	"testing"
)

// TestStopFilterHoldsBack feeds text in pieces: a piece that may begin a
// stop string is held back until the next piece decides it, and the output
// ends before the stop string.
func TestStopFilterHoldsBack(t *testing.T) {
	o := &textOutput{stop: []string{"END", "xyz"}}
	var out strings.Builder
	steps := []struct{ in, emit string }{{"hel", "hel"}, {"lo E", "lo "}, {"N", ""}, {"D more", ""}}
	for i, st := range steps {
		s, stop := o.filter(st.in)
		if s != st.emit {
			t.Fatalf("piece %d %q: emitted %q, want %q", i, st.in, s, st.emit)
		}
		out.WriteString(s)
		if stop != (i == len(steps)-1) {
			t.Fatalf("piece %d: stop %v", i, stop)
		}
	}
	if out.String() != "hello " {
		t.Fatalf("output %q", out.String())
	}
}

// TestStopFilterFalseStart: held-back text that turns out not to begin a
// stop string is emitted with the next piece.
func TestStopFilterFalseStart(t *testing.T) {
	o := &textOutput{stop: []string{"END"}}
	if s, _ := o.filter("an E"); s != "an " {
		t.Fatalf("%q", s)
	}
	if s, stop := o.filter("ND?"); s != "" || !stop {
		t.Fatalf("%q %v: want the stop found", s, stop)
	}
	o = &textOutput{stop: []string{"END"}}
	o.filter("an E")
	if s, stop := o.filter("Ngland"); s != "ENgland" || stop {
		t.Fatalf("%q %v", s, stop)
	}
}

func TestHeldPrefix(t *testing.T) {
	for _, c := range []struct {
		s    string
		tags []string
		want int
	}{
		{"abc<tool", []string{"<tool_call>"}, 5},
		{"abc", []string{"<tool_call>"}, 0},
		{"x<tool_call>", []string{"<tool_call>"}, 0}, // a whole tag is not a partial one
		{"say EN", []string{"END", "NOPE"}, 2},
		{"", []string{"END"}, 0},
	} {
		if got := HeldPrefix(c.s, c.tags...); got != c.want {
			t.Fatalf("HeldPrefix(%q, %q) = %d, want %d", c.s, c.tags, got, c.want)
		}
	}
}
