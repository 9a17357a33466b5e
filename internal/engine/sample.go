package engine

import (
	"math"
	"math/rand/v2"
	"sort"

	"flywheel/internal/engine/kernels"
)

// SamplingParams select how the next token is drawn from the logits.
//
//   - Temperature 0 (or less) is greedy decoding (argmax, lowest id on ties).
//   - TopK <= 0, TopP outside (0,1) and MinP <= 0 switch that truncation off.
//   - Truncations are applied in the order top-k, top-p (on the distribution
//     renormalised after top-k), min-p (tokens with p < MinP·p_max dropped).
//   - Seed makes the draws reproducible: the same seed and the same logits
//     give the same tokens. Without a seed each Sampler draws a random one.
//   - TopLogprobs > 0 asks for that many most likely alternatives.
type SamplingParams struct {
	Temperature, TopP, MinP float64
	TopK                    int
	Seed                    *uint64
	TopLogprobs             int
}

// TokenLogprob is a token id with its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float32
}

// Sampler draws tokens for one request. It holds its own random generator,
// so it is not safe for concurrent use; use one per request.
//
// Logprobs (of the sampled token and of the alternatives) are taken under
// the distribution the token was sampled from: softmax(logits/temperature),
// after temperature and before the top-k/top-p/min-p truncation. For greedy
// decoding (temperature 0) it is the temperature-1 distribution,
// log_softmax(logits).
type Sampler struct {
	p    SamplingParams
	rng  *rand.Rand
	prob []float64 // unnormalised probabilities exp(z - max)
	heap []int32   // candidate ids (scratch)
}

// NewSampler makes a sampler for p.
func NewSampler(p SamplingParams) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		seed = rand.Uint64()
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909))}
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() SamplingParams { return s.p }

// Sample picks the next token from logits ([vocab]) and returns it with its
// logprob and, when asked for, the TopLogprobs most likely tokens (highest
// first, ties by lower id) under the same distribution.
func (s *Sampler) Sample(logits []float32) (id int, logprob float32, top []TokenLogprob) {
	V := len(logits)
	if V == 0 {
		return -1, float32(math.Inf(-1)), nil
	}
	greedy := !(s.p.Temperature > 0)
	invT := 1.0
	if !greedy {
		invT = 1 / s.p.Temperature
	}
	// max and log-sum-exp of z = logits/T.
	maxL := float32(math.Inf(-1))
	arg := -1
	for i, v := range logits {
		if v > maxL {
			maxL, arg = v, i
		}
	}
	if arg < 0 {
		// No finite logits: fall back to token 0.
		return 0, float32(math.Inf(-1)), nil
	}
	zmax := float64(maxL) * invT
	if cap(s.prob) < V {
		s.prob = make([]float64, V)
	}
	prob := s.prob[:V]
	sum := kernels.ExpShift64(prob, logits, invT, zmax) // prob = exp(z − zmax), summed in order
	lse := zmax + math.Log(sum)
	lp := func(i int) float32 {
		if prob[i] == 0 {
			return float32(math.Inf(-1))
		}
		return float32(float64(logits[i])*invT - lse)
	}
	if s.p.TopLogprobs > 0 {
		top = s.topN(logits, prob, s.p.TopLogprobs, lp)
	}
	if greedy {
		return arg, lp(arg), top
	}
	id = s.draw(prob, sum)
	return id, lp(id), top
}

// higher orders candidates by probability, highest first, then lower id.
func higher(prob []float64, a, b int32) bool {
	if prob[a] != prob[b] {
		return prob[a] > prob[b]
	}
	return a < b
}

// partition reorders c around a pivot (median of three by higher) and
// returns the pivot's final index: c[:i] are higher than it, c[i+1:] lower.
func partition(prob []float64, c []int32) int {
	n := len(c)
	a, b, d := 0, n/2, n-1
	if higher(prob, c[b], c[a]) {
		a, b = b, a
	}
	if higher(prob, c[d], c[b]) {
		b = d
		if higher(prob, c[b], c[a]) {
			b = a
		}
	}
	c[b], c[n-1] = c[n-1], c[b]
	pv := c[n-1]
	i := 0
	for j := 0; j < n-1; j++ {
		if higher(prob, c[j], pv) {
			c[i], c[j] = c[j], c[i]
			i++
		}
	}
	c[i], c[n-1] = c[n-1], c[i]
	return i
}

func sortDesc(prob []float64, c []int32) {
	sort.Slice(c, func(i, j int) bool { return higher(prob, c[i], c[j]) })
}

