package train

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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

// TestSFTMemorisesReply runs on flywheel/tiny as the server ships it (F32)
// and stored in BF16 (kept in BF16 by the engine).
func TestSFTMemorisesReply(t *testing.T) {
	for _, b := range bases {
		t.Run(b.name, func(t *testing.T) { sftMemorises(t, newEnvOn(t, b.reg(t), Options{})) })
	}
}

func sftMemorises(t *testing.T, e *env) {
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
	// Measured: ≈ 9.1 -> 0.03.
	if !(after < before-0.5) {
		t.Fatalf("loss did not fall: %.3f -> %.3f", before, after)
	}
	ids, _ := promptIDs(t, e, "What is the password?")
	got, stopped := greedy(t, e.base, e.adapter(), ids, 40)
	if got != reply || !stopped {
		t.Fatalf("greedy reply %q (stopped %v), want %q", got, stopped, reply)
	}
}

// seqsOfLen returns n sequences of the given token lengths (cycled).
func seqsOfLen(n int, lens ...int) []*sequence {
	out := make([]*sequence, n)
	for i := range out {
		out[i] = &sequence{Tokens: make([]int, lens[i%len(lens)]), Traj: i}
	}
	return out
}

// sftStep is one gradient step of a plan.
type sftStep struct {
	seqs  []*sequence
	epoch int
}

// planSFT returns the steps of newSFTPlan(...) (checked against numSteps)
// and its batch size.
func planSFT(seqs []*sequence, epochs, batchSize, budget int, seed uint64) ([]sftStep, int) {
	p := newSFTPlan(seqs, epochs, batchSize, budget, seed)
	var steps []sftStep
	p.each(func(ep int, s []*sequence) error { steps = append(steps, sftStep{s, ep}); return nil })
	if len(steps) != p.numSteps() {
		panic("numSteps disagrees with each")
	}
	return steps, p.batch
}

// order lists the examples (by Traj) of the plan's steps.
func order(steps []sftStep) (ids []int, sizes []int, epochs []int) {
	for _, st := range steps {
		for _, s := range st.seqs {
			ids = append(ids, s.Traj)
		}
		sizes = append(sizes, len(st.seqs))
		epochs = append(epochs, st.epoch)
	}
	return
}

// The data order is a function of the seed: each epoch a permutation of
// all examples, another per epoch and per seed, the same for the same seed;
// steps never span two epochs.
func TestPlanSFTOrder(t *testing.T) {
	seqs := seqsOfLen(10, 5)
	a, bs := planSFT(seqs, 3, 4, 1<<20, 42)
	b, _ := planSFT(seqs, 3, 4, 1<<20, 42)
	c, _ := planSFT(seqs, 3, 4, 1<<20, 43)
	ia, sa, ea := order(a)
	ib, _, _ := order(b)
	ic, _, _ := order(c)
	if bs != 4 || !slices.Equal(sa, []int{4, 4, 2, 4, 4, 2, 4, 4, 2}) || !slices.Equal(ea, []int{1, 1, 1, 2, 2, 2, 3, 3, 3}) {
		t.Fatalf("batch %d, step sizes %v, epochs %v", bs, sa, ea)
	}
	if !slices.Equal(ia, ib) || slices.Equal(ia, ic) {
		t.Fatalf("seed 42: %v and %v; seed 43: %v", ia, ib, ic)
	}
	for ep := range 3 {
		p := slices.Clone(ia[ep*10 : ep*10+10])
		slices.Sort(p)
		if !slices.Equal(p, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("epoch %d is not a permutation: %v", ep+1, ia[ep*10:ep*10+10])
		}
	}
	if slices.Equal(ia[:10], ia[10:20]) {
		t.Fatalf("epochs 1 and 2 in the same order: %v", ia[:10])
	}
	// The order is fixed by the PCG definition, not by the Go release.
	if want := []int{7, 9, 4, 6, 3, 8, 0, 5, 2, 1}; !slices.Equal(ia[:10], want) {
		t.Errorf("epoch 1 of seed 42 changed: %v, want %v", ia[:10], want)
	}
}

// batch_size "auto": an eighth of the file per step, 1 to 32 examples, and
// a step closed early at the token budget.
func TestPlanSFTAuto(t *testing.T) {
	for _, c := range []struct{ n, bs, steps int }{{1, 1, 1}, {7, 1, 7}, {16, 2, 8}, {17, 3, 6}, {100, 13, 8}, {256, 32, 8}, {1000, 32, 32}} {
		steps, bs := planSFT(seqsOfLen(c.n, 10), 1, 0, 1<<20, 1)
		if bs != c.bs || len(steps) != c.steps {
			t.Errorf("%d examples: batch %d in %d steps, want %d in %d", c.n, bs, len(steps), c.bs, c.steps)
		}
	}
	// 64 examples of 300 or 3000 tokens with a budget of 4096: 8 per step
	// asked, but no step past 4096 tokens unless it is one long example.
	steps, bs := planSFT(seqsOfLen(64, 300, 3000), 1, 0, 4096, 5)
	for i, st := range steps {
		n := 0
		for _, s := range st.seqs {
			n += len(s.Tokens)
		}
		if len(st.seqs) > bs || n > 4096 && len(st.seqs) > 1 {
			t.Fatalf("step %d: %d examples, %d tokens", i, len(st.seqs), n)
		}
	}
	// An integer batch_size is taken as it is, whatever the tokens.
	steps, _ = planSFT(seqsOfLen(8, 3000), 1, 4, 4096, 5)
	if len(steps) != 2 || len(steps[0].seqs) != 4 {
		t.Fatalf("batch_size 4: %d steps", len(steps))
	}
}
