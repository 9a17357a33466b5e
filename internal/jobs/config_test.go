package jobs_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"flywheel/internal/jobs"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

// cfgTrainer records the config of each job it runs, then completes it.
type cfgTrainer struct {
	mu  sync.Mutex
	ran map[string]rl.JobConfig
}

func (t *cfgTrainer) Train(_ context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	t.mu.Lock()
	t.ran[j.ID] = j.Config
	t.mu.Unlock()
	if err := emit(jobs.Event{Type: store.EventTrainingStarted, Data: map[string]any{"num_sequences": 0}}); err != nil {
		return jobs.Result{}, err
	}
	return jobs.Result{}, os.WriteFile(filepath.Join(j.OutDir, "adapter_model.safetensors"), []byte("weights"), 0o644)
}

// The trainer runs the config the job record holds, never the request's:
// a record resolved at submission is run as it is (the request's own
// experimental_config says otherwise here), and a record an older version
// wrote without its resolved config (an SFT learning_rate of null, an
// empty RL experimental_config) gets it resolved at claim, recorded, then
// run — in both cases the record afterwards equals what the trainer ran.
func TestTrainerRunsTheRecordedConfig(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		m := f.model(t, "m")
		data := filepath.Join(f.dataDir, "train.jsonl")
		os.WriteFile(data, []byte(`{"messages": [{"role": "assistant", "content": "a"}]}`+"\n"), 0o644)
		u, err := f.st.EnsureUser(ctx, "u")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.st.CreateFile(ctx, store.File{ID: "file-1", UserID: u.ID, Filename: "train.jsonl", Purpose: "fine-tune", Bytes: 1, Path: data}); err != nil {
			t.Fatal(err)
		}
		tr := &cfgTrainer{ran: map[string]rl.JobConfig{}}
		q := f.queue(tr, 1)
		if err := q.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer q.Shutdown(ctx)

		resolved, err := rl.ResolveJob(store.KindRL, "b", "", []byte(`{"learning_rate": 0.25}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := submitBody(ctx, q, store.Job{ModelID: m, Kind: store.KindRL, ExperimentalConfig: resolved.ExperimentalConfig},
			[]byte(`{"model_id": "`+m+`", "experimental_config": {"learning_rate": 0.5}}`))
		if err != nil {
			t.Fatal(err)
		}
		oldRL, err := submitBody(ctx, q, store.Job{ModelID: m, Kind: store.KindRL, ExperimentalConfig: json.RawMessage(`{}`)},
			[]byte(`{"model_id": "`+m+`", "experimental_config": {"ppo": true}}`))
		if err != nil {
			t.Fatal(err)
		}
		oldSFT, err := submitBody(ctx, q, store.Job{ModelID: m, Kind: store.KindSFT, FileID: "file-1",
			Config:             json.RawMessage(`{"assistant_turns":"last","batch_size":"auto","epochs":2,"learning_rate":null}`),
			ExperimentalConfig: json.RawMessage(`{"seed":5}`)},
			[]byte(`{"model_id": "`+m+`", "training_data_url": "file-1", "config": {"epochs": 2, "assistant_turns": "last"}, "experimental_config": {"seed": 5}}`))
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{cur.ID, oldRL.ID, oldSFT.ID}
		waitAll(t, f.st, ids, store.StatusCompleted)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, id := range ids {
			rec, err := f.st.JobByID(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			fromRecord, err := rl.RecordedJob(rec.Kind, rec.ExperimentalConfig, rec.Config)
			if err != nil {
				t.Fatalf("job %s: its record after the run: %v", id, err)
			}
			ran := tr.ran[id]
			sameConfig := rec.Kind == store.KindRL || equalJSON(t, ran.Config, rec.Config) // an RL job's record has no config
			if !sameConfig || !equalJSON(t, ran.ExperimentalConfig, rec.ExperimentalConfig) || ran.RL != fromRecord.RL || ran.SFT.Seed != fromRecord.SFT.Seed {
				t.Errorf("job %s: the trainer ran %s %s %+v, the record shows %s %s", id, ran.ExperimentalConfig, ran.Config, ran, rec.ExperimentalConfig, rec.Config)
			}
		}
		if lr := tr.ran[cur.ID].RL.LearningRate; lr != 0.25 {
			t.Errorf("a resolved record ran at learning rate %g, want the record's 0.25", lr)
		}
		if c := tr.ran[oldRL.ID].RL; !c.PPO || c.LearningRate != 5e-6 || c.Epsilon != 0.2 {
			t.Errorf("an older RL record ran %+v, want ppo, epsilon 0.2 and the default rate 5e-6", c)
		}
		if c := tr.ran[oldSFT.ID].SFT; c.LearningRates[0] != 5e-6 || c.Epochs != 2 || !c.LastTurnOnly || c.Seed != 5 {
			t.Errorf("an older SFT record ran %+v, want the default rate 5e-6, 2 epochs, the last turn, seed 5", c)
		}
	})
}

// equalJSON reports whether a and b are the same JSON value.
func equalJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// submitBody queues j with body as its stored request, as the API does.
func submitBody(ctx context.Context, q *jobs.Queue, j store.Job, body []byte) (store.Job, error) {
	p, err := q.Prepare()
	if err != nil {
		return j, err
	}
	p.Write(body)
	return p.Submit(ctx, j)
}
