package rl

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"flywheel/internal/httpx"
)

// wantInvalid checks that err is a 400 *httpx.Error with this JSON path,
// code and message.
func wantInvalid(t *testing.T, what string, err error, path, code, msg string) {
	t.Helper()
	var he *httpx.Error
	if !errors.As(err, &he) {
		t.Fatalf("%s: got %v, want a 400 at %s", what, err, path)
	}
	if he.Status != 400 || he.Param != path || he.Code != code || (msg != "" && he.Message != msg) {
		t.Fatalf("%s: got %d %s %s %q, want 400 %s %s %q", what, he.Status, he.Param, he.Code, he.Message, path, code, msg)
	}
}

// The job record shows every rl.md field with its default (ppo=false) and
// keeps unknown fields as sent.
func TestRecordConfigDefaults(t *testing.T) {
	const want = `{"advantage_balance":0,"epsilon":1,"epsilon_high":4,"importance_sampling_level":"token",` +
		`"learning_rate":0.000005,"mask_prob_ratio":false,"max_negative_advantage_importance_sampling_weight":null,` +
		`"ppo":false,"precalculate_logprobs":false,"scale_rewards":true,"x_k2_tau":null}`
	for _, raw := range []string{"", "null", "{}", `{"epsilon": null, "learning_rate": null}`} {
		got, err := recordConfig([]byte(raw), realModelLearningRate)
		if err != nil || string(got) != want {
			t.Fatalf("%q: got %s, %v; want %s", raw, got, err, want)
		}
	}
	// ppo=true: epsilon 0.2 and epsilon_high = epsilon; the model's default
	// learning rate; unknown fields kept (numbers as written).
	got, err := recordConfig([]byte(`{"ppo": true, "epsilon": 0.3, "custom_extra": 7.50, "x_k2_tau": 0, "max_negative_advantage_importance_sampling_weight": 2}`), tinyRLLearningRate)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"ppo": true, "epsilon": 0.3, "epsilon_high": 0.3, "learning_rate": tinyRLLearningRate, "custom_extra": 7.5,
		"x_k2_tau": 0.0, "max_negative_advantage_importance_sampling_weight": 2.0} {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (record %s)", k, m[k], v, got)
		}
	}
	got, _ = recordConfig([]byte(`{"ppo": true}`), 1e-5)
	m = nil
	if err := json.Unmarshal(got, &m); err != nil || m["epsilon"] != 0.2 || m["epsilon_high"] != 0.2 || m["learning_rate"] != 1e-5 {
		t.Fatalf("ppo record %s", got)
	}
}

// ResolveConfig fills the same defaults for the trainer.
func TestResolveConfigDefaults(t *testing.T) {
	c, err := resolveConfig(nil, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Epsilon: 1, EpsilonHigh: 4, ISLevel: ISToken, MaxNegISWeight: math.Inf(1), ScaleRewards: true, LearningRate: 1e-5}
	if c != want {
		t.Fatalf("defaults: %+v, want %+v", c, want)
	}
	c, _ = resolveConfig([]byte(`{"ppo": true}`), 1e-5)
	if c.Epsilon != 0.2 || c.EpsilonHigh != 0.2 {
		t.Fatalf("ppo defaults: %+v", c)
	}
	c, _ = resolveConfig([]byte(`{"ppo": true, "epsilon": 0.3}`), 1e-5)
	if c.EpsilonHigh != 0.3 {
		t.Fatalf("ppo epsilon_high defaults to epsilon: %+v", c)
	}
	c, _ = resolveConfig([]byte(`{"epsilon": 0.5, "epsilon_high": 2, "learning_rate": 0.1, "importance_sampling_level": "sequence",
		"mask_prob_ratio": true, "scale_rewards": false, "precalculate_logprobs": true, "advantage_balance": -0.25,
		"max_negative_advantage_importance_sampling_weight": 1.5, "x_k2_tau": 0.1}`), 1e-5)
	want = Config{Epsilon: 0.5, EpsilonHigh: 2, ISLevel: ISSequence, MaskProbRatio: true, MaxNegISWeight: 1.5, Tau: 0.1,
		AdvantageBalance: -0.25, PrecalculateLogprobs: true, LearningRate: 0.1}
	if c != want {
		t.Fatalf("explicit: %+v, want %+v", c, want)
	}
}

