package rl

import (
	"encoding/json"
	"fmt"
	"math"

	"flywheel/internal/httpx"
)

// MaxLearningRate is the largest learning rate a job may ask for, RL and
// SFT alike. AdamW moves every parameter by about the learning rate per
// step, so a rate above 1 rewrites a LoRA adapter's weights wholesale each
// step: the job diverges (1e30 turned every weight to infinity) and its
// checkpoint serves garbage. Larger values are refused at job creation.
const MaxLearningRate = 1.0

// Importance-sampling levels of rl.md (experimental_config.importance_sampling_level).
const (
	ISToken            = "token"
	ISSequence         = "sequence"
	ISAverage          = "average"
	ISGeometricAverage = "geometric_average"
)

// ExperimentalConfig is an RL job's experimental_config as sent (rl.md):
// every field is nullable and nil means the default. KimiK2Tau is the ART
// client's spelling of XK2Tau.
type ExperimentalConfig struct {
	PPO                                          *bool
	Epsilon                                      *float64
	EpsilonHigh                                  *float64
	ImportanceSamplingLevel                      *string
	MaskProbRatio                                *bool
	MaxNegativeAdvantageImportanceSamplingWeight *float64
	XK2Tau                                       *float64
	KimiK2Tau                                    *float64
	AdvantageBalance                             *float64
	ScaleRewards                                 *bool
	PrecalculateLogprobs                         *bool
	LearningRate                                 *float64

	// Keys that later ART releases (0.5.18+) send. LossFn ("cispo" | "ppo")
	// and NormalizeAdvantages are other names of PPO and ScaleRewards. The
	// others name training that flywheel does not implement: accepted at
	// their neutral value (null, 0, false), refused otherwise, so that a job
	// never silently trains other than it asked.
	LossFn                                     *string
	NormalizeAdvantages                        *bool
	KLPenaltyCoef                              *float64
	TruncatedImportanceSampling                *float64
	ScaleLearningRateByRewardStdDev            *bool
	NumTrajectoriesLearningRateMultiplierPower *float64
}

// Config is an ExperimentalConfig with rl.md's defaults filled in and its
// ranges checked: what the advantages and the loss read.
type Config struct {
	PPO                  bool
	Epsilon, EpsilonHigh float64 // the clip range is (1 − Epsilon, 1 + EpsilonHigh)
	ISLevel              string  // one of the IS* levels
	MaskProbRatio        bool
	MaxNegISWeight       float64 // cap on ρ; +Inf when unset
	Tau                  float64 // x_k2_tau; 0 when unset
	AdvantageBalance     float64 // in [−1, 1]
	ScaleRewards         bool
	PrecalculateLogprobs bool
	LearningRate         float64 // > 0
}

// configPath is where experimental_config sits in a request body.
const configPath = "experimental_config"

