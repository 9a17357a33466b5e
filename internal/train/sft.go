package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"

	"flywheel/internal/jobs"
	"flywheel/internal/rl"
)

// sftLine is one example of the training file and its line number.
type sftLine struct {
	rl.SFTExample
	Line int
}

// readSFTFile reads the JSONL examples with rl.ReadSFTFile, the reader the
// upload's check used.
func readSFTFile(path string) ([]sftLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	defer f.Close()
	var out []sftLine
	err = rl.ReadSFTFile(f, func(line int, ex rl.SFTExample) error {
		out = append(out, sftLine{ex, line})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	return out, nil
}

// tokenizeSFT renders one example; the contents of the assistant turns
// (all, or only the last) and the end-of-turn token after each are
// trainable.
func tokenizeSFT(c codec, ex rl.SFTExample, lastOnly bool, maxLen int) (*sequence, error) {
	type msg struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	var trainable []int
	contents := map[int]string{}
	for i, raw := range ex.Messages {
		var m msg
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		var s string
		if m.Role == "assistant" && json.Unmarshal(m.Content, &s) == nil {
			trainable = append(trainable, i)
			contents[i] = s
		}
	}
	if lastOnly && len(trainable) > 0 {
		trainable = trainable[len(trainable)-1:]
	}
	msgs := append([]json.RawMessage(nil), ex.Messages...)
	spl := make([]splice, len(trainable))
	for k, i := range trainable {
		rm, err := replaceContent(msgs[i], fmt.Sprintf(sentinelFmt, k))
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs[i] = rm
		spl[k] = splice{Msg: i, IDs: c.Encode(contents[i]), Mask: true, MaskEnd: true}
	}
	seq, err := spliceRender(c, msgs, wrapTools(ex.Tools), nil, spl, false)
	if err != nil {
		return nil, err
	}
	seq.truncate(maxLen)
	return seq, nil
}

// replaceContent returns the JSON object raw with its "content" set to s,
// keeping the order of the other keys.
func replaceContent(raw json.RawMessage, s string) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("a message must be a JSON object")
	}
	cj, _ := json.Marshal(s)
	var buf bytes.Buffer
	buf.WriteByte('{')
	first, found := true, false
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		if k == "content" {
			v, found = cj, true
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kj, _ := json.Marshal(k)
		buf.Write(kj)
		buf.WriteByte(':')
		buf.Write(v)
	}
	if !found {
		if !first {
			buf.WriteByte(',')
		}
		buf.WriteString(`"content":`)
		buf.Write(cj)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// ceLoss is the SFT loss: the mean negative logprob of the trainable
// tokens, and its gradient.
func ceLoss(newLP []float64) (rl.Stats, []float64) {
	n := len(newLP)
	g := make([]float64, n)
	st := rl.Stats{N: n}
	for i, lp := range newLP {
		st.Loss -= lp / float64(n)
		g[i] = -1 / float64(n)
	}
	return st, g
}

// SFT data order and batch size.
//
// The examples are visited in a fresh permutation each epoch, drawn from the
// job's seed (rl.SFTConfig.Seed: experimental_config.seed, default derived
// from the job id), so a job replays exactly; consecutive
// examples of the permutation form the gradient steps, which never span two
// epochs.
//
// batch_size "auto" takes autoBatchDiv-th of the file per step, between 1
// and autoBatchMax examples (16 examples: 2 per step, 8 steps per epoch;
// 256 and more: 32 per step), and closes a step early when the next example
// would take it past the token budget (Options.TokensPerStep), so a step of
// long examples stays within the memory the budget allows; an example
// longer than the budget gets a step of its own. An integer batch_size is
// taken as it is.
const (
	autoBatchDiv = 8
	autoBatchMax = 32
)

// autoBatchSize is the examples per step of batch_size "auto" for a file of
// n trainable examples (before the token budget).
func autoBatchSize(n int) int {
	return max(1, min(autoBatchMax, (n+autoBatchDiv-1)/autoBatchDiv))
}

// sftOrder is the order of one epoch: a Fisher-Yates permutation of n
// examples driven by rng (PCG, whose sequence is fixed by its definition,
// so the order does not depend on the Go release).
func sftOrder(rng *rand.PCG, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := int(rng.Uint64() % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// sftPlan lays out an SFT job's gradient steps: epochs passes over seqs,
// each in the order sftOrder draws from seed, cut into steps of batch
// examples (auto: within budget tokens too). Steps are made one epoch at a
// time, so many epochs over a large file cost no memory.
type sftPlan struct {
	seqs          []*sequence
	epochs, batch int
	auto          bool
	budget        int
	seed          uint64
}

// newSFTPlan plans epochs passes over seqs with batchSize examples per step
// (0: "auto", see autoBatchSize) and the token budget of "auto".
func newSFTPlan(seqs []*sequence, epochs, batchSize, budget int, seed uint64) sftPlan {
	p := sftPlan{seqs: seqs, epochs: epochs, batch: batchSize, budget: budget, seed: seed}
	if p.auto = batchSize == 0; p.auto {
		p.batch = autoBatchSize(len(seqs))
	}
	return p
}

// each calls step for every gradient step in order, with its epoch (from
// 1), and stops at the first error.
func (p sftPlan) each(step func(epoch int, seqs []*sequence) error) error {
	rng := rand.NewPCG(p.seed, sftStream)
	for ep := 1; ep <= p.epochs; ep++ {
		var cur []*sequence
		used := 0
		for _, i := range sftOrder(rng, len(p.seqs)) {
			s := p.seqs[i]
			if len(cur) == p.batch || p.auto && len(cur) > 0 && used+len(s.Tokens) > p.budget {
				if err := step(ep, cur); err != nil {
					return err
				}
				cur, used = nil, 0
			}
			cur = append(cur, s)
			used += len(s.Tokens)
		}
		if len(cur) > 0 {
			if err := step(ep, cur); err != nil {
				return err
			}
		}
	}
	return nil
}

// numSteps is the number of gradient steps (startedEvent's count).
func (p sftPlan) numSteps() int {
	n := 0
	p.each(func(int, []*sequence) error { n++; return nil })
	return n
}

// sftStream is the PCG stream of SFT data orders.
const sftStream = 0x5f7_0bde7

func (e *Executor) trainSFT(ctx context.Context, job jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	cfg := job.Config.SFT // as the job record shows it
	lrs, seed := cfg.LearningRates, cfg.Seed
	if len(lrs) == 0 {
		return jobs.Result{}, fmt.Errorf("the job's config has no learning rate")
	}
	if job.DataFile == "" {
		return jobs.Result{}, fmt.Errorf("no training data file")
	}
	exs, err := readSFTFile(job.DataFile)
	if err != nil {
		return jobs.Result{}, err
	}
	s, err := e.open(job)
	if err != nil {
		return jobs.Result{}, err
	}
	c := &modelCodec{m: s.base, ctx: ctx}
	var seqs []*sequence
	truncated, skipped := 0, 0
	for _, ex := range exs {
		sq, err := tokenizeSFT(c, ex.SFTExample, cfg.LastTurnOnly, s.maxLen)
		if err != nil {
			return jobs.Result{}, fmt.Errorf("training data line %d: %w", ex.Line, err)
		}
		if len(sq.Tokens) == s.maxLen {
			truncated++
		}
		if sq.NTrain == 0 {
			skipped++
			continue
		}
		sq.A, sq.W = 1, 1
		seqs = append(seqs, sq)
	}
	if len(seqs) == 0 {
		return jobs.Result{}, fmt.Errorf("training data has no assistant message to train on")
	}
	if err := checkTokens(seqs, s.base.Config.VocabSize); err != nil {
		return jobs.Result{}, err
	}
	plan := newSFTPlan(seqs, cfg.Epochs, cfg.BatchSize, e.opts.TokensPerStep, seed)
	nsteps := plan.numSteps()
	if err := emit(startedEvent(nsteps, map[string]any{"seed": seed, "epochs": cfg.Epochs, "batch_size": plan.batch})); err != nil {
		return jobs.Result{}, err
	}
	var lossSum float64
	i := 0
	err = plan.each(func(epoch int, step []*sequence) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		lr := lrs[min(i, len(lrs)-1)]
		if len(lrs) == 1 {
			// One rate (the default or a number) decays linearly to a tenth
			// over the job's steps: on the memorisation test it took the
			// exact reply from 396 to 799 of 800 runs (docs/sft.md). A list
			// gives every step's rate as it is.
			lr *= 1 - 0.9*float64(i)/float64(nsteps)
		}
		r, err := s.runStep(buildBatch(step), lr, ceLoss)
		if err != nil {
			return withStep(err, i+1)
		}
		lossSum += r.Loss
		e.opts.Logger.Info("train: sft step", "job", job.ID, "step", i+1, "of", nsteps, "epoch", epoch,
			"loss", r.Loss, "grad_norm", r.GradNorm)
		ev := stepEvent(i, r, lr, s.opt)
		ev.Data["epoch"] = epoch
		i++
		return emit(ev)
	})
	if err != nil {
		return jobs.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return jobs.Result{}, err
	}
	if err := s.save(job.OutDir, job.BaseModel); err != nil {
		return jobs.Result{}, err
	}
	met := map[string]any{
		"loss": finite(lossSum / float64(nsteps)), "num_examples": len(exs), "num_skipped_examples": skipped,
		"num_truncated": truncated, "num_gradient_steps": nsteps, "epochs": cfg.Epochs, "batch_size": plan.batch,
		"seed": seed,
	}
	if len(lrs) == 1 {
		met["learning_rate"] = lrs[0]
	}
	return jobs.Result{Metrics: met}, nil
}