// Every range of rl.md, at and just past its boundary: accepted, or a 400
// naming the field's JSON path.
func TestConfigRanges(t *testing.T) {
	const p = "experimental_config."
	ok := []string{
		`{"epsilon": 0}`, `{"epsilon_high": 0}`, `{"ppo": true, "epsilon": 0}`,
		`{"advantage_balance": -1}`, `{"advantage_balance": 1}`, `{"advantage_balance": 0}`,
		`{"learning_rate": 1e-300}`, `{"learning_rate": 1}`,
		`{"importance_sampling_level": "token"}`, `{"importance_sampling_level": "sequence"}`,
		`{"importance_sampling_level": "average"}`, `{"importance_sampling_level": "geometric_average"}`,
		// rl.md sets no range on the cap: ρ ← min(ρ, value) for any finite value.
		`{"max_negative_advantage_importance_sampling_weight": 0}`,
		`{"max_negative_advantage_importance_sampling_weight": -1}`,
		`{"max_negative_advantage_importance_sampling_weight": 1e-9}`,
		`{"x_k2_tau": -3}`, `{"kimi_k2_tau": 0.5}`, `{"x_k2_tau": 0.5, "kimi_k2_tau": 0.5}`,
		`{"ppo": null, "epsilon": null, "importance_sampling_level": null}`,
	}
	for _, raw := range ok {
		if _, err := recordConfig([]byte(raw), realModelLearningRate); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
		if _, err := resolveConfig([]byte(raw), realModelLearningRate); err != nil {
			t.Errorf("trainer %s: %v", raw, err)
		}
	}
	bad := []struct{ raw, path, code, msg string }{
		{`{"epsilon": -1e-9}`, p + "epsilon", "invalid_value", p + "epsilon: must be >= 0"},
		{`{"ppo": true, "epsilon": -0.1}`, p + "epsilon", "invalid_value", p + "epsilon: must be >= 0"},
		{`{"epsilon_high": -0.1}`, p + "epsilon_high", "invalid_value", p + "epsilon_high: must be >= 0"},
		{`{"advantage_balance": -1.000001}`, p + "advantage_balance", "invalid_value", p + "advantage_balance: must be in [-1, 1]"},
		{`{"advantage_balance": 1.000001}`, p + "advantage_balance", "invalid_value", p + "advantage_balance: must be in [-1, 1]"},
		{`{"learning_rate": 0}`, p + "learning_rate", "invalid_value", p + "learning_rate: must be > 0"},
		{`{"learning_rate": -1e-6}`, p + "learning_rate", "invalid_value", p + "learning_rate: must be > 0"},
		{`{"learning_rate": 1e30}`, p + "learning_rate", "invalid_value", p + "learning_rate: must be at most 1 (got 1e+30)"},
		{`{"learning_rate": 1.000001}`, p + "learning_rate", "invalid_value", ""},
		{`{"importance_sampling_level": "tokens"}`, p + "importance_sampling_level", "invalid_value",
			p + `importance_sampling_level: must be one of token, sequence, average, geometric_average; got "tokens"`},
		{`{"importance_sampling_level": ""}`, p + "importance_sampling_level", "invalid_value", ""},
		{`{"x_k2_tau": 0.5, "kimi_k2_tau": 0.25}`, p + "kimi_k2_tau", "invalid_value",
			p + "kimi_k2_tau: is another name for x_k2_tau; got 0.25 and x_k2_tau 0.5"},
		{`{"epsilon": 1e999}`, p + "epsilon", "invalid_value", p + "epsilon: number 1e999 is out of range; numbers must be finite"},
		{`{"max_negative_advantage_importance_sampling_weight": -1e400}`, p + "max_negative_advantage_importance_sampling_weight", "invalid_value", ""},
		{`{"ppo": "yes"}`, p + "ppo", "invalid_type", p + "ppo: expected a boolean, got a string"},
		{`{"scale_rewards": 1}`, p + "scale_rewards", "invalid_type", p + "scale_rewards: expected a boolean, got a number"},
		{`{"learning_rate": "1e-5"}`, p + "learning_rate", "invalid_type", p + "learning_rate: expected a number, got a string"},
		{`{"x_k2_tau": [1]}`, p + "x_k2_tau", "invalid_type", p + "x_k2_tau: expected a number, got an array"},
		{`{"importance_sampling_level": 3}`, p + "importance_sampling_level", "invalid_type", ""},
		{`[]`, "experimental_config", "invalid_type", "experimental_config: expected an object, got an array"},
	}
	for _, b := range bad {
		_, err := recordConfig([]byte(b.raw), realModelLearningRate)
		wantInvalid(t, b.raw, err, b.path, b.code, b.msg)
		_, err = resolveConfig([]byte(b.raw), realModelLearningRate)
		wantInvalid(t, "trainer "+b.raw, err, b.path, b.code, b.msg)
	}
}