// Resolve fills in the defaults of rl.md and checks every range; it is the
// one place that decides them, when a job is submitted (ResolveJob).
// defaultLR is the learning rate when it is null (DefaultLearningRate's). rl.md's ranges:
// numbers finite; epsilon and epsilon_high ≥ 0; advantage_balance in
// [−1, 1]; learning_rate in (0, MaxLearningRate]; importance_sampling_level one of the four
// levels; x_k2_tau and kimi_k2_tau equal when both are given. Any finite
// max_negative_advantage_importance_sampling_weight is accepted (ρ ←
// min(ρ, value)), as are negative values of it. Errors are *httpx.Error
// naming the field's JSON path.
func (e ExperimentalConfig) Resolve(defaultLR float64) (Config, error) {
	for _, f := range []struct {
		key string
		p   *float64
	}{
		{"learning_rate", e.LearningRate}, {"advantage_balance", e.AdvantageBalance},
		{"epsilon", e.Epsilon}, {"epsilon_high", e.EpsilonHigh},
		{"max_negative_advantage_importance_sampling_weight", e.MaxNegativeAdvantageImportanceSamplingWeight},
		{"x_k2_tau", e.XK2Tau}, {"kimi_k2_tau", e.KimiK2Tau},
		{"kl_penalty_coef", e.KLPenaltyCoef}, {"truncated_importance_sampling", e.TruncatedImportanceSampling},
		{"num_trajectories_learning_rate_multiplier_power", e.NumTrajectoriesLearningRateMultiplierPower},
	} {
		if f.p != nil && (math.IsNaN(*f.p) || math.IsInf(*f.p, 0)) {
			return Config{}, valueError(configPath+"."+f.key, "must be a finite number")
		}
	}
	if err := e.resolveAliases(); err != nil {
		return Config{}, err
	}
	if err := e.checkUnsupported(); err != nil {
		return Config{}, err
	}
	c := Config{
		PPO: deref(e.PPO, false), ISLevel: deref(e.ImportanceSamplingLevel, ISToken),
		MaskProbRatio: deref(e.MaskProbRatio, false), AdvantageBalance: deref(e.AdvantageBalance, 0),
		ScaleRewards: deref(e.ScaleRewards, true), PrecalculateLogprobs: deref(e.PrecalculateLogprobs, false),
		LearningRate:   deref(e.LearningRate, defaultLR),
		MaxNegISWeight: deref(e.MaxNegativeAdvantageImportanceSamplingWeight, math.Inf(1)),
	}
	if err := checkLearningRate(configPath+".learning_rate", c.LearningRate); err != nil {
		return c, err
	}
	if c.AdvantageBalance < -1 || c.AdvantageBalance > 1 {
		return c, valueError(configPath+".advantage_balance", "must be in [-1, 1]")
	}
	switch c.ISLevel {
	case ISToken, ISSequence, ISAverage, ISGeometricAverage:
	default:
		return c, valueError(configPath+".importance_sampling_level",
			"must be one of token, sequence, average, geometric_average; got %q", c.ISLevel)
	}
	// ppo=false (CISPO): ε ?? 1.0, ε_high ?? 4.0; ppo=true: ε ?? 0.2, ε_high ?? ε.
	c.Epsilon, c.EpsilonHigh = deref(e.Epsilon, 1.0), 4.0
	if c.PPO {
		c.Epsilon = deref(e.Epsilon, 0.2)
		c.EpsilonHigh = c.Epsilon
	}
	c.EpsilonHigh = deref(e.EpsilonHigh, c.EpsilonHigh)
	if c.Epsilon < 0 {
		return c, valueError(configPath+".epsilon", "must be >= 0")
	}
	if c.EpsilonHigh < 0 {
		return c, valueError(configPath+".epsilon_high", "must be >= 0")
	}
	if tau := e.tau(); tau != nil {
		if e.KimiK2Tau != nil && e.XK2Tau != nil && *e.KimiK2Tau != *e.XK2Tau {
			return c, valueError(configPath+".kimi_k2_tau", "is another name for x_k2_tau; got %g and x_k2_tau %g", *e.KimiK2Tau, *e.XK2Tau)
		}
		c.Tau = *tau
	}
	return c, nil
}

// resolveAliases folds loss_fn into ppo and normalize_advantages into
// scale_rewards (ART 0.5.18+ send both names, with the same meaning); a
// pair that disagrees is an error naming the later name.
func (e *ExperimentalConfig) resolveAliases() error {
	if e.LossFn != nil {
		if *e.LossFn != "cispo" && *e.LossFn != "ppo" {
			return valueError(configPath+".loss_fn", "must be cispo or ppo; got %q", *e.LossFn)
		}
		ppo := *e.LossFn == "ppo"
		if e.PPO != nil && *e.PPO != ppo {
			return valueError(configPath+".loss_fn", "%q contradicts ppo %t", *e.LossFn, *e.PPO)
		}
		e.PPO = &ppo
	}
	if e.NormalizeAdvantages != nil {
		if e.ScaleRewards != nil && *e.ScaleRewards != *e.NormalizeAdvantages {
			return valueError(configPath+".normalize_advantages", "%t contradicts scale_rewards %t (another name for it)",
				*e.NormalizeAdvantages, *e.ScaleRewards)
		}
		e.ScaleRewards = e.NormalizeAdvantages
	}
	return nil
}

// checkUnsupported refuses the later ART keys that would change training in
// a way flywheel does not implement (a 400 unsupported_value naming the
// key), rather than train without them.
func (e ExperimentalConfig) checkUnsupported() error {
	unsupported := func(key, what string) error {
		return httpx.Invalid(configPath+"."+key, "unsupported_value",
			"%s.%s: %s is not supported by flywheel; send null (or leave it out)", configPath, key, what)
	}
	if e.KLPenaltyCoef != nil && *e.KLPenaltyCoef != 0 {
		return unsupported("kl_penalty_coef", "a KL-penalized advantage")
	}
	if e.TruncatedImportanceSampling != nil {
		return unsupported("truncated_importance_sampling", "truncated importance sampling against the rollout logprobs")
	}
	if e.ScaleLearningRateByRewardStdDev != nil && *e.ScaleLearningRateByRewardStdDev {
		return unsupported("scale_learning_rate_by_reward_std_dev", "scaling the learning rate by the reward std dev")
	}
	if e.NumTrajectoriesLearningRateMultiplierPower != nil && *e.NumTrajectoriesLearningRateMultiplierPower != 0 {
		return unsupported("num_trajectories_learning_rate_multiplier_power", "a learning rate multiplied by a power of the trajectory count")
	}
	return nil
}

