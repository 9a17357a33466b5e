package train

import (
	"fmt"
	"math"
)

// ExperimentalConfig is a job's `experimental_config` (rl.md); every field
// is nullable and null means the default.
type ExperimentalConfig struct {
	PPO                                          *bool    `json:"ppo"`
	Epsilon                                      *float64 `json:"epsilon"`
	EpsilonHigh                                  *float64 `json:"epsilon_high"`
	ImportanceSamplingLevel                      *string  `json:"importance_sampling_level"`
	MaskProbRatio                                *bool    `json:"mask_prob_ratio"`
	MaxNegativeAdvantageImportanceSamplingWeight *float64 `json:"max_negative_advantage_importance_sampling_weight"`
	XK2Tau                                       *float64 `json:"x_k2_tau"`
	AdvantageBalance                             *float64 `json:"advantage_balance"`
	ScaleRewards                                 *bool    `json:"scale_rewards"`
	PrecalculateLogprobs                         *bool    `json:"precalculate_logprobs"`
	LearningRate                                 *float64 `json:"learning_rate"`
}

// Importance-sampling levels.
const (
	ISToken            = "token"
	ISSequence         = "sequence"
	ISAverage          = "average"
	ISGeometricAverage = "geometric_average"
)

// LossConfig is an ExperimentalConfig with the defaults of rl.md filled in.
type LossConfig struct {
	PPO                  bool
	Epsilon, EpsilonHigh float64
	ISLevel              string
	MaskProbRatio        bool
	MaxNegISWeight       float64 // +Inf when unset
	Tau                  float64 // 0 when unset
	AdvantageBalance     float64
	ScaleRewards         bool
	PrecalculateLogprobs bool
	LearningRate         float64
}

// Resolve fills in the defaults of rl.md; defaultLR is the model's default
// learning rate. It validates as job creation does (finite numbers,
// epsilon ≥ 0, balance in [−1, 1], learning rate > 0, a known IS level).
func (e ExperimentalConfig) Resolve(defaultLR float64) (LossConfig, error) {
	c := LossConfig{ISLevel: ISToken, MaxNegISWeight: math.Inf(1), ScaleRewards: true, LearningRate: defaultLR}
	finite := func(name string, p *float64) error {
		if p != nil && (math.IsNaN(*p) || math.IsInf(*p, 0)) {
			return fmt.Errorf("experimental_config.%s must be a finite number", name)
		}
		return nil
	}
	for name, p := range map[string]*float64{"epsilon": e.Epsilon, "epsilon_high": e.EpsilonHigh,
		"max_negative_advantage_importance_sampling_weight": e.MaxNegativeAdvantageImportanceSamplingWeight,
		"x_k2_tau": e.XK2Tau, "advantage_balance": e.AdvantageBalance, "learning_rate": e.LearningRate} {
		if err := finite(name, p); err != nil {
			return c, err
		}
	}
	if e.PPO != nil {
		c.PPO = *e.PPO
	}
	if c.PPO {
		c.Epsilon = 0.2
		if e.Epsilon != nil {
			c.Epsilon = *e.Epsilon
		}
		c.EpsilonHigh = c.Epsilon
	} else {
		c.Epsilon, c.EpsilonHigh = 1.0, 4.0
		if e.Epsilon != nil {
			c.Epsilon = *e.Epsilon
		}
	}
	if e.EpsilonHigh != nil {
		c.EpsilonHigh = *e.EpsilonHigh
	}
	if c.Epsilon < 0 || c.EpsilonHigh < 0 {
		return c, fmt.Errorf("experimental_config.epsilon must be >= 0")
	}
	if e.ImportanceSamplingLevel != nil {
		switch *e.ImportanceSamplingLevel {
		case ISToken, ISSequence, ISAverage, ISGeometricAverage:
			c.ISLevel = *e.ImportanceSamplingLevel
		default:
			return c, fmt.Errorf("experimental_config.importance_sampling_level must be one of token, sequence, average, geometric_average")
		}
	}
	if e.MaskProbRatio != nil {
		c.MaskProbRatio = *e.MaskProbRatio
	}
	if e.MaxNegativeAdvantageImportanceSamplingWeight != nil {
		c.MaxNegISWeight = *e.MaxNegativeAdvantageImportanceSamplingWeight
	}
	if e.XK2Tau != nil {
		c.Tau = *e.XK2Tau
	}
	if e.AdvantageBalance != nil {
		c.AdvantageBalance = *e.AdvantageBalance
		if c.AdvantageBalance < -1 || c.AdvantageBalance > 1 {
			return c, fmt.Errorf("experimental_config.advantage_balance must be in [-1, 1]")
		}
	}
	if e.ScaleRewards != nil {
		c.ScaleRewards = *e.ScaleRewards
	}
	if e.PrecalculateLogprobs != nil {
		c.PrecalculateLogprobs = *e.PrecalculateLogprobs
	}
	if e.LearningRate != nil {
		c.LearningRate = *e.LearningRate
	}
	if !(c.LearningRate > 0) {
		return c, fmt.Errorf("experimental_config.learning_rate must be > 0")
	}
	return c, nil
}