// Go callers get the same ranges, non-finite numbers included.
func TestResolveRefusesNonFinite(t *testing.T) {
	nan := math.NaN()
	_, err := ExperimentalConfig{XK2Tau: &nan}.Resolve(1e-5)
	wantInvalid(t, "NaN tau", err, "experimental_config.x_k2_tau", "invalid_value", "experimental_config.x_k2_tau: must be a finite number")
	_, err = ExperimentalConfig{}.Resolve(0)
	wantInvalid(t, "zero default learning rate", err, "experimental_config.learning_rate", "invalid_value", "")
}

// kimi_k2_tau is the ART client's name for x_k2_tau.
func TestKimiK2TauAlias(t *testing.T) {
	c, err := resolveConfig([]byte(`{"kimi_k2_tau": 0.5}`), 1e-5)
	if err != nil || c.Tau != 0.5 {
		t.Fatalf("tau %v, %v", c.Tau, err)
	}
	rec, _ := recordConfig([]byte(`{"kimi_k2_tau": 0.5}`), 1e-5)
	var m map[string]any
	json.Unmarshal(rec, &m)
	if m["x_k2_tau"] != 0.5 || m["kimi_k2_tau"] != 0.5 {
		t.Fatalf("record %s", rec)
	}
}

// The keys ART 0.5.18+ add to experimental_config: loss_fn and
// normalize_advantages are other names of ppo and scale_rewards; the keys
// naming training flywheel does not do are accepted only at their neutral
// value, else a 400 unsupported_value naming them (never silently ignored).
// The body below is what ART 0.5.23's ServerlessBackend.train sends with
// its defaults.
func TestLaterARTKeys(t *testing.T) {
	const p = "experimental_config."
	art0523 := `{"advantage_balance": 0.0, "allow_training_without_logprobs": false, "epsilon": null,
		"epsilon_high": null, "importance_sampling_level": "token", "kimi_k2_tau": null, "kl_penalty_coef": 0.0,
		"kl_penalty_reference_step": null, "kl_penalty_source": "current_learner", "kl_penalty_step_lag": null,
		"kl_ref_adapter_path": null, "learning_rate": 5e-6, "logprob_calculation_chunk_size": 1024,
		"loss_fn": "cispo", "mask_prob_ratio": false, "max_negative_advantage_importance_sampling_weight": null,
		"normalize_advantages": true, "num_trajectories_learning_rate_multiplier_power": 0.0,
		"packed_sequence_length": null, "plot_tensors": false, "ppo": false, "precalculate_logprobs": false,
		"scale_learning_rate_by_reward_std_dev": false, "scale_rewards": true, "truncated_importance_sampling": null}`
	c, err := resolveConfig([]byte(art0523), realModelLearningRate)
	if err != nil || c.PPO || !c.ScaleRewards || c.Epsilon != 1 || c.EpsilonHigh != 4 {
		t.Fatalf("ART 0.5.23's defaults: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		raw         string
		ppo, scaled bool
	}{
		{`{"loss_fn": "ppo"}`, true, true},
		{`{"loss_fn": "ppo", "ppo": true}`, true, true},
		{`{"loss_fn": "cispo", "ppo": null}`, false, true},
		{`{"normalize_advantages": false}`, false, false},
		{`{"normalize_advantages": false, "scale_rewards": false}`, false, false},
		{`{"loss_fn": null, "normalize_advantages": null}`, false, true},
	} {
		c, err := resolveConfig([]byte(tc.raw), realModelLearningRate)
		if err != nil || c.PPO != tc.ppo || c.ScaleRewards != tc.scaled {
			t.Errorf("%s: ppo %t scale_rewards %t, %v; want %t %t", tc.raw, c.PPO, c.ScaleRewards, err, tc.ppo, tc.scaled)
		}
	}
	// loss_fn "ppo" alone gets ppo's clip defaults, and the record shows the resolved names.
	got, err := recordConfig([]byte(`{"loss_fn": "ppo", "normalize_advantages": false}`), realModelLearningRate)
	var m map[string]any
	if err != nil || json.Unmarshal(got, &m) != nil || m["ppo"] != true || m["epsilon"] != 0.2 || m["scale_rewards"] != false || m["loss_fn"] != "ppo" {
		t.Fatalf("record %s, %v", got, err)
	}
	bad := []struct{ raw, path, code, msg string }{
		{`{"loss_fn": "grpo"}`, p + "loss_fn", "invalid_value", p + `loss_fn: must be cispo or ppo; got "grpo"`},
		{`{"loss_fn": "ppo", "ppo": false}`, p + "loss_fn", "invalid_value", p + `loss_fn: "ppo" contradicts ppo false`},
		{`{"loss_fn": 1}`, p + "loss_fn", "invalid_type", ""},
		{`{"normalize_advantages": true, "scale_rewards": false}`, p + "normalize_advantages", "invalid_value",
			p + "normalize_advantages: true contradicts scale_rewards false (another name for it)"},
		{`{"kl_penalty_coef": 0.1}`, p + "kl_penalty_coef", "unsupported_value",
			p + "kl_penalty_coef: a KL-penalized advantage is not supported by flywheel; send null (or leave it out)"},
		{`{"kl_penalty_coef": 1e999}`, p + "kl_penalty_coef", "invalid_value", ""},
		{`{"truncated_importance_sampling": 2}`, p + "truncated_importance_sampling", "unsupported_value", ""},
		{`{"scale_learning_rate_by_reward_std_dev": true}`, p + "scale_learning_rate_by_reward_std_dev", "unsupported_value", ""},
		{`{"num_trajectories_learning_rate_multiplier_power": 0.5}`, p + "num_trajectories_learning_rate_multiplier_power", "unsupported_value", ""},
	}
	for _, b := range bad {
		_, err := recordConfig([]byte(b.raw), realModelLearningRate)
		wantInvalid(t, b.raw, err, b.path, b.code, b.msg)
		_, err = resolveConfig([]byte(b.raw), realModelLearningRate)
		wantInvalid(t, "trainer "+b.raw, err, b.path, b.code, b.msg)
	}
}

// recordConfig is the job record's experimental_config of ResolveConfig.
func recordConfig(raw []byte, defaultLR float64) (json.RawMessage, error) {
	_, rec, err := ResolveConfig(raw, defaultLR)
	return rec, err
}

// resolveConfig is the Config of ResolveConfig.
func resolveConfig(raw []byte, defaultLR float64) (Config, error) {
	c, _, err := ResolveConfig(raw, defaultLR)
	return c, err
}