// tau is x_k2_tau under either of its names; nil when unset.
func (e ExperimentalConfig) tau() *float64 {
	if e.XK2Tau != nil {
		return e.XK2Tau
	}
	return e.KimiK2Tau
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// parseConfig reads raw, an experimental_config object (nil or null: {}),
// into its typed fields; unknown fields are ignored here.
func parseConfig(raw []byte) (ExperimentalConfig, object, error) {
	var e ExperimentalConfig
	o, err := decodeObject(configPath, raw)
	if err != nil {
		return e, o, err
	}
	for _, f := range []struct {
		key string
		p   **bool
	}{{"ppo", &e.PPO}, {"scale_rewards", &e.ScaleRewards}, {"precalculate_logprobs", &e.PrecalculateLogprobs}, {"mask_prob_ratio", &e.MaskProbRatio},
		{"normalize_advantages", &e.NormalizeAdvantages}, {"scale_learning_rate_by_reward_std_dev", &e.ScaleLearningRateByRewardStdDev}} {
		if *f.p, err = o.boolean(f.key); err != nil {
			return e, o, err
		}
	}
	for _, f := range []struct {
		key string
		p   **float64
	}{
		{"learning_rate", &e.LearningRate}, {"advantage_balance", &e.AdvantageBalance},
		{"epsilon", &e.Epsilon}, {"epsilon_high", &e.EpsilonHigh},
		{"max_negative_advantage_importance_sampling_weight", &e.MaxNegativeAdvantageImportanceSamplingWeight},
		{"x_k2_tau", &e.XK2Tau}, {"kimi_k2_tau", &e.KimiK2Tau},
		{"kl_penalty_coef", &e.KLPenaltyCoef}, {"truncated_importance_sampling", &e.TruncatedImportanceSampling},
		{"num_trajectories_learning_rate_multiplier_power", &e.NumTrajectoriesLearningRateMultiplierPower},
	} {
		if *f.p, err = o.number(f.key); err != nil {
			return e, o, err
		}
	}
	if e.ImportanceSamplingLevel, err = o.str("importance_sampling_level"); err != nil {
		return e, o, err
	}
	e.LossFn, err = o.str("loss_fn")
	return e, o, err
}

// ResolveConfig parses raw, an RL job's experimental_config as sent (nil or
// null: {}), and resolves it (see Resolve; defaultLR is the learning rate
// when null, DefaultLearningRate's): the Config the trainer runs, and the
// object as the job record shows it (api.md: "with defaults filled in"):
// every field of rl.md with its value or default —
// max_negative_advantage_importance_sampling_weight and x_k2_tau null when
// unset — and unknown fields kept as sent. Resolving a recorded object
// again gives the same Config and record (RecordedJob relies on it).
func ResolveConfig(raw []byte, defaultLR float64) (Config, json.RawMessage, error) {
	e, o, err := parseConfig(raw)
	if err != nil {
		return Config{}, nil, err
	}
	c, err := e.Resolve(defaultLR)
	if err != nil {
		return Config{}, nil, err
	}
	out := o.record()
	out["ppo"], out["epsilon"], out["epsilon_high"] = c.PPO, c.Epsilon, c.EpsilonHigh
	out["importance_sampling_level"], out["mask_prob_ratio"] = c.ISLevel, c.MaskProbRatio
	out["advantage_balance"], out["scale_rewards"] = c.AdvantageBalance, c.ScaleRewards
	out["precalculate_logprobs"], out["learning_rate"] = c.PrecalculateLogprobs, c.LearningRate
	out["max_negative_advantage_importance_sampling_weight"] = nullable(e.MaxNegativeAdvantageImportanceSamplingWeight)
	out["x_k2_tau"] = nullable(e.tau())
	b, err := json.Marshal(out)
	if err != nil {
		return Config{}, nil, fmt.Errorf("encode experimental_config: %w", err)
	}
	return c, b, nil
}

// nullable is *p, or nil (JSON null) when p is nil.
func nullable(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
