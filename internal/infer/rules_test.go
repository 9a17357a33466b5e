package infer

import (
	"slices"
	"testing"

	"flywheel/internal/engine/tiny"
)

// TestRules: the tiny model's generation rules as the scheduler decides
// them: its context (capped by Options.MaxLen), the end tokens its files
// declare plus the template's end of turn, <|im_end|> as a forced tool
// call's end, and the tool-call markers as the kept special tokens.
func TestRules(t *testing.T) {
	m := tinyLM(t)
	tk := tiny.Vocab(tiny.DefaultSpec())
	r := startScheduler(t, m, Options{}).Rules()
	if r.MaxLen() != m.MaxContext() {
		t.Errorf("MaxLen %d, want the model's %d", r.MaxLen(), m.MaxContext())
	}
	if got := startScheduler(t, m, Options{MaxLen: 100}).Rules().MaxLen(); got != 100 {
		t.Errorf("MaxLen with Options.MaxLen 100: %d", got)
	}
	if got := startScheduler(t, m, Options{MaxLen: m.MaxContext() + 1}).Rules().MaxLen(); got != m.MaxContext() {
		t.Errorf("MaxLen above the model's: %d, want %d", got, m.MaxContext())
	}
	if !slices.Equal(r.EOS(), []int{tk.ImEnd, tk.EndOfText}) || !r.IsEOS(tk.ImEnd) || !r.IsEOS(tk.EndOfText) || r.IsEOS(tk.ImStart) {
		t.Errorf("EOS %v, want [%d %d]", r.EOS(), tk.ImEnd, tk.EndOfText)
	}
	if !slices.Equal(r.TurnEnd(), []int{tk.ImEnd}) {
		t.Errorf("TurnEnd %v, want [%d]", r.TurnEnd(), tk.ImEnd)
	}
	if !slices.Equal(r.KeptTokens(), []int{tk.ToolCall, tk.ToolEnd}) || !r.Kept(tk.ToolCall) || r.Kept(tk.ImEnd) {
		t.Errorf("kept %v, want [%d %d]", r.KeptTokens(), tk.ToolCall, tk.ToolEnd)
	}
	if r.Room(10) != r.MaxLen()-10 {
		t.Errorf("Room(10) = %d", r.Room(10))
	}
	for _, c := range []struct {
		finish string
		calls  bool
		want   string
	}{{FinishStop, true, FinishToolCalls}, {FinishStop, false, FinishStop}, {FinishLength, true, FinishLength}, {FinishCancelled, true, FinishCancelled}} {
		if got := FinishReason(c.finish, c.calls); got != c.want {
			t.Errorf("FinishReason(%q, %v) = %q, want %q", c.finish, c.calls, got, c.want)
		}
	}
}
