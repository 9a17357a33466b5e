package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"flywheel/internal/jobs"
	"flywheel/internal/rl"
)

// SFTRequest is the body of POST /v1/preview/sft-training-jobs as the
// trainer reads it; config is read by rl.ParseSFTConfig.
type SFTRequest struct {
	ModelID         string          `json:"model_id"`
	TrainingDataURL string          `json:"training_data_url"`
	Config          json.RawMessage `json:"config"`
}

// SFTExample is one JSONL line of the training file.
type SFTExample struct {
	Messages []json.RawMessage `json:"messages"`
	Tools    []json.RawMessage `json:"tools"`
}

// readSFTFile reads JSONL examples.
func readSFTFile(path string) ([]SFTExample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	defer f.Close()
	var out []SFTExample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	line := 0
	for sc.Scan() {
		line++
		t := bytes.TrimSpace(sc.Bytes())
		if len(t) == 0 {
			continue
		}
		var ex SFTExample
		if err := json.Unmarshal(t, &ex); err != nil {
			return nil, fmt.Errorf("training data line %d: %w", line, err)
		}
		if len(ex.Messages) == 0 {
			return nil, fmt.Errorf("training data line %d: no messages", line)
		}
		out = append(out, ex)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("training data: the file has no examples")
	}
	return out, nil
}

// tokenizeSFT renders one example; the contents of the assistant turns
// (all, or only the last) and the end-of-turn token after each are
// trainable.
func tokenizeSFT(c codec, ex SFTExample, lastOnly bool, maxLen int) (*sequence, error) {
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
	seq, err := spliceRender(c, msgs, wrapTools(ex.Tools), spl, false)
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

func (e *Executor) trainSFT(ctx context.Context, job jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	var req SFTRequest
	if err := json.Unmarshal(job.Request, &req); err != nil {
		return jobs.Result{}, fmt.Errorf("invalid training request: %w", err)
	}
	cfg, _, err := rl.ParseSFTConfig(req.Config)
	if err != nil {
		return jobs.Result{}, err
	}
	bs, lrs := cfg.BatchSize, cfg.LearningRates
	if lrs == nil {
		lrs = []float64{e.DefaultLR(job.BaseModel)}
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
	c := &modelCodec{m: s.base}
	var seqs []*sequence
	truncated, skipped := 0, 0
	for i, ex := range exs {
		sq, err := tokenizeSFT(c, ex, cfg.LastTurnOnly, s.maxLen)
		if err != nil {
			return jobs.Result{}, fmt.Errorf("training data example %d: %w", i+1, err)
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
	var bins [][]*sequence
	if bs == 0 {
		bins = packSequences(seqs, e.opts.TokensPerStep)
	} else {
		for i := 0; i < len(seqs); i += bs {
			bins = append(bins, seqs[i:min(i+bs, len(seqs))])
		}
	}
	if err := emit(jobs.Event{Type: "training_started", Data: map[string]any{"num_sequences": len(bins)}}); err != nil {
		return jobs.Result{}, err
	}
	var lossSum float64
	for i, bin := range bins {
		if err := ctx.Err(); err != nil {
			return jobs.Result{}, err
		}
		lr := lrs[min(i, len(lrs)-1)]
		r, err := s.runStep(buildBatch(bin), lr, ceLoss)
		if err != nil {
			return jobs.Result{}, withStep(err, i+1)
		}
		lossSum += r.Loss
		e.opts.Logger.Info("train: sft step", "job", job.ID, "step", i+1, "of", len(bins), "loss", r.Loss, "grad_norm", r.GradNorm)
		if err := emit(stepEvent(i, r, lr, s.opt)); err != nil {
			return jobs.Result{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return jobs.Result{}, err
	}
	if err := s.save(job.OutDir, job.BaseModel); err != nil {
		return jobs.Result{}, err
	}
	return jobs.Result{Metrics: map[string]any{
		"loss": finite(lossSum / float64(len(bins))), "num_examples": len(exs), "num_skipped_examples": skipped,
		"num_truncated": truncated, "num_gradient_steps": len(bins),
	}}, nil
}
