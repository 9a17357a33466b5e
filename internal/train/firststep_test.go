package train

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
)

// newEnvSpec is newEnv over a model folder written from spec, registered
// as id.
func newEnvSpec(t testing.TB, id string, spec tiny.Spec) *env {
	models := t.TempDir()
	if err := tiny.Write(filepath.Join(models, filepath.FromSlash(id)), spec); err != nil {
		t.Fatal(err)
	}
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