// Filled returns the config as the job record shows it (defaults filled in).
func (c LossConfig) Filled() map[string]any {
	m := map[string]any{
		"ppo": c.PPO, "epsilon": c.Epsilon, "epsilon_high": c.EpsilonHigh,
		"importance_sampling_level": c.ISLevel, "mask_prob_ratio": c.MaskProbRatio,
		"max_negative_advantage_importance_sampling_weight": nil, "x_k2_tau": nil,
		"advantage_balance": c.AdvantageBalance, "scale_rewards": c.ScaleRewards,
		"precalculate_logprobs": c.PrecalculateLogprobs, "learning_rate": c.LearningRate,
	}
	if !math.IsInf(c.MaxNegISWeight, 1) {
		m["max_negative_advantage_importance_sampling_weight"] = c.MaxNegISWeight
	}
	if c.Tau != 0 {
		m["x_k2_tau"] = c.Tau
	}
	return m
}

// lossToken is one trainable token of a batch as the loss sees it.
type lossToken struct {
	New float64 // current logprob (the differentiated variable)
	Old float64 // recorded logprob; NaN = missing (old = stop-grad(new))
	A   float64 // advantage (already balanced and normalised over the batch)
	W   float64 // weight (already normalised over the batch)
	Seq int     // sequence index within the batch, for sequence-level IS
}

// lossStats are the per-batch figures the loss reports.
type lossStats struct {
	Loss       float64
	NumClipped int
	N          int
}

// rlLoss is the per-token loss of rl.md summed over a batch:
//
//	total = Σ_t L_t · w_t · m_t / (Σ_t m_t + 1e-6)
//
// It returns the total and ∂total/∂new_t for every token.
func rlLoss(c LossConfig, toks []lossToken) (lossStats, []float64) {
	n := len(toks)
	grad := make([]float64, n)
	st := lossStats{N: n}
	if n == 0 {
		return st, grad
	}
	denom := float64(n) + 1e-6

	// Δ_t and the per-sequence mean of Δ over trainable tokens.
	delta := make([]float64, n)
	seqSum, seqCnt := map[int]float64{}, map[int]int{}
	for i, t := range toks {
		if !math.IsNaN(t.Old) {
			delta[i] = t.New - t.Old
		}
		seqSum[t.Seq] += delta[i]
		seqCnt[t.Seq]++
	}
	lo, hi := 1-c.Epsilon, 1+c.EpsilonHigh
	clip := func(r float64) float64 { return math.Min(math.Max(r, lo), hi) }

	// dρ/dΔ_t (own token) and dρ/dΔ̄ (sequence mean) per token.
	dOwn, dMean := make([]float64, n), make([]float64, n)
	for i, t := range toks {
		rt := math.Exp(delta[i])
		rs := math.Exp(seqSum[t.Seq] / float64(seqCnt[t.Seq]))
		var rho float64
		switch c.ISLevel {
		case ISSequence:
			rho, dMean[i] = rs, rs
		case ISAverage:
			rho, dOwn[i], dMean[i] = (rt+rs)/2, rt/2, rs/2
		case ISGeometricAverage:
			rho = math.Sqrt(rt * rs)
			dOwn[i], dMean[i] = rho/2, rho/2
		default:
			rho, dOwn[i] = rt, rt
		}
		if rho > c.MaxNegISWeight {
			rho, dOwn[i], dMean[i] = c.MaxNegISWeight, 0, 0
		}
		if c.MaskProbRatio && !(rho > lo && rho < hi) {
			rho, dOwn[i], dMean[i] = 0, 0, 0
		}
		if clip(rho) != rho {
			st.NumClipped++
		}
		A := t.A - c.Tau*delta[i]
		var L, dLdRho, dLdNew float64
		if c.PPO {
			unc, cl := rho*A, clip(rho)*A
			L = -math.Min(unc, cl)
			if unc <= cl {
				dLdRho = -A
			}
		} else {
			L = -clip(rho) * A * t.New
			dLdNew = -clip(rho) * A
		}
		k := t.W / denom
		st.Loss += L * k
		grad[i] += dLdNew * k
		// chain through ρ: Δ_t depends on new_t, Δ̄ on every token of the sequence
		dOwn[i] *= dLdRho * k
		dMean[i] *= dLdRho * k
	}
	meanGrad := map[int]float64{}
	for i, t := range toks {
		grad[i] += dOwn[i]
		meanGrad[t.Seq] += dMean[i]
	}
	for i, t := range toks {
		grad[i] += meanGrad[t.Seq] / float64(seqCnt[t.Seq])
	}
	return st, grad
}
