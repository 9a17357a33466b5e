package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"flywheel/internal/engine"
)

// tinyCfg is a small random model shape for gradient checks.
func tinyCfg(arch string, tied bool) *engine.Config {
	c := &engine.Config{Architecture: arch, HiddenSize: 8, IntermediateSize: 12, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 4, VocabSize: 13, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: tied, BOSTokenID: -1}
	switch arch {
	case engine.ArchQwen2:
		c.AttentionBias = true
	case engine.ArchQwen3:
		c.QKNorm = true
	case engine.ArchLlama:
		c.RopeScaling = &engine.RopeScaling{RopeType: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8}
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

func randWeights(cfg *engine.Config, seed uint64) *engine.Weights {
	rng := rand.New(rand.NewPCG(seed, 7))
	H, I, Q, KV, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), cfg.KVDim(), cfg.VocabSize
	w := &engine.Weights{Embed: randVec(rng, V*H, 1), Norm: randNorm(rng, H)}
	for range cfg.NumLayers {
		l := engine.Layer{AttnNorm: randNorm(rng, H), MLPNorm: randNorm(rng, H),
			Wq: randVec(rng, Q*H, 0.5), Wk: randVec(rng, KV*H, 0.5), Wv: randVec(rng, KV*H, 0.5),
			Wo: randVec(rng, H*Q, 0.3), Wgate: randVec(rng, I*H, 0.4), Wup: randVec(rng, I*H, 0.4),
			Wdown: randVec(rng, H*I, 0.3)}
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
		w.LMHead = randVec(rng, V*H, 1)
	}
	return w
}

func randAdapter(t testing.TB, cfg *engine.Config, rank int, seed uint64) *engine.Adapter {
	ad, err := engine.NewAdapter(cfg, engine.LoRAConfig{Rank: rank, Alpha: float64(2 * rank), TargetModules: engine.AllModules}, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, mods := range ad.Layers {
		for _, m := range engine.AllModules { // in a fixed order: map order would change the test per run
			p := mods[m]
			for i := range p.B {
				p.B[i] = float32(rng.NormFloat64() * 0.3)
			}
		}
	}
	return ad
}

// testBatch packs two sequences (lengths 5 and 3) with every position but
// the last of each as a row.
func testBatch(V int, seed uint64) *batch {
	rng := rand.New(rand.NewPCG(seed, 3))
	b := &batch{}
	for _, L := range []int{5, 3} {
		off := len(b.Tokens)
		for i := 0; i < L; i++ {
			b.Tokens = append(b.Tokens, rng.IntN(V))
			b.Pos = append(b.Pos, i)
		}
		for i := 0; i < L-1; i++ {
			b.Rows = append(b.Rows, off+i)
			b.Targets = append(b.Targets, b.Tokens[off+i+1])
		}
		b.Segs = append(b.Segs, seg{off, L})
	}
	return b
}

// objective: Σ_i c_i · logprob_i (+ nothing else).
func objective[T Float](m *model[T], b *batch, coef []float64) float64 {
	p := m.forward(b)
	var s float64
	for i, lp := range p.LogProb {
		s += coef[i] * lp
	}
	return s
}

// checkModelGrad compares the analytic LoRA gradient of model[T] against
// central differences of the float64 model, element by element.
func checkModelGrad[T Float](t *testing.T, cfg *engine.Config, recompute bool, tol float64) {
	w := randWeights(cfg, 1)
	ad := randAdapter(t, cfg, 2, 2)
	b := testBatch(cfg.VocabSize, 3)
	coef := make([]float64, len(b.Rows))
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range coef {
		coef[i] = rng.NormFloat64()
	}
	m, err := newModel[T](cfg, w, ad.Clone())
	if err != nil {
		t.Fatal(err)
	}
	if recompute {
		m.ActivationBudget, m.HeadBudget = 0, 0
	}
	p := m.forward(b)
	p.backward(coef)

	ref, _ := newModel[float64](cfg, w, ad.Clone())
	// Fourth-order central differences: truncation error O(h⁴) lets h be
	// large enough that rounding in the objective (|f|·ε/h) stays far below
	// the 1e-6 tolerance; plain central differences at h = 1e-5 sat right
	// at it (absolute noise ~1e-8).
	const h = 1e-4
	at := func(par []float64, i int, v float64) float64 {
		par[i] = v
		return objective(ref, b, coef)
	}
	stride := 1
	if raceEnabled {
		stride = 11 // the race detector makes every forward ~10x slower
	}
	var worst float64
	for l := range m.layers {
		for mi, ln := range m.layers[l].linears() {
			rl := ref.layers[l].linears()[mi]
			for _, which := range []string{"A", "B"} {
				par, grad := rl.L.A, ln.L.dA
				if which == "B" {
					par, grad = rl.L.B, ln.L.dB
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
						t.Fatalf("layer %d %s %s[%d]: analytic %.9g numeric %.9g (rel %.2g)", l, engine.AllModules[mi], which, i, got, num, rel)
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
	for _, arch := range []string{engine.ArchLlama, engine.ArchQwen2, engine.ArchQwen3, engine.ArchMistral} {
		for _, tied := range []bool{false, true} {
			for _, rec := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/tied=%v/recompute=%v", arch, tied, rec), func(t *testing.T) {
					checkModelGrad[float64](t, tinyCfg(arch, tied), rec, 1e-6)
				})
			}
		}
	}
}

func TestModelLoRAGradFloat32(t *testing.T) {
	for _, arch := range []string{engine.ArchLlama, engine.ArchQwen2, engine.ArchQwen3} {
		t.Run(arch, func(t *testing.T) {
			checkModelGrad[float32](t, tinyCfg(arch, arch == engine.ArchQwen2), false, 1e-3)
		})
	}
}
