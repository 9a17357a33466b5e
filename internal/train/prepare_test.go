package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/jobs"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

// near fails the test unless got is want to a relative 1e-9.
func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Fatalf("%s = %.12g, want %.12g", what, got, want)
	}
}

func choiceJSON(ids []int, lps []float64, content string, asStrings func(int) string) json.RawMessage {
	var lc []map[string]any
	for i, id := range ids {
		tok := fmt.Sprintf("token_id:%d", id)
		if asStrings != nil {
			tok = asStrings(id)
		}
		e := map[string]any{"token": tok, "logprob": lps[i]}
		lc = append(lc, e)
	}
	b, _ := json.Marshal(map[string]any{"index": 0, "finish_reason": "stop",
		"message": map[string]any{"role": "assistant", "content": content}, "logprobs": map[string]any{"content": lc}})
	return b
}

func msgJSON(role, content string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"role": role, "content": content})
	return b
}

// The tokens of a multi-turn trajectory are the template's tokens with the
// sampled ids spliced in, the end token not duplicated, masks and old
// logprobs only on sampled tokens; and what follows the last choice is
// dropped.
func TestTokenizeHistorySplicesSampledIDs(t *testing.T) {
	e := newEnv(t, Options{})
	c := &modelCodec{m: e.base}
	tok := e.base.Tokenizer
	imEnd, _ := tok.TokenToID(tiny.ImEnd)
	// Sampled ids deliberately differ from the re-tokenisation of the text:
	// "hello" spelled one byte-token at a time.
	var a1 []int
	for _, ch := range "hello" {
		a1 = append(a1, tok.Encode(string(ch), false)...)
	}
	a1 = append(a1, imEnd)
	a2 := append(tok.Encode("bye now", false), imEnd)
	lp1 := make([]float64, len(a1))
	lp2 := make([]float64, len(a2))
	for i := range lp1 {
		lp1[i] = -0.1 * float64(i+1)
	}
	for i := range lp2 {
		lp2[i] = -0.2 * float64(i+1)
	}
	items := []json.RawMessage{
		msgJSON("system", "sys"), msgJSON("user", "hi"),
		choiceJSON(a1, lp1, "hello", nil),
		msgJSON("user", "again"),
		choiceJSON(a2, lp2, "bye now", func(id int) string { return tok.IDToToken(id) }), // vocabulary strings
		msgJSON("user", "dropped"),
	}
	seq, trunc, err := tokenizeHistory(c, rl.History{MessagesAndChoices: items}, 0)
	if err != nil || trunc {
		t.Fatal(err, trunc)
	}
	text, err := e.base.Template.Render(chattmpl.Input{Messages: []json.RawMessage{msgJSON("system", "sys"), msgJSON("user", "hi"),
		msgJSON("assistant", "QQQ"), msgJSON("user", "again"), msgJSON("assistant", "ZZZ")}, ContinueFinalMessage: true})
	if err != nil {
		t.Fatal(err)
	}
	q, z := indexOf(text, "QQQ"), indexOf(text, "ZZZ")
	pre1 := tok.Encode(text[:q], false)
	between := tok.Encode(text[q+3:z], false)
	if between[0] != imEnd || len(text) != z+3 {
		t.Fatalf("unexpected render %q", text)
	}
	between = between[1:] // the sampled <|im_end|> stands for the template's
	want := append(append(append(append([]int{}, pre1...), a1...), between...), a2...)
	if !slices.Equal(seq.Tokens, want) {
		t.Fatalf("tokens\n got %v\nwant %v", seq.Tokens, want)
	}
	var wantMask []bool
	for range pre1 {
		wantMask = append(wantMask, false)
	}
	for range a1 {
		wantMask = append(wantMask, true)
	}
	for range between {
		wantMask = append(wantMask, false)
	}
	for range a2 {
		wantMask = append(wantMask, true)
	}
	if !slices.Equal(seq.Mask, wantMask) {
		t.Fatalf("mask\n got %v\nwant %v", seq.Mask, wantMask)
	}
	if seq.NTrain != len(a1)+len(a2) {
		t.Fatalf("NTrain %d", seq.NTrain)
	}
	for k, lp := range seq.OldLP {
		switch {
		case k >= len(pre1) && k < len(pre1)+len(a1):
			if lp != lp1[k-len(pre1)] {
				t.Fatalf("old logprob %d = %v", k, lp)
			}
		case k >= len(want)-len(a2):
			if lp != lp2[k-(len(want)-len(a2))] {
				t.Fatalf("old logprob %d = %v", k, lp)
			}
		default:
			if !math.IsNaN(lp) {
				t.Fatalf("token %d has old logprob %v", k, lp)
			}
		}
	}
	// truncation
	seq2, trunc, err := tokenizeHistory(c, rl.History{MessagesAndChoices: items}, len(pre1)+2)
	if err != nil || !trunc || len(seq2.Tokens) != len(pre1)+2 || seq2.NTrain != 2 {
		t.Fatalf("truncation: %v %v %d %d", err, trunc, len(seq2.Tokens), seq2.NTrain)
	}
	// no choice at all
	if _, _, err := tokenizeHistory(c, rl.History{MessagesAndChoices: items[:2]}, 0); !errors.Is(err, errNoChoice) {
		t.Fatalf("want errNoChoice, got %v", err)
	}
}

