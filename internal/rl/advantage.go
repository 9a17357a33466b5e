package rl

import "math"

// GroupAdvantages returns the advantage of each trajectory of a group from
// its rewards (rl.md "Advantages"): A_i = r_i − μ, divided by σ + 1e-6 when
// scale (experimental_config.scale_rewards) is set, with μ the mean and σ
// the population standard deviation of the group's rewards, which it
// returns too (the job reports their means). A trajectory with A_i = 0
// teaches nothing and is skipped by the caller.
func GroupAdvantages(rewards []float64, scale bool) (adv []float64, mean, std float64) {
	n := float64(len(rewards))
	if n == 0 {
		return nil, 0, 0
	}
	for _, r := range rewards {
		mean += r
	}
	mean /= n
	var vr float64
	for _, r := range rewards {
		vr += (r - mean) * (r - mean)
	}
	std = math.Sqrt(vr / n)
	adv = make([]float64, len(rewards))
	for i, r := range rewards {
		adv[i] = r - mean
		if scale {
			adv[i] /= std + 1e-6
		}
	}
	return adv, mean, std
}

// TrajectoryWeight is the weight w_i of every trainable token of a
// trajectory with ntrain trainable tokens over it and its additional
// histories, 1 / (ntrain + 1e-6), so that each trajectory counts equally.
func TrajectoryWeight(ntrain int) float64 { return 1 / (float64(ntrain) + 1e-6) }

// Normalize applies rl.md's batch-level steps over the trainable tokens of
// one gradient step, in place: w ← w / mean(w); the advantage balance b in
// [−1, 1] (b > 0 scales negative advantages by 1 − b, b < 0 positive ones
// by 1 + b); then A ← A / mean(|A| · w).
func Normalize(toks []Token, balance float64) {
	if len(toks) == 0 {
		return
	}
	var sw float64
	for _, t := range toks {
		sw += t.W
	}
	mw := sw / float64(len(toks))
	for i := range toks {
		if mw > 0 {
			toks[i].W /= mw
		}
		switch {
		case balance > 0 && toks[i].A < 0:
			toks[i].A *= 1 - balance
		case balance < 0 && toks[i].A > 0:
			toks[i].A *= 1 + balance
		}
	}
	var s float64
	for _, t := range toks {
		s += math.Abs(t.A) * t.W
	}
	m := s / float64(len(toks))
	if m > 0 {
		for i := range toks {
			toks[i].A /= m
		}
	}
}
