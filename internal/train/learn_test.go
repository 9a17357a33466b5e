package train

import (
	"encoding/json"
	"flywheel/internal/engine"
	"math/rand/v2"
	"testing"
	"time"

	"flywheel/internal/engine/chattmpl"
)

// targetShare is the demo's reward: the share of the target character among
// the non-space characters of a completion.
func targetShare(s string, target rune) float64 {
	n, hit := 0, 0
	for _, r := range s {
		if r == ' ' || r == '\n' {
			continue
		}
		n++
		if r == target {
			hit++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(hit) / float64(n)
}

func promptIDs(t testing.TB, e *env, user string) ([]int, []map[string]any) {
	msgs := []map[string]any{{"role": "user", "content": user}}
	raw, _ := json.Marshal(msgs[0])
	text, err := e.base.Template.Render(chattmpl.Input{Messages: []json.RawMessage{raw}, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	return e.base.Tokenizer.Encode(text, false), msgs
}

// rlRound samples groups with the current checkpoint, scores them and
// returns the request and the mean reward.
func rlRound(t testing.TB, e *env, rng *rand.Rand, groups, perGroup, maxTokens int, target rune) (map[string]any, float64) {
	ad := e.adapter()
	var tgs []map[string]any
	var sum float64
	prompts := []string{"Write a word.", "Say something.", "Tell me a story.", "Hello!"}
	for g := 0; g < groups; g++ {
		ids, msgs := promptIDs(t, e, prompts[g%len(prompts)])
		choices, texts := sample(t, e.base, ad, ids, perGroup, maxTokens, rng)
		var trajs []map[string]any
		for i, ch := range choices {
			r := targetShare(texts[i], target)
			sum += r
			trajs = append(trajs, map[string]any{"messages_and_choices": []any{msgs[0], ch}, "reward": r})
		}
		tgs = append(tgs, map[string]any{"trajectories": trajs})
	}
	return map[string]any{"model_id": "m", "trajectory_groups": tgs}, sum / float64(groups*perGroup)
}

// TestRLLearnsOnTiny runs on flywheel/tiny as shipped (F32) and stored in
// BF16 (kept in BF16 by the engine): over 25 RL jobs at the default
// learning rate the mean reward rises by at least rlRise.
//
// What the curve looks like (TestRLSweep): the reward starts near 0.125
// (the tiny model's random text); then the policy collapses onto one
// repeated token (entropy 5.9 -> ~0.2, after which whole groups sample the
// same reply and are skipped), and which token wins sets the plateau:
// "ver" or "ged" 0.33, " benches" 0.29, "ce" 0.5, "e" 1.0; 0.25 to 1.0
// seen. GRPO has no entropy bonus to leave a plateau, so the bar is the
// lowest plateau's rise (0.25 - 0.125) with slack: the old bar of 0.25
// failed every 0.33 plateau (PCG seeds 1..6: 3 of 6 passed). Measured with
// TestRLSweep over the seeds 1..64, 25 jobs at 3e-3: 64 of 64 rise by
// rlRise for F32 (smallest rise 0.123) and 64 of 64 for BF16 (0.115). At
// the old default 1e-2 (15 jobs) the collapse came within 3 jobs and some
// runs fell back to ~0.1 after it: 61 of 64 for BF16 (smallest 0.044).
func TestRLLearnsOnTiny(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("learning run skipped under -race / -short (numeric code is too slow); run without -race")
	}
	for _, b := range []struct {
		name string
		reg  func(testing.TB) *engine.Registry
		seed uint64
	}{{"f32", tinyRegistry, 1}, {"bf16", bf16Registry, 2}} {
		t.Run(b.name, func(t *testing.T) {
			start := time.Now()
			first, last := rlFirstLast(rlCurve(t, newEnvOn(t, b.reg(t), Options{}), b.seed, 25, t.Logf))
			t.Logf("reward %.3f -> %.3f in %v", first, last, time.Since(start))
			if last < first+rlRise {
				t.Fatalf("mean reward did not rise clearly: %.3f -> %.3f (want a rise of %.2f)", first, last, rlRise)
			}
		})
	}
}

// rlRise is the smallest rise of the mean reward TestRLLearnsOnTiny accepts.
const rlRise = 0.1

// rlFirstLast returns the mean reward of a curve's first two rounds and of its
// last three (the last two jobs' and the one after them).
func rlFirstLast(r []float64) (first, last float64) {
	n := len(r)
	return (r[0] + r[1]) / 2, (r[n-3] + r[n-2] + r[n-1]) / 3
}

// rlCurve runs steps RL jobs on e, each on 8 groups of 8 samples of at
// most 16 tokens (rewarded by their share of 'e') drawn from the current
// checkpoint with PCG(seed, 2), and returns the mean reward of each job's
// samples and of one more round after the last job. logf, when not nil,
// gets one line per job with its metrics.
func rlCurve(t testing.TB, e *env, seed uint64, steps int, logf func(string, ...any)) []float64 {
	rng := rand.New(rand.NewPCG(seed, 2))
	var rs []float64
	for s := 0; s < steps; s++ {
		req, mean := rlRound(t, e, rng, 8, 8, 16, 'e')
		rs = append(rs, mean)
		res, _, err := e.run("rl", req, "")
		if err != nil {
			t.Fatal(err)
		}
		if m := res.Metrics; logf != nil {
			logf("job %d: mean reward %.3f, entropy %.3v, loss %.3v, grad_norm %.3v, skipped %v of %v trajectories",
				s, mean, m["entropy"], m["loss"], m["grad_norm"], m["num_skipped_trajectories"], m["num_trajectories"])
		}
	}
	_, final := rlRound(t, e, rng, 8, 8, 16, 'e')
	return append(rs, final)
}
