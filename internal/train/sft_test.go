package train

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/engine"
)

// greedy decodes up to max tokens at temperature 0 and returns the text
// (special tokens dropped) and whether it stopped on an end token.
func greedy(t testing.TB, m *engine.Model, ad *engine.Adapter, prompt []int, max int) (string, bool) {
	s := m.NewSeq(ad)
	defer s.Release()
	sm := engine.NewSampler(engine.SamplingParams{})
	eos := map[int]bool{}
	for _, id := range m.EOS() {
		eos[id] = true
	}
	var out []int
	toks := prompt
	for i := 0; i < max; i++ {
		logits, err := m.Forward([]*engine.Seq{s}, [][]int{toks})
		if err != nil {
			t.Fatal(err)
		}
		id, _, _ := sm.Sample(logits[0])
		if eos[id] {
			return m.Tokenizer.Decode(out, true), true
		}
		out = append(out, id)
		toks = []int{id}
	}
	return m.Tokenizer.Decode(out, true), false
}

func writeJSONL(t testing.TB, path string, rows []map[string]any) {
	var b strings.Builder
	for _, r := range rows {
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSFTMemorisesReply(t *testing.T) {
	e := newEnv(t, Options{}) // flywheel/tiny as the server ships it
	const reply = "The password is swordfish."
	user := map[string]any{"role": "user", "content": "What is the password?"}
	ex := map[string]any{"messages": []any{user, map[string]any{"role": "assistant", "content": reply}}}
	const steps = 30
	var rows []map[string]any
	for i := 0; i < steps; i++ {
		rows = append(rows, ex)
	}
	data := filepath.Join(t.TempDir(), "train.jsonl")
	writeJSONL(t, data, rows)

	// training-set loss before: one step at a negligible learning rate
	lossOf := func() float64 {
		small := filepath.Join(t.TempDir(), "probe.jsonl")
		writeJSONL(t, small, []map[string]any{ex})
		saved := e.step
		res, _, err := e.run("sft", map[string]any{"model_id": "m", "training_data_url": "file-x",
			"config": map[string]any{"batch_size": 1, "learning_rate": 1e-12}}, small)
		if err != nil {
			t.Fatal(err)
		}
		e.step = saved // discard the probe checkpoint
		return res.Metrics["loss"].(float64)
	}
	before := lossOf()
	res, evs, err := e.run("sft", map[string]any{"model_id": "m", "training_data_url": "file-x",
		"config": map[string]any{"batch_size": 1, "learning_rate": 1e-2, "assistant_turns": "last"}}, data)
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Type != "training_started" || evs[0].Data["num_sequences"] != steps || len(evs) != steps+1 {
		t.Fatalf("events: %d, first %+v", len(evs), evs[0])
	}
	after := lossOf()
	t.Logf("training-set loss %.3f -> %.3f (job mean %.3f)", before, after, res.Metrics["loss"])
	// The shipped tiny model's logits can only move ≈ 1.3 nats (see newEnv),
	// so the loss plateaus near 6 while the reply becomes the argmax.
	if !(after < before-0.5) {
		t.Fatalf("loss did not fall: %.3f -> %.3f", before, after)
	}
	ids, _ := promptIDs(t, e, "What is the password?")
	got, stopped := greedy(t, e.base, e.adapter(), ids, 40)
	if got != reply || !stopped {
		t.Fatalf("greedy reply %q (stopped %v), want %q", got, stopped, reply)
	}
}
