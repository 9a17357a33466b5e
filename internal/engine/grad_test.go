package engine

import (
	"flywheel/internal/engine/kernels"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// tinyCfg is a small random model shape for gradient checks.
func tinyCfg(arch string, tied bool) *Config {
	c := &Config{Architecture: arch, HiddenSize: 8, IntermediateSize: 12, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 4, VocabSize: 13, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: tied, BOSTokenID: -1}
	switch arch {
	case ArchQwen2:
		c.AttentionBias = true
	case ArchQwen3:
		c.QKNorm = true
	case ArchLlama:
		c.RopeScaling = &RopeScaling{RopeType: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8}
	case ArchMistral:
		c.SlidingWindow = 3 // shorter than the first test sequence: the window takes effect
	}
	return c
}

func randVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func randNorm(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(1 + 0.2*rng.NormFloat64())
	}
	return v
}

// randWeights are random weights with every matrix in its own allocation
// (the separate-product path; RandomWeights stores q/k/v and gate/up back
// to back, the fused path).
func randWeights(cfg *Config, seed uint64) *Weights {
	rng := rand.New(rand.NewPCG(seed, 7))
	H, I, Q, KV, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), cfg.KVDim(), cfg.VocabSize
	w := &Weights{Embed: F32Mat(randVec(rng, V*H, 1)), Norm: randNorm(rng, H)}
	for range cfg.NumLayers {
		l := Layer{AttnNorm: randNorm(rng, H), MLPNorm: randNorm(rng, H),
			Wq: F32Mat(randVec(rng, Q*H, 0.5)), Wk: F32Mat(randVec(rng, KV*H, 0.5)), Wv: F32Mat(randVec(rng, KV*H, 0.5)),
			Wo: F32Mat(randVec(rng, H*Q, 0.3)), Wgate: F32Mat(randVec(rng, I*H, 0.4)), Wup: F32Mat(randVec(rng, I*H, 0.4)),
			Wdown: F32Mat(randVec(rng, H*I, 0.3))}
		if cfg.AttentionBias {
			l.Bq, l.Bk, l.Bv = randVec(rng, Q, 0.1), randVec(rng, KV, 0.1), randVec(rng, KV, 0.1)
		}
		if cfg.QKNorm {
			l.QNorm, l.KNorm = randNorm(rng, cfg.HeadDim), randNorm(rng, cfg.HeadDim)
		}
		w.Layers = append(w.Layers, l)
	}
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	} else {
		w.LMHead = F32Mat(randVec(rng, V*H, 1))
	}
	return w
}