// A choice without logprobs is trained on-policy: its content tokenized
// where it renders, mask 1, no old logprobs, the end-of-turn token trained
// when it stopped; a choice with logprobs beside it keeps its exact ids and
// logprobs.
func TestTokenizeHistoryWithoutLogprobs(t *testing.T) {
	e := newEnv(t, Options{})
	c := &modelCodec{m: e.base}
	tok := e.base.Tokenizer
	imEnd, _ := tok.TokenToID(tiny.ImEnd)
	var a1 []int // sampled ids that differ from the re-tokenisation of "hello"
	for _, ch := range "hello" {
		a1 = append(a1, tok.Encode(string(ch), false)...)
	}
	a1 = append(a1, imEnd)
	lp1 := make([]float64, len(a1))
	for i := range lp1 {
		lp1[i] = -0.1 * float64(i+1)
	}
	bare := func(content, finish string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": content, "tool_calls": nil, "refusal": nil}})
		return b
	}
	render := func(cont bool, msgs ...json.RawMessage) string {
		text, err := e.base.Template.Render(chattmpl.Input{Messages: msgs, ContinueFinalMessage: cont})
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	for _, finish := range []string{"stop", "length"} {
		items := []json.RawMessage{msgJSON("user", "hi"), choiceJSON(a1, lp1, "hello", nil), msgJSON("user", "again"), bare("bye now", finish)}
		seq, _, err := tokenizeHistory(c, rl.History{MessagesAndChoices: items}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !seq.OnPolicy {
			t.Fatal("OnPolicy not set")
		}
		stopped := finish == "stop"
		text := render(!stopped, msgJSON("user", "hi"), msgJSON("assistant", "QQQ"), msgJSON("user", "again"), msgJSON("assistant", "ZZZ"))
		q, z := indexOf(text, "QQQ"), indexOf(text, "ZZZ")
		pre := tok.Encode(text[:q], false)
		between := tok.Encode(text[q+3:z], false)[1:] // the sampled <|im_end|> stands for the template's
		after := tok.Encode(text[z+3:], false)
		content := tok.Encode("bye now", false)
		want := slices.Concat(pre, a1, between, content, after)
		if !slices.Equal(seq.Tokens, want) {
			t.Fatalf("%s: tokens\n got %v\nwant %v", finish, seq.Tokens, want)
		}
		nEnd := 0
		if stopped {
			nEnd = 1
			if len(after) == 0 || after[0] != imEnd {
				t.Fatalf("closed render ends %q", text[z+3:])
			}
		} else if len(after) != 0 {
			t.Fatalf("continued render ends %q", text[z+3:])
		}
		at := len(pre) + len(a1) + len(between)
		for k := range seq.Tokens {
			exact := k >= len(pre) && k < len(pre)+len(a1)
			onPolicy := k >= at && k < at+len(content)+nEnd
			if seq.Mask[k] != (exact || onPolicy) {
				t.Fatalf("%s: mask[%d] = %v", finish, k, seq.Mask[k])
			}
			switch {
			case exact:
				if seq.OldLP[k] != lp1[k-len(pre)] {
					t.Fatalf("%s: old logprob %d = %v", finish, k, seq.OldLP[k])
				}
			case !math.IsNaN(seq.OldLP[k]):
				t.Fatalf("%s: token %d has old logprob %v", finish, k, seq.OldLP[k])
			}
		}
		if seq.NTrain != len(a1)+len(content)+nEnd {
			t.Fatalf("%s: NTrain %d", finish, seq.NTrain)
		}
	}
}

// Tools render through the template, bare function schemas get wrapped.
func TestTokenizeHistoryWithTools(t *testing.T) {
	e := newEnv(t, Options{})
	c := &modelCodec{m: e.base}
	tool := json.RawMessage(`{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{}}}`)
	ids := e.base.Tokenizer.Encode("ok", false)
	items := []json.RawMessage{msgJSON("user", "weather?"), choiceJSON(ids, make([]float64, len(ids)), "ok", nil)}
	seq, _, err := tokenizeHistory(c, rl.History{MessagesAndChoices: items, Tools: []json.RawMessage{tool}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	text := e.base.Tokenizer.Decode(seq.Tokens, false)
	if indexOf(text, `{"type": "function", "function": {"name": "get_weather"`) < 0 {
		t.Fatalf("tools not rendered: %q", text)
	}
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func traj(e *env, reward float64, withLogprobs bool) map[string]any {
	ids := e.base.Tokenizer.Encode("some answer", false)
	lps := make([]float64, len(ids))
	for i := range lps {
		lps[i] = -1
	}
	ch := map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "some answer"}}
	if withLogprobs {
		var lc []map[string]any
		for i, id := range ids {
			lc = append(lc, map[string]any{"token": fmt.Sprintf("token_id:%d", id), "logprob": lps[i]})
		}
		ch["logprobs"] = map[string]any{"content": lc}
	}
	return map[string]any{"messages_and_choices": []any{map[string]any{"role": "user", "content": "q"}, ch}, "reward": reward}
}

// Advantages per group, skipping, weights, job metrics.
func TestPrepareRLAdvantages(t *testing.T) {
	e := newEnv(t, Options{})
	c := &modelCodec{m: e.base}
	body, _ := json.Marshal(map[string]any{"trajectory_groups": []any{
		map[string]any{"trajectories": []any{traj(e, 1, true), traj(e, 0, true), traj(e, 0, true), traj(e, 1, true)}},
		map[string]any{"trajectories": []any{traj(e, 0.5, true), traj(e, 0.5, true)}}, // equal rewards: skipped
		map[string]any{"trajectories": []any{traj(e, 1, false), traj(e, 0, true)}},    // one without logprobs: on-policy
	}})
	var req rl.Request
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	p, err := prepareRL(c, req.TrajectoryGroups, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.NumTrajectories != 8 || p.NumSkipped != 2 || p.NumNoLogprobs != 1 || len(p.Seqs) != 6 {
		t.Fatalf("counts: %+v, %d seqs", p, len(p.Seqs))
	}
	near(t, "reward mean", p.Rewards.Mean(), 4.0/8)
	near(t, "reward std", p.Rewards.StdDev(), (0.5+0+0.5)/3)
	wantA := []float64{0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.5 / (0.5 + 1e-6), 0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)}
	for i, s := range p.Seqs {
		near(t, "A", s.A, wantA[i])
		near(t, "w", s.W, 1/(float64(s.NTrain)+1e-6))
	}
	// unscaled
	p, _ = prepareRL(c, req.TrajectoryGroups, false, 0)
	near(t, "A unscaled", p.Seqs[0].A, 0.5)
	// no logprobs anywhere: all on-policy, all counted
	body, _ = json.Marshal(map[string]any{"trajectory_groups": []any{
		map[string]any{"trajectories": []any{traj(e, 1, false), traj(e, 0, false)}}}})
	req = rl.Request{}
	json.Unmarshal(body, &req)
	if p, err = prepareRL(c, req.TrajectoryGroups, true, 0); err != nil || len(p.Seqs) != 2 || p.NumNoLogprobs != 2 {
		t.Fatalf("without logprobs: %v %+v", err, p)
	}
	// no assistant choice anywhere: the job fails clearly
	body, _ = json.Marshal(map[string]any{"trajectory_groups": []any{map[string]any{"trajectories": []any{
		map[string]any{"messages_and_choices": []any{map[string]any{"role": "user", "content": "q"}, map[string]any{"role": "assistant", "content": "a"}}, "reward": 1},
	}}}})
	req = rl.Request{}
	json.Unmarshal(body, &req)
	if _, err := prepareRL(c, req.TrajectoryGroups, true, 0); err == nil || !strings.Contains(err.Error(), "no trajectory has an assistant choice") {
		t.Fatalf("want a clear error when there is no choice, got %v", err)
	}
}

// A job whose sequences fit one batch takes one step; the first-fit
// packing respects the budget.
func TestPacking(t *testing.T) {
	first := 0
	mk := func(n int) *sequence { // sequences that share no prefix
		first++
		s := &sequence{Tokens: make([]int, n), Mask: make([]bool, n), OldLP: make([]float64, n)}
		s.Tokens[0] = first
		return s
	}
	seqs := []*sequence{mk(100), mk(300), mk(200), mk(50)}
	if b := packSequences(seqs, 1000); len(b) != 1 {
		t.Fatalf("%d batches, want 1", len(b))
	}
	b := packSequences(seqs, 350)
	if len(b) != 2 {
		t.Fatalf("%d batches, want 2", len(b))
	}
	for _, bin := range b {
		n := 0
		for _, s := range bin {
			n += len(s.Tokens)
		}
		if n > 350 {
			t.Fatalf("bin of %d tokens", n)
		}
	}
	if b := packSequences([]*sequence{mk(500)}, 100); len(b) != 1 {
		t.Fatal("an oversize sequence gets its own batch")
	}
}

// Two one-step jobs continue the optimizer exactly as one two-step run
// would; the checkpoint holds the adapter and the optimizer state; nothing
// is written outside OutDir.
func TestCheckpointContinuesOptimizer(t *testing.T) {
	req := map[string]any{"model_id": "m", "trajectory_groups": []any{}}
	e := newEnv(t, Options{})
	req["trajectory_groups"] = []any{map[string]any{"trajectories": []any{traj(e, 1, true), traj(e, 0, true)}}}
	snapshot := func() []string {
		var files []string
		filepath.WalkDir(e.root, func(p string, d os.DirEntry, err error) error {
			files = append(files, p)
			return nil
		})
		return files
	}
	for i := 0; i < 2; i++ {
		before := snapshot()
		_, evs, err := e.run("rl", req, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Data["num_sequences"] != 1 || evs[1].Type != "gradient_step" {
			t.Fatalf("events %+v", evs)
		}
		for _, k := range []string{"loss", "policy_loss", "grad_norm", "learning_rate", "num_tokens", "num_trainable_tokens", "tokens_per_second", "entropy", "gradient_step"} {
			if _, ok := evs[1].Data[k]; !ok {
				t.Fatalf("gradient_step lacks %s", k)
			}
		}
		after := snapshot()
		// only the new checkpoint folder (renamed from OutDir) appeared
		for _, p := range after {
			if !slices.Contains(before, p) && !isUnder(p, e.dir(e.step)) {
				t.Fatalf("wrote outside OutDir: %s", p)
			}
		}
	}
	opt, err := LoadAdamW(e.dir(2))
	if err != nil || opt.Step != 2 || len(opt.M) == 0 {
		t.Fatalf("optimizer state: %v step %d", err, opt.Step)
	}
	two := e.adapter()

	// the same two steps in one session
	e2 := newEnv(t, Options{})
	job := jobs.Job{BaseModel: tiny.ID, FromDir: e2.dir(0)}
	s, err := e2.ex.open(job)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	rq, err := rl.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	cfg := resolved(t, store.KindRL, tiny.ID, "", body).RL
	for i := 0; i < 2; i++ {
		p, _ := prepareRL(&modelCodec{m: s.base}, rq.TrajectoryGroups, true, s.maxLen)
		sb := buildBatch(p.Seqs)
		rl.Normalize(sb.toks, 0)
		if _, err := s.runStep(sb, cfg.LearningRate, sb.rlLoss(cfg)); err != nil {
			t.Fatal(err)
		}
	}
	for l := range two.Layers {
		for m, pr := range two.Layers[l] {
			q := s.ad.Layers[l][m]
			if !slices.Equal(pr.A, q.A) || !slices.Equal(pr.B, q.B) {
				t.Fatalf("layer %d %s differs between 2 jobs and one 2-step run", l, m)
			}
		}
	}
}

func isUnder(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && !filepath.IsAbs(rel) && (rel == "." || rel[:min(2, len(rel))] != "..")
}

// Cancellation stops between steps with ctx.Err(); no checkpoint is written.
func TestCancelStopsBetweenSteps(t *testing.T) {
	e := newEnv(t, Options{TokensPerStep: 16}) // one sequence per step
	var ts []any
	for i := 0; i < 4; i++ {
		ts = append(ts, traj(e, float64(i%2), true))
	}
	body, _ := json.Marshal(map[string]any{"trajectory_groups": []any{map[string]any{"trajectories": ts}}})
	ctx, cancel := context.WithCancel(context.Background())
	out := t.TempDir()
	steps := 0
	_, err := e.ex.Train(ctx, jobs.Job{Kind: store.KindRL, BaseModel: tiny.ID, FromDir: e.dir(0), OutDir: out, Request: body,
		Config: resolved(t, store.KindRL, tiny.ID, "", body)},
		func(ev jobs.Event) error {
			if ev.Type == "gradient_step" {
				steps++
				cancel()
			}
			return nil
		})
	if !errors.Is(err, context.Canceled) || steps != 1 {
		t.Fatalf("err %v after %d steps", err, steps)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Fatalf("cancelled job wrote %d files", len(ents))
	}
}

// replaceContent swaps a message's content, keeping the order of its keys.
func TestReplaceContent(t *testing.T) {
	r, err := replaceContent(json.RawMessage(`{"role":"assistant","name":"a","content":"x","z":1}`), "NEW")
	if err != nil || string(r) != `{"role":"assistant","name":"a","content":"NEW","z":1}` {
		t.Fatalf("%s %v", r, err)
	}
}

// SFT masks the assistant content and its end token, per assistant_turns.
func TestTokenizeSFTMasks(t *testing.T) {
	e := newEnv(t, Options{})
	c := &modelCodec{m: e.base}
	imEnd, _ := e.base.Tokenizer.TokenToID(tiny.ImEnd)
	ex := rl.SFTExample{Messages: []json.RawMessage{msgJSON("user", "a"), msgJSON("assistant", "one"),
		msgJSON("user", "b"), msgJSON("assistant", "two")}}
	count := func(s *sequence) (n int, text string) {
		var ids []int
		for i, m := range s.Mask {
			if m {
				n++
				ids = append(ids, s.Tokens[i])
			}
		}
		return n, e.base.Tokenizer.Decode(ids, false)
	}
	all, err := tokenizeSFT(c, ex, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, txt := count(all)
	if txt != "one"+tiny.ImEnd+"two"+tiny.ImEnd {
		t.Fatalf("all turns: trainable text %q", txt)
	}
	last, _ := tokenizeSFT(c, ex, true, 0)
	_, txt = count(last)
	if txt != "two"+tiny.ImEnd {
		t.Fatalf("last turn: trainable text %q", txt)
	}
	if !slices.Equal(all.Tokens, last.Tokens) || !slices.Contains(all.Tokens, imEnd) {
		t.Fatal("masks must not change the tokens")
	}
}

// precalculate_logprobs replaces the recorded logprobs by the pre-update
// model's: with absurd recorded values every token clips without it, none
// with it.
func TestPrecalculateLogprobs(t *testing.T) {
	for _, pre := range []bool{false, true} {
		e := newEnv(t, Options{})
		a, b := traj(e, 1, true), traj(e, 0, true)
		for _, tr := range []map[string]any{a, b} {
			ch := tr["messages_and_choices"].([]any)[1].(map[string]any)
			for _, tok := range ch["logprobs"].(map[string]any)["content"].([]map[string]any) {
				tok["logprob"] = -50.0
			}
		}
		req := map[string]any{"model_id": "m", "trajectory_groups": []any{map[string]any{"trajectories": []any{a, b}}},
			"experimental_config": map[string]any{"precalculate_logprobs": pre}}
		res, evs, err := e.run("rl", req, "")
		if err != nil {
			t.Fatal(err)
		}
		frac := evs[1].Data["frac_clipped"].(float64)
		if (pre && frac != 0) || (!pre && frac != 1) || res.Metrics["frac_clipped"].(float64) != frac {
			t.Fatalf("precalculate_logprobs=%v: frac_clipped %v", pre, frac)
		}
	}
}
