package train

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/jobs"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

var (
	tinyOnce, bf16Once sync.Once
	tinyDir, bf16Dir   string
	tinyErr, bf16Err   error
)

// tinyRegistry returns a registry over a models dir holding flywheel/tiny
// (written once per test binary).
func tinyRegistry(t testing.TB) *engine.Registry {
	tinyOnce.Do(func() {
		tinyDir, tinyErr = os.MkdirTemp("", "flywheel-train-models-*")
		if tinyErr == nil {
			tinyErr = tiny.Ensure(tinyDir)
		}
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return engine.NewRegistry(tinyDir)
}

// bf16Registry returns a registry over a models dir holding flywheel/tiny
// written in BF16 (the same weights rounded), which the engine keeps in
// BF16: training runs through a frozen BF16 base.
func bf16Registry(t testing.TB) *engine.Registry {
	bf16Once.Do(func() {
		bf16Dir, bf16Err = os.MkdirTemp("", "flywheel-train-bf16-*")
		if bf16Err == nil {
			spec := tiny.DefaultSpec()
			spec.DType = "BF16"
			bf16Err = tiny.Write(filepath.Join(bf16Dir, filepath.FromSlash(tiny.ID)), spec)
		}
	})
	if bf16Err != nil {
		t.Fatal(bf16Err)
	}
	return engine.NewRegistry(bf16Dir)
}

// bases are the two ways the learning tests run flywheel/tiny: as shipped
// (F32) and stored in BF16.
var bases = []struct {
	name string
	reg  func(testing.TB) *engine.Registry
}{{"f32", tinyRegistry}, {"bf16", bf16Registry}}

// env is a model's checkpoint folders on disk, as the queue keeps them.
type env struct {
	t     testing.TB
	reg   *engine.Registry
	base  *engine.Model
	root  string
	step  int
	ex    *Executor
	calls int
	// baseID is the base model's registry id ("" means flywheel/tiny).
	baseID string
	// rlLR, when set, is every RL job's experimental_config.learning_rate.
	rlLR float64
}

// resolved is the config of a job of kind with request body body on
// baseModel as the HTTP layer resolves it at submission and the job record
// stores it (the trainer runs the record, not the body).
func resolved(t testing.TB, kind store.JobKind, baseModel, jobID string, body []byte) rl.JobConfig {
	t.Helper()
	exp, cfg, err := rl.SentConfig(kind, body)
	if err != nil {
		t.Fatal(err)
	}
	jc, err := rl.ResolveJob(kind, baseModel, jobID, exp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return jc
}

// newEnv sets up flywheel/tiny, as the server ships it, with a step-0
// checkpoint.
func newEnv(t testing.TB, opts Options) *env { return newEnvOn(t, tinyRegistry(t), opts) }

// newEnvOn is newEnv over flywheel/tiny in reg.
func newEnvOn(t testing.TB, reg *engine.Registry, opts Options) *env {
	base, err := reg.Get(tiny.ID)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, reg: reg, base: base, root: t.TempDir(), ex: New(reg, opts)}
	ad, err := engine.NewAdapter(base.Config, engine.DefaultLoRAConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.Save(e.dir(0), tiny.ID); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) dir(step int) string { return filepath.Join(e.root, fmt.Sprintf("step%d", step)) }

func (e *env) adapter() *engine.Adapter {
	ad, err := engine.LoadAdapter(e.dir(e.step), e.base.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	return ad
}

// run executes one job like the queue does: OutDir is a fresh folder that
// becomes the next step on success.
func (e *env) run(kind store.JobKind, req any, dataFile string) (jobs.Result, []jobs.Event, error) {
	body, err := json.Marshal(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.rlLR > 0 && kind == store.KindRL {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			e.t.Fatal(err)
		}
		exp, _ := m["experimental_config"].(map[string]any)
		if exp == nil {
			exp = map[string]any{}
		}
		exp["learning_rate"] = e.rlLR
		m["experimental_config"] = exp
		body, _ = json.Marshal(m)
	}
	e.calls++
	out := filepath.Join(e.root, fmt.Sprintf("work%d", e.calls))
	if err := os.MkdirAll(out, 0o755); err != nil {
		e.t.Fatal(err)
	}
	baseID := e.baseID
	if baseID == "" {
		baseID = tiny.ID
	}
	id := fmt.Sprintf("job%d", e.calls)
	job := jobs.Job{ID: id, Kind: kind, ModelID: "m", BaseModel: baseID, Config: resolved(e.t, kind, baseID, id, body),
		FromStep: e.step, FromDir: e.dir(e.step), OutDir: out, Request: body, DataFile: dataFile}
	var evs []jobs.Event
	res, err := e.ex.Train(e.t.Context(), job, func(ev jobs.Event) error { evs = append(evs, ev); return nil })
	if err != nil {
		return res, evs, err
	}
	os.RemoveAll(e.dir(e.step + 1))
	if err := os.Rename(out, e.dir(e.step+1)); err != nil {
		e.t.Fatal(err)
	}
	e.step++
	return res, evs, nil
}

// sample draws n completions of prompt with the adapter at temperature 1,
// batched, and returns them as chat-completion choices (logprobs with
// token_id:N tokens) plus their texts.
func sample(t testing.TB, m *engine.Model, ad *engine.Adapter, prompt []int, n, maxTokens int, rng *rand.Rand) ([]map[string]any, []string) {
	seqs := make([]*engine.Seq, n)
	toks := make([][]int, n)
	samplers := make([]*engine.Sampler, n)
	for i := range seqs {
		seqs[i] = m.NewSeq(ad)
		defer seqs[i].Release()
		toks[i] = prompt
		seed := rng.Uint64()
		samplers[i] = engine.NewSampler(engine.SamplingParams{Temperature: 1, Seed: &seed})
	}
	ids := make([][]int, n)
	lps := make([][]float32, n)
	done := make([]bool, n)
	eos := map[int]bool{}
	for _, id := range m.EOS() {
		eos[id] = true
	}
	for step := 0; step < maxTokens; step++ {
		var as []*engine.Seq
		var ts [][]int
		var idx []int
		for i := range seqs {
			if !done[i] {
				as, ts, idx = append(as, seqs[i]), append(ts, toks[i]), append(idx, i)
			}
		}
		if len(as) == 0 {
			break
		}
		logits, err := m.Forward(as, ts)
		if err != nil {
			t.Fatal(err)
		}
		for k, i := range idx {
			id, lp, _ := samplers[i].Sample(logits[k])
			ids[i] = append(ids[i], id)
			lps[i] = append(lps[i], lp)
			toks[i] = []int{id}
			if eos[id] {
				done[i] = true
			}
		}
	}
	choices := make([]map[string]any, n)
	texts := make([]string, n)
	for i := range choices {
		var content []map[string]any
		for k, id := range ids[i] {
			content = append(content, map[string]any{"token": fmt.Sprintf("token_id:%d", id), "logprob": lps[i][k]})
		}
		texts[i] = m.Tokenizer.Decode(ids[i], true)
		fr := "length"
		if eos[ids[i][len(ids[i])-1]] {
			fr = "stop"
		}
		choices[i] = map[string]any{"index": 0, "finish_reason": fr,
			"message":  map[string]any{"role": "assistant", "content": texts[i]},
			"logprobs": map[string]any{"content": content}}
	}
	return choices, texts
}
