package train

import (
	"flywheel/internal/cputime"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/rl"
)

// smolCfg is the SmolLM2-135M shape; smallCfg a small model of the same
// family (hidden 256, 4 layers).
func smolCfg() *engine.Config {
	return &engine.Config{Architecture: engine.ArchLlama, HiddenSize: 576, IntermediateSize: 1536, NumLayers: 30,
		NumHeads: 9, NumKVHeads: 3, HeadDim: 64, VocabSize: 49152, MaxPositionEmbeddings: 8192,
		RMSNormEps: 1e-5, RopeTheta: 100000, TieWordEmbeddings: true, BOSTokenID: -1}
}

func smallCfg() *engine.Config {
	return &engine.Config{Architecture: engine.ArchLlama, HiddenSize: 256, IntermediateSize: 768, NumLayers: 4,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 64, VocabSize: 49152, MaxPositionEmbeddings: 8192,
		RMSNormEps: 1e-5, RopeTheta: 100000, TieWordEmbeddings: true, BOSTokenID: -1}
}

// benchBatch is nseq sequences of seqLen random tokens, every position
// trained (the heaviest case: the lm head runs on every row).
func benchBatch(cfg *engine.Config, nseq, seqLen int) *stepBatch {
	var seqs []*sequence
	x := uint64(12345)
	for s := 0; s < nseq; s++ {
		sq := &sequence{A: 1, W: 1}
		for t := 0; t < seqLen; t++ {
			x = x*6364136223846793005 + 1442695040888963407
			sq.Tokens = append(sq.Tokens, int(x>>33)%cfg.VocabSize)
			sq.Mask = append(sq.Mask, t > 0)
			sq.OldLP = append(sq.OldLP, -1)
		}
		sq.count()
		seqs = append(seqs, sq)
	}
	return buildBatch(seqs)
}