func randAdapter(t testing.TB, cfg *Config, rank int, seed uint64) *Adapter {
	ad, err := NewAdapter(cfg, LoRAConfig{Rank: rank, Alpha: float64(2 * rank), TargetModules: AllModules}, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, mods := range ad.Layers {
		for _, m := range AllModules { // in a fixed order: map order would change the test per run
			p := mods[m]
			for i := range p.B {
				p.B[i] = float32(rng.NormFloat64() * 0.3)
			}
		}
	}
	return ad
}

// packBatch packs seqs with every position but the last of each as a row.
func packBatch(seqs [][]int) *Batch {
	b := &Batch{}
	for _, s := range seqs {
		off := len(b.Tokens)
		for i, tok := range s {
			b.Tokens = append(b.Tokens, tok)
			b.Pos = append(b.Pos, i)
			if i+1 < len(s) {
				b.Rows = append(b.Rows, off+i)
				b.Targets = append(b.Targets, s[i+1])
			}
		}
		b.Segs = append(b.Segs, Segment{off, len(s)})
	}
	return b
}

// testBatch packs two random sequences of lengths 5 and 3.
func testBatch(V int, seed uint64) *Batch {
	rng := rand.New(rand.NewPCG(seed, 3))
	var seqs [][]int
	for _, L := range []int{5, 3} {
		s := make([]int, L)
		for i := range s {
			s[i] = rng.IntN(V)
		}
		seqs = append(seqs, s)
	}
	return packBatch(seqs)
}

// objective: Σ_i c_i · logprob_i.
func objective[T Float](t testing.TB, n *Net[T], lo *LoRA[T], b *Batch, coef []float64, bud Budgets) float64 {
	p, err := n.ForwardBatch(b, lo, bud)
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for i, lp := range p.LogProb {
		s += coef[i] * lp
	}
	return s
}

// checkModelGrad compares the analytic LoRA gradient of Net[T] against
// central differences of the float64 model, element by element.
func checkModelGrad[T Float](t *testing.T, cfg *Config, w *Weights, recompute bool, tol float64) {
	ad := randAdapter(t, cfg, 2, 2)
	b := testBatch(cfg.VocabSize, 3)
	coef := make([]float64, len(b.Rows))
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range coef {
		coef[i] = rng.NormFloat64()
	}
	n, err := NewNet[T](cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	lo := NewLoRA[T](ad.Clone(), true)
	bud := DefaultBudgets
	if recompute {
		bud = Budgets{}
	}
	p, err := n.ForwardBatch(b, lo, bud)
	if err != nil {
		t.Fatal(err)
	}
	p.Backward(coef)

	ref, _ := NewNet[float64](cfg, w)
	refLo := NewLoRA[float64](ad.Clone(), false)
	// Fourth-order central differences: truncation error O(h⁴) lets h be
	// large enough that rounding in the objective (|f|·ε/h) stays far below
	// the 1e-6 tolerance; plain central differences at h = 1e-5 sat right
	// at it (absolute noise ~1e-8).
	const h = 1e-4
	at := func(par []float64, i int, v float64) float64 {
		par[i] = v
		return objective(t, ref, refLo, b, coef, DefaultBudgets)
	}
	stride := 1
	if raceEnabled {
		stride = 11 // the race detector makes every forward ~10x slower
	}
	var worst float64
	for l := range lo.Layers {
		for mi, f := range lo.Layers[l] {
			rf := refLo.Layers[l][mi]
			for _, which := range []string{"A", "B"} {
				par, grad := rf.A, f.DA
				if which == "B" {
					par, grad = rf.B, f.DB
				}
				for i := (l + mi) % stride; i < len(par); i += stride {
					orig := par[i]
					f1, fm1 := at(par, i, orig+h), at(par, i, orig-h)
					f2, fm2 := at(par, i, orig+2*h), at(par, i, orig-2*h)
					par[i] = orig
					num := (8*(f1-fm1) - (f2 - fm2)) / (12 * h)
					got := float64(grad[i])
					rel := math.Abs(got-num) / math.Max(math.Abs(num), 1e-2)
					worst = max(worst, rel)
					if rel > tol {
						t.Fatalf("layer %d %s %s[%d]: analytic %.9g numeric %.9g (rel %.2g)", l, AllModules[mi], which, i, got, num, rel)
					}
				}
			}
		}
	}
	t.Logf("max rel err %.3g", worst)
}

func TestModelLoRAGradFloat64(t *testing.T) {
	prev := attnBlock
	attnBlock = 2
	defer func() { attnBlock = prev }()
	for _, arch := range []string{ArchLlama, ArchQwen2, ArchQwen3, ArchMistral} {
		for _, tied := range []bool{false, true} {
			for _, rec := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/tied=%v/recompute=%v", arch, tied, rec), func(t *testing.T) {
					cfg := tinyCfg(arch, tied)
					checkModelGrad[float64](t, cfg, randWeights(cfg, 1), rec, 1e-6)
				})
			}
		}
		// q/k/v and gate/up stored back to back: the fused products.
		t.Run(arch+"/fused", func(t *testing.T) {
			cfg := tinyCfg(arch, false)
			checkModelGrad[float64](t, cfg, RandomWeights(cfg, 1), false, 1e-6)
		})
	}
}

// The float32 instantiation (what training runs) against the same float64
// differences. The exact check is the float64 one above; this one bounds
// float32 rounding, which for Qwen2 (biases, tied head) reaches ~1e-3 of
// max(|g|, 1e-2) and moves with the kernels' summation order, so the
// bound is 2e-3 (a wrong gradient is off by O(1)).
func TestModelLoRAGradFloat32(t *testing.T) {
	for _, arch := range []string{ArchLlama, ArchQwen2, ArchQwen3} {
		t.Run(arch, func(t *testing.T) {
			cfg := tinyCfg(arch, arch == ArchQwen2)
			checkModelGrad[float32](t, cfg, randWeights(cfg, 1), false, 2e-3)
		})
	}
	// Training through a frozen BF16 / F16 base: the float32 pass runs the
	// half-precision kernels (forward and input gradients), the float64
	// reference the same values widened; separate and fused matrices.
	for _, ht := range []kernels.HalfType{kernels.BF16, kernels.F16} {
		t.Run(ht.String(), func(t *testing.T) {
			cfg := tinyCfg(ArchQwen2, true)
			checkModelGrad[float32](t, cfg, randWeights(cfg, 1).ToHalf(ht), false, 2e-3)
			checkModelGrad[float32](t, cfg, RandomWeights(cfg, 1).ToHalf(ht), true, 2e-3)
		})
	}
}
