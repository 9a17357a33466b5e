package names

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"", "agent-1", "my_project.v2", "Ünïcödé", "模型", "emoji-🙂", "a\uFFFDb", "with space"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v", ok, err)
		}
	}
	for _, c := range []struct{ s, want string }{
		{"p\x00x", "U+0000 at byte 1"},
		{"p\ax", "U+0007"},
		{"p\x1bx", "U+001B"},
		{"p\x7fx", "U+007F"},
		{"p\u0085x", "U+0085"},
		{"p\u202ex", "U+202E"}, // right-to-left override
		{"p\u2066x", "U+2066"}, // left-to-right isolate
		{"p\u200bx", "U+200B"}, // zero-width space
		{"p\u200fx", "U+200F"}, // right-to-left mark
		{"\ufeffp", "U+FEFF"},
		{"p\u2028x", "U+2028"},
		{"p\u2029x", "U+2029"},
		{"p\xffx", "not valid UTF-8 (at byte 1)"},
		{"p\xe2\x80x", "not valid UTF-8"},
	} {
		err := Check(c.s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%q) = %v, want %q", c.s, err, c.want)
		}
	}
}