// peakRSS is the process's peak resident set (VmHWM) in MiB.
func peakRSS() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// benchTrainStep measures one full training step — forward, loss,
// backward to every LoRA A/B (r=16, all seven projections), global-norm
// clipping and AdamW — in tokens per second.
func benchTrainStep(b *testing.B, cfg *engine.Config, nseq, seqLen int, recompute bool) {
	w := engine.RandomWeights(cfg, 1)
	ad, err := engine.NewAdapter(cfg, engine.DefaultLoRAConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	budget := engine.DefaultBudgets.Activations
	if recompute {
		budget = 1 // nothing fits: every layer is recomputed
	}
	m, err := newModel(engine.NewModel("bench", cfg, w, nil, nil), ad, budget)
	if err != nil {
		b.Fatal(err)
	}
	s := &session{ad: ad, m: m, opt: NewAdamW(), params: adapterParams(m)}
	sb := benchBatch(cfg, nseq, seqLen)
	b.Logf("kernels: %s, GOMAXPROCS %d", kernels.Describe(kernels.Default()), runtime.GOMAXPROCS(0))
	if _, err := s.runStep(sb, 1e-4, ceLoss); err != nil { // warm-up
		b.Fatal(err)
	}
	el := timeSteps(b, s, sb, 1e-4, ceLoss)
	b.ReportMetric(float64(b.N*sb.ntoken)/el, "tokens/s")
}

// timeSteps runs b.N steps of sb and reports seconds per step (wall, CPU,
// and per phase) and the peak RSS; it returns the wall seconds.
func timeSteps(b *testing.B, s *session, sb *stepBatch, lr float64, lossFn func([]float64) (rl.Stats, []float64)) float64 {
	b.ResetTimer()
	start, cpu0 := time.Now(), cputime.Used().Seconds()
	var ph [3]float64
	for i := 0; i < b.N; i++ {
		r, err := s.runStep(sb, lr, lossFn)
		if err != nil {
			b.Fatal(err)
		}
		for k := range ph {
			ph[k] += r.Phases[k] / float64(b.N)
		}
	}
	el := time.Since(start).Seconds()
	b.ReportMetric(ph[0], "s-forward")
	b.ReportMetric(ph[1], "s-backward")
	b.ReportMetric(ph[2], "s-optimizer")
	b.ReportMetric(el/float64(b.N), "s/step")
	b.ReportMetric((cputime.Used().Seconds()-cpu0)/float64(b.N), "cpu-s/step")
	b.ReportMetric(peakRSS(), "peakRSS-MiB")
	return el
}

// Default options: at this shape all activations fit the 2 GiB budget.
func BenchmarkTrainStepSmolLM2_135M_4x256(b *testing.B) {
	benchTrainStep(b, smolCfg(), 4, 256, false)
}

// Every layer recomputed before its backward (what larger batches do).
func BenchmarkTrainStepSmolLM2_135M_4x256_Recompute(b *testing.B) {
	benchTrainStep(b, smolCfg(), 4, 256, true)
}

// benchRLStep measures the gradient step of an RL job for one group of 8
// trajectories that share a 480-token prompt and each add 64 sampled
// tokens (trainable), the step the RL-job figure is made of: the
// trie batch holds the prompt once. With shared false every trajectory gets
// a distinct first token, so nothing is shared (the cost of training each
// sequence in full, for comparison).
func benchRLStep(b *testing.B, shared bool) {
	cfg := smolCfg()
	w := engine.RandomWeights(cfg, 1)
	ad, err := engine.NewAdapter(cfg, engine.DefaultLoRAConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	m, err := newModel(engine.NewModel("bench", cfg, w, nil, nil), ad, engine.DefaultBudgets.Activations)
	if err != nil {
		b.Fatal(err)
	}
	s := &session{ad: ad, m: m, opt: NewAdamW(), params: adapterParams(m)}
	x := uint64(777)
	rnd := func() int {
		x = x*6364136223846793005 + 1442695040888963407
		return int(x>>33) % cfg.VocabSize
	}
	prompt := make([]int, 480)
	for i := range prompt {
		prompt[i] = rnd()
	}
	var seqs []*sequence
	for k := 0; k < 8; k++ {
		sq := &sequence{A: float64(k%2*2 - 1), W: 1.0 / 64}
		sq.Tokens = append(sq.Tokens, prompt...)
		if !shared {
			sq.Tokens[0] = k
		}
		for t := 0; t < 64; t++ {
			sq.Tokens = append(sq.Tokens, rnd())
		}
		sq.Mask = make([]bool, len(sq.Tokens))
		sq.OldLP = make([]float64, len(sq.Tokens))
		for t := 480; t < len(sq.Tokens); t++ {
			sq.Mask[t], sq.OldLP[t] = true, -10
		}
		sq.count()
		seqs = append(seqs, sq)
	}
	sb := buildBatch(seqs)
	rl.Normalize(sb.toks, 0)
	cfgRL, _, err := rl.ResolveConfig(nil, 1e-5)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("kernels: %s, GOMAXPROCS %d, batch rows %d for %d tokens", kernels.Describe(kernels.Default()), runtime.GOMAXPROCS(0), len(sb.b.Tokens), sb.ntoken)
	if _, err := s.runStep(sb, 1e-5, sb.rlLoss(cfgRL)); err != nil { // warm-up
		b.Fatal(err)
	}
	timeSteps(b, s, sb, 1e-5, sb.rlLoss(cfgRL))
}

// The RL step of one group, 8 × (480 prompt + 64 sampled) tokens, SmolLM2
// shape: the prompt shared (as the trainer runs it) and not.
func BenchmarkRLStepSmolLM2_8x544(b *testing.B) {
	b.Run("shared-prefix", func(b *testing.B) { benchRLStep(b, true) })
	b.Run("full", func(b *testing.B) { benchRLStep(b, false) })
}

func BenchmarkTrainStepSmall_H256_L4_4x256(b *testing.B) {
	benchTrainStep(b, smallCfg(), 4, 256, false)
}