// selectTopK moves the k best candidates to c[:k] (in no particular order)
// in expected linear time.
func selectTopK(prob []float64, c []int32, k int) {
	lo, hi := 0, len(c)
	for hi-lo > 1 {
		i := lo + partition(prob, c[lo:hi])
		switch {
		case i == k || i == k-1:
			return
		case i > k:
			hi = i
		default:
			lo = i + 1
		}
	}
}

// selectMass returns the length n of the shortest prefix of c, taken in
// descending order, whose mass reaches target, having moved those
// candidates to c[:n] (in no particular order). Expected linear time.
func selectMass(prob []float64, c []int32, target float64) int {
	lo, hi := 0, len(c)
	for hi-lo > 16 {
		i := lo + partition(prob, c[lo:hi])
		var m float64
		for _, x := range c[lo:i] {
			m += prob[x]
		}
		switch {
		case m >= target:
			hi = i
		case m+prob[c[i]] >= target:
			return i + 1
		default:
			target -= m + prob[c[i]]
			lo = i + 1
		}
	}
	sortDesc(prob, c[lo:hi])
	acc := 0.0
	for i := lo; i < hi; i++ {
		acc += prob[c[i]]
		if acc >= target {
			return i + 1
		}
	}
	return hi
}

// draw samples an id from prob (unnormalised, max 1, total sum) after the
// truncations: top-k, top-p on the renormalised top-k set, then min-p.
func (s *Sampler) draw(prob []float64, sum float64) int {
	V := len(prob)
	topK := s.p.TopK
	if topK >= V {
		topK = 0
	}
	topP := s.p.TopP
	useP := topP > 0 && topP < 1
	minP := s.p.MinP // threshold relative to p_max = 1 (unnormalised)
	if minP > 1 {
		minP = 1
	}
	if topK <= 0 && !useP {
		// Only min-p (or nothing): one pass over the vocabulary, and
		// another for min-p's total (without it, the total is sum: the
		// same additions in the same order, less those of zeros).
		total := sum
		if minP > 0 {
			total = 0
			for _, p := range prob {
				if p >= minP {
					total += p
				}
			}
		}
		u := s.rng.Float64() * total
		acc := 0.0
		last := 0
		for i, p := range prob {
			if p >= minP && p > 0 {
				acc += p
				last = i
				if acc > u {
					return i
				}
			}
		}
		return last
	}
	// Min-p only removes the least likely tokens, so without top-k (whose
	// renormalisation needs them) they can be dropped before top-p.
	c := s.heap[:0]
	for i, p := range prob {
		if p > 0 && (topK > 0 || p >= minP) {
			c = append(c, int32(i))
		}
	}
	s.heap = c
	z := sum
	if topK > 0 && topK < len(c) {
		selectTopK(prob, c, topK)
		c = c[:topK]
		z = 0
		for _, x := range c {
			z += prob[x]
		}
	}
	if useP {
		c = c[:selectMass(prob, c, topP*z)]
	}
	n := 0
	total := 0.0
	for _, x := range c {
		if prob[x] >= minP {
			c[n] = x
			n++
			total += prob[x]
		}
	}
	c = c[:n]
	if n == 0 {
		return 0
	}
	u := s.rng.Float64() * total
	acc := 0.0
	for _, x := range c {
		acc += prob[x]
		if acc > u {
			return int(x)
		}
	}
	return int(c[n-1])
}

// topN returns the n most likely tokens, highest first.
func (s *Sampler) topN(logits []float32, prob []float64, n int, lp func(int) float32) []TokenLogprob {
	n = min(n, len(logits))
	// Keep a small sorted list (n is at most ~20 in practice). Once it is
	// full, a token enters only above the last one's probability: at equal
	// probability the last one's lower id ranks first.
	best := make([]int32, 0, n+1)
	thr := 0.0 // the last one's probability when full; 0 drops p == 0
	for i, p := range prob[:len(logits)] {
		if p <= thr {
			continue
		}
		x := int32(i)
		j := sort.Search(len(best), func(k int) bool { return higher(prob, x, best[k]) })
		best = append(best, 0)
		copy(best[j+1:], best[j:])
		best[j] = x
		if len(best) > n {
			best = best[:n]
		}
		if len(best) == n {
			thr = prob[best[n-1]]
		}
	}
	out := make([]TokenLogprob, len(best))
	for i, x := range best {
		out[i] = TokenLogprob{ID: int(x), Logprob: lp(int(x))}
	}
	return out
}
