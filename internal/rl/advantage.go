package rl

import "math"

// GroupAdvantages returns the advantage of each trajectory of a group from
// its rewards (rl.md "Advantages"): A_i = r_i − μ, divided by σ + 1e-6 when
// scale (experimental_config.scale_rewards) is set, with μ the mean and σ
// the population standard deviation of the group's rewards, which it
// returns too (the job reports their means). A trajectory with A_i = 0
// teaches nothing and is skipped by the caller.
func GroupAdvantages(rewards []float64, scale bool) (adv []float64, mean, std float64) {
	if len(rewards) == 0 {
		return nil, 0, 0
	}
	mean, std = meanStd(rewards)
	adv = make([]float64, len(rewards))
	for i, r := range rewards {
		adv[i] = r - mean
		if scale {
			adv[i] /= std + 1e-6
		}
	}
	return adv, mean, std
}

// meanStd is the mean and the population standard deviation of a
// non-empty group's rewards.
func meanStd(rewards []float64) (mean, std float64) {
	n := float64(len(rewards))
	for _, r := range rewards {
		mean += r
	}
	mean /= n
	var vr float64
	for _, r := range rewards {
		vr += (r - mean) * (r - mean)
	}
	return mean, math.Sqrt(vr / n)
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

// RewardStats are the reward statistics of a set of trajectory groups, as
// an RL job's metrics (reward, reward_std_dev) and POST .../log (api.md)
// report them alike: the mean reward over all trajectories, and
// reward_std_dev, the mean over the groups with more than one trajectory
// of the population std of their rewards (0 when there is none), as the
// ART client computes it. A group of one trajectory has no spread to
// measure, so it does not pull the mean towards 0.
type RewardStats struct {
	sum            float64 // of all rewards
	n              int     // trajectories
	stdSum         float64 // of the groups' population stds
	groupsWithPair int     // groups with more than one trajectory
}

// AddGroup adds one group's rewards.
func (s *RewardStats) AddGroup(rewards []float64) {
	for _, r := range rewards {
		s.sum += r
	}
	s.n += len(rewards)
	if len(rewards) > 1 {
		_, std := meanStd(rewards)
		s.stdSum += std
		s.groupsWithPair++
	}
}

// Trajectories is the number of rewards added.
func (s *RewardStats) Trajectories() int { return s.n }

// Mean is the mean reward over all trajectories (0 when there is none).
func (s *RewardStats) Mean() float64 {
	if s.n == 0 {
		return 0
	}
	return s.sum / float64(s.n)
}

// StdDev is reward_std_dev: the mean population std over the groups with
// more than one trajectory (0 when there is none).
func (s *RewardStats) StdDev() float64 {
	if s.groupsWithPair == 0 {
		return 0
	}
	return s.stdSum / float64(s.groupsWithPair)
}
