package train

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"flywheel/internal/engine"
	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/tiny"
)

// newEnvSpec is newEnv over a model folder written from spec, registered
// as id.
func newEnvSpec(t testing.TB, id string, spec tiny.Spec) *env {
	models := t.TempDir()
	if err := tiny.Write(filepath.Join(models, filepath.FromSlash(id)), spec); err != nil {
		t.Fatal(err)
	}
	return newEnvIn(t, models, id)
}

// newEnvIn is newEnv over base model id of the models dir models.
func newEnvIn(t testing.TB, models, id string) *env {
	reg := engine.NewRegistry(models)
	base, err := reg.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, reg: reg, base: base, root: t.TempDir(), ex: New(reg, Options{}), baseID: id}
	ad, err := engine.NewAdapter(base.Config, engine.DefaultLoRAConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	// A trained-looking adapter (B ≠ 0), so the policy is not the base model.
	rng := rand.New(rand.NewPCG(3, 4))
	for _, mods := range ad.Layers {
		for _, m := range engine.AllModules {
			for i := range mods[m].B {
				mods[m].B[i] = float32(rng.NormFloat64() * 0.05)
			}
		}
	}
	if err := ad.Save(e.dir(0), id); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestFirstStepLossMatchesRLFormula samples a group from a checkpoint with
// the logprobs serving reports, posts it as an RL job, and checks the first
// gradient step's loss against rl.md computed here in float64 with ratio 1
// (the trainer's logprobs are the sampler's): with ppo=false,
// L = Σ_t −A_t·w_t·old_t / (Σ_t m_t + 1e-6), A and w normalised over the
// batch. A trainer whose forward differed from serving (RoPE scaling,
// windows, norms) would see ratios ≠ 1 and a different loss.
func TestFirstStepLossMatchesRLFormula(t *testing.T) {
	linear := map[string]any{"type": "linear", "factor": 4.0}
	llama3 := map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
	for _, tc := range []struct {
		name string
		spec tiny.Spec
	}{
		{"llama-rope-linear", tiny.Spec{Arch: engine.ArchLlama, RopeScaling: linear, Untied: true}},
		{"llama-rope-llama3", tiny.Spec{Arch: engine.ArchLlama, RopeScaling: llama3}},
		{"mistral-window", tiny.Spec{Arch: engine.ArchMistral, SlidingWindow: 8, Untied: true}},
		{"qwen2", tiny.Spec{Arch: engine.ArchQwen2, Untied: true}},
		{"qwen3", tiny.Spec{Arch: engine.ArchQwen3, HeadDim: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Merges, tc.spec.Layers, tc.spec.Hidden, tc.spec.Intermediate = 300, 2, 64, 128
			e := newEnvSpec(t, "test/"+tc.name, tc.spec)
			rng := rand.New(rand.NewPCG(7, 8))
			ids, msgs := promptIDs(t, e, "Tell me a story.")
			choices, _ := sample(t, e.base, e.adapter(), ids, 4, 24, rng)
			rewards := []float64{1, 0, 0.5, 0.25}
			var trajs []map[string]any
			var old [][]float64 // each choice's sampled logprobs
			for i, ch := range choices {
				trajs = append(trajs, map[string]any{"messages_and_choices": []any{msgs[0], ch}, "reward": rewards[i]})
				var lps []float64
				for _, tok := range ch["logprobs"].(map[string]any)["content"].([]map[string]any) {
					lps = append(lps, float64(tok["logprob"].(float32)))
				}
				old = append(old, lps)
			}
			req := map[string]any{"model_id": "m", "trajectory_groups": []any{map[string]any{"trajectories": trajs}}}
			_, evs, err := e.run("rl", req, "")
			if err != nil {
				t.Fatal(err)
			}
			var loss float64
			found := false
			for _, ev := range evs {
				if ev.Type == "gradient_step" && !found {
					loss, found = ev.Data["loss"].(float64), true
				}
			}
			if !found {
				t.Fatalf("no gradient_step event in %v", evs)
			}
			want := rlFirstLoss(rewards, old)
			t.Logf("first-step loss %.9g, rl.md with ratio 1: %.9g", loss, want)
			if math.Abs(loss-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("first-step loss %.9g, rl.md with ratio 1 gives %.9g", loss, want)
			}
		})
	}
}

// rlFirstLoss is rl.md's default loss (ppo=false, scale_rewards, b = 0)
// for one group whose trajectories' trainable tokens have the logprobs
// old[i], evaluated where new = old (ratio 1).
func rlFirstLoss(rewards []float64, old [][]float64) float64 {
	var mu, v float64
	for _, r := range rewards {
		mu += r
	}
	mu /= float64(len(rewards))
	for _, r := range rewards {
		v += (r - mu) * (r - mu)
	}
	sigma := math.Sqrt(v / float64(len(rewards)))
	type tok struct{ a, w, lp float64 }
	var toks []tok
	for i, r := range rewards {
		a := (r - mu) / (sigma + 1e-6)
		if a == 0 {
			continue
		}
		w := 1 / (float64(len(old[i])) + 1e-6)
		for _, lp := range old[i] {
			toks = append(toks, tok{a, w, lp})
		}
	}
	var mw float64
	for _, k := range toks {
		mw += k.w
	}
	mw /= float64(len(toks))
	var maw float64
	for i := range toks {
		toks[i].w /= mw
		maw += math.Abs(toks[i].a) * toks[i].w
	}
	maw /= float64(len(toks))
	var sum float64
	for _, k := range toks {
		sum += -(k.a / maw) * k.w * k.lp
	}
	return sum / (float64(len(toks)) + 1e-6)
}

// TestFirstStepLossWithoutLogprobs: choices posted without logprobs are
// trained on-policy, so the first step's loss is rl.md's with ratio 1 over
// the current policy's logprobs of the tokenized contents (and of the
// end-of-turn token of the choices that stopped), computed here by
// teacher-forcing the serving forward.
func TestFirstStepLossWithoutLogprobs(t *testing.T) {
	spec := tiny.Spec{Arch: engine.ArchQwen2, Untied: true, Merges: 300, Layers: 2, Hidden: 64, Intermediate: 128}
	e := newEnvSpec(t, "test/qwen2", spec)
	rng := rand.New(rand.NewPCG(9, 10))
	prompt, msgs := promptIDs(t, e, "Tell me a story.")
	choices, texts := sample(t, e.base, e.adapter(), prompt, 4, 12, rng)
	imEnd, ok := e.base.Tokenizer.TokenToID(tiny.ImEnd)
	if !ok {
		t.Fatal("no <|im_end|>")
	}
	rewards := []float64{1, 0, 0.5, 0.25}
	var trajs []map[string]any
	var newLP [][]float64
	stopped := 0
	for i, ch := range choices {
		ch["logprobs"] = nil
		if i%2 == 0 { // the tiny model rarely stops by itself: the end-token path either way
			ch["finish_reason"] = "stop"
		}
		trajs = append(trajs, map[string]any{"messages_and_choices": []any{msgs[0], ch}, "reward": rewards[i]})
		toks := e.base.Tokenizer.Encode(texts[i], false)
		if ch["finish_reason"] == "stop" {
			toks = append(toks, imEnd)
			stopped++
		}
		newLP = append(newLP, teacherForce(t, e, prompt, toks))
	}
	req := map[string]any{"model_id": "m", "trajectory_groups": []any{map[string]any{"trajectories": trajs}}}
	res, evs, err := e.run("rl", req, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Metrics["num_trajectories_without_logprobs"]; n != 4 {
		t.Fatalf("num_trajectories_without_logprobs = %v, want 4", n)
	}
	var loss float64
	for _, ev := range evs {
		if ev.Type == "gradient_step" {
			loss = ev.Data["loss"].(float64)
			break
		}
	}
	want := rlFirstLoss(rewards, newLP)
	t.Logf("first-step loss %.9g, rl.md with ratio 1 over the policy's logprobs: %.9g (%d of 4 stopped)", loss, want, stopped)
	if loss == 0 || math.Abs(loss-want) > 1e-5*math.Max(1, math.Abs(want)) {
		t.Fatalf("first-step loss %.9g, want %.9g", loss, want)
	}
}

// teacherForce returns the logprob of each of toks after prompt under the
// current checkpoint, through the serving forward (KV cache).
func teacherForce(t *testing.T, e *env, prompt, toks []int) []float64 {
	return teacherForceOn(t, e.base, e.adapter(), prompt, toks)
}

// teacherForceOn is teacherForce on model m with adapter ad.
func teacherForceOn(t *testing.T, m *engine.Model, ad *engine.Adapter, prompt, toks []int) []float64 {
	seq := m.NewSeq(ad)
	defer seq.Release()
	in := prompt
	out := make([]float64, len(toks))
	for i, id := range toks {
		logits, err := m.Forward([]*engine.Seq{seq}, [][]int{in})
		if err != nil {
			t.Fatal(err)
		}
		mx := math.Inf(-1)
		for _, v := range logits[0] {
			mx = math.Max(mx, float64(v))
		}
		var z float64
		for _, v := range logits[0] {
			z += math.Exp(float64(v) - mx)
		}
		out[i] = float64(logits[0][id]) - mx - math.Log(z)
		in = []int{id}
	}
	return out
}

// TestFirstStepLossOnQuantizedGGUF: on a GGUF base with quantized weights
// (flywheel/tiny as a Q4_1 file; LoRA over the frozen quantized base), the
// first step's loss of an RL job posted without logprobs is rl.md's with
// ratio 1 over the policy's logprobs computed on the dequantised weights: a
// float32 model holding each matrix dequantised (as ggml does) and the same
// adapter.
func TestFirstStepLossOnQuantizedGGUF(t *testing.T) {
	models := t.TempDir()
	const id = "tiny.Q4_1.gguf"
	spec := tiny.Spec{Arch: engine.ArchLlama, Untied: true, Merges: 300, Layers: 2, Hidden: 64, Intermediate: 128}
	if err := tiny.WriteGGUF(filepath.Join(models, id), spec, gguf.Q4_1); err != nil {
		t.Fatal(err)
	}
	e := newEnvIn(t, models, id)
	if e.base.Weights.Layers[0].Wq.Quant == nil || e.base.Weights.LMHead.Quant == nil {
		t.Fatal("the GGUF base's matrices are not kept quantized")
	}
	deq := dequantised(e.base)
	rng := rand.New(rand.NewPCG(11, 12))
	prompt, msgs := promptIDs(t, e, "Tell me a story.")
	choices, texts := sample(t, e.base, e.adapter(), prompt, 4, 12, rng)
	rewards := []float64{1, 0, 0.5, 0.25}
	var trajs []map[string]any
	var newLP [][]float64
	for i, ch := range choices {
		ch["logprobs"] = nil
		ch["finish_reason"] = "length"
		trajs = append(trajs, map[string]any{"messages_and_choices": []any{msgs[0], ch}, "reward": rewards[i]})
		newLP = append(newLP, teacherForceOn(t, deq, e.adapter(), prompt, e.base.Tokenizer.Encode(texts[i], false)))
	}
	req := map[string]any{"model_id": "m", "trajectory_groups": []any{map[string]any{"trajectories": trajs}}}
	_, evs, err := e.run("rl", req, "")
	if err != nil {
		t.Fatal(err)
	}
	var loss float64
	for _, ev := range evs {
		if ev.Type == "gradient_step" {
			loss = ev.Data["loss"].(float64)
			break
		}
	}
	want := rlFirstLoss(rewards, newLP)
	t.Logf("first-step loss %.9g, rl.md with ratio 1 on the dequantised weights: %.9g", loss, want)
	if loss == 0 || math.Abs(loss-want) > 1e-5*math.Max(1, math.Abs(want)) {
		t.Fatalf("first-step loss %.9g, want %.9g", loss, want)
	}
}

// dequantised is m with every matrix dequantised into float32 (separate,
// unfused matrices; tied embeddings stay tied).
func dequantised(m *engine.Model) *engine.Model {
	w := *m.Weights
	f := func(x engine.Mat) engine.Mat { return engine.F32Mat(x.Float32()) }
	w.Embed, w.LMHead = f(m.Weights.Embed), f(m.Weights.LMHead)
	w.Layers = make([]engine.Layer, len(m.Weights.Layers))
	for l, L := range m.Weights.Layers {
		L.QKV, L.GateUp = engine.Mat{}, engine.Mat{}
		L.Wq, L.Wk, L.Wv, L.Wo = f(L.Wq), f(L.Wk), f(L.Wv), f(L.Wo)
		L.Wgate, L.Wup, L.Wdown = f(L.Wgate), f(L.Wup), f(L.Wdown)
		w.Layers[l] = L
	}
	return engine.NewModel("dequantised", m.Config, &w, m.Tokenizer, m.Template)
}
