package rl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"flywheel/internal/engine/tiny"
	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// The one learning-rate rule: 5e-6 on real models, the tiny model's own
// defaults on flywheel/tiny.
func TestDefaultLearningRate(t *testing.T) {
	for _, c := range []struct {
		kind store.JobKind
		base string
		want float64
	}{
		{store.KindRL, "Qwen/Qwen2.5-0.5B-Instruct", 5e-6}, {store.KindSFT, "Qwen/Qwen2.5-0.5B-Instruct", 5e-6},
		{store.KindRL, tiny.ID, 3e-3}, {store.KindSFT, tiny.ID, 8e-3},
	} {
		if got := DefaultLearningRate(c.kind, c.base); got != c.want {
			t.Errorf("%s on %s: %g, want %g", c.kind, c.base, got, c.want)
		}
	}
}

// What ResolveJob records is what RecordedJob reads back for the trainer:
// the same config, the default learning rate included, for both kinds,
// and no default applied on the way back.
func TestRecordedJobIsResolvedJob(t *testing.T) {
	for _, c := range []struct {
		kind     store.JobKind
		exp, cfg string
		lr       float64
	}{
		{store.KindRL, ``, ``, 3e-3},
		{store.KindRL, `{"ppo": true, "kimi_k2_tau": 0.5, "loss_fn": "ppo", "extra": [1]}`, ``, 3e-3},
		{store.KindRL, `{"learning_rate": 0.01, "max_negative_advantage_importance_sampling_weight": 2}`, ``, 0.01},
		{store.KindSFT, ``, ``, 8e-3},
		{store.KindSFT, `{"seed": 7, "x": 1}`, `{"batch_size": 3, "learning_rate": [1e-3, 2e-3], "assistant_turns": "last", "epochs": 2}`, 1e-3},
	} {
		jc, err := ResolveJob(c.kind, tiny.ID, "job-1", []byte(c.exp), []byte(c.cfg))
		if err != nil {
			t.Fatalf("%s %s %s: %v", c.kind, c.exp, c.cfg, err)
		}
		got, err := RecordedJob(c.kind, jc.ExperimentalConfig, jc.Config)
		if err != nil {
			t.Fatalf("%s: recorded %s %s: %v", c.kind, jc.ExperimentalConfig, jc.Config, err)
		}
		if !reflect.DeepEqual(got, jc) {
			t.Errorf("%s: recorded\n%+v\nresolved\n%+v", c.kind, got, jc)
		}
		var rec map[string]any
		src := jc.ExperimentalConfig
		if c.kind == store.KindSFT {
			src = jc.Config
		}
		if err := json.Unmarshal(src, &rec); err != nil {
			t.Fatal(err)
		}
		lr := rec["learning_rate"]
		if l, ok := lr.([]any); ok {
			lr = l[0]
		}
		if lr != c.lr {
			t.Errorf("%s: the record's learning_rate is %v, want %g", c.kind, rec["learning_rate"], c.lr)
		}
	}
	jc, _ := ResolveJob(store.KindSFT, tiny.ID, "job-1", nil, nil)
	if jc.SFT.Seed != DefaultSFTSeed("job-1") || !slices.Equal(jc.SFT.LearningRates, []float64{8e-3}) || jc.SFT.Epochs != 1 {
		t.Errorf("sft defaults: %+v", jc.SFT)
	}
	if _, err := ResolveJob("dpo", tiny.ID, "j", nil, nil); err == nil {
		t.Error("an unknown kind resolved")
	}
}

// A record an older version wrote (an SFT config with learning_rate null,
// an experimental_config without its defaults) is ErrUnresolved, naming
// the field; a record with a bad value is another error.
func TestRecordedJobUnresolved(t *testing.T) {
	for _, c := range []struct {
		kind     store.JobKind
		exp, cfg string
		field    string
	}{
		{store.KindSFT, `{"seed": 1}`, `{"assistant_turns":"all","batch_size":"auto","epochs":1,"learning_rate":null}`, "config.learning_rate"},
		{store.KindSFT, `{}`, `{"assistant_turns":"all","batch_size":"auto","epochs":1,"learning_rate":0.1}`, "experimental_config.seed"},
		{store.KindSFT, `{"seed": 1}`, `{}`, "config.batch_size"},
		{store.KindRL, `{}`, ``, "experimental_config.ppo"},
		{store.KindRL, `{"ppo":false,"epsilon":1,"epsilon_high":4,"importance_sampling_level":"token","mask_prob_ratio":false,"advantage_balance":0,"scale_rewards":true,"precalculate_logprobs":false}`, ``, "experimental_config.learning_rate"},
	} {
		_, err := RecordedJob(c.kind, json.RawMessage(c.exp), json.RawMessage(c.cfg))
		if !errors.Is(err, ErrUnresolved) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %s %s: %v, want ErrUnresolved naming %s", c.kind, c.exp, c.cfg, err, c.field)
		}
	}
	_, err := RecordedJob(store.KindSFT, json.RawMessage(`{"seed": 1}`), json.RawMessage(`{"assistant_turns":"all","batch_size":"auto","epochs":1,"learning_rate":-1}`))
	if err == nil || errors.Is(err, ErrUnresolved) {
		t.Errorf("a bad recorded rate: %v", err)
	}
}

// SentConfig reads the configs of a stored request body as sent.
func TestSentConfig(t *testing.T) {
	exp, cfg, err := SentConfig(store.KindRL, []byte(`{"model_id": "m", "trajectory_groups": [], "experimental_config": {"ppo": true}}`))
	if err != nil || string(exp) != `{"ppo": true}` || cfg != nil {
		t.Errorf("rl: %s %s %v", exp, cfg, err)
	}
	exp, cfg, err = SentConfig(store.KindSFT, []byte(`{"model_id": "m", "training_data_url": "file-1", "config": {"epochs": 2}, "experimental_config": null}`))
	if err != nil || exp != nil || string(cfg) != `{"epochs": 2}` {
		t.Errorf("sft: %s %s %v", exp, cfg, err)
	}
}

// The SFT request's shape: each error a 400 naming the field.
func TestParseSFTRequest(t *testing.T) {
	req, err := ParseSFTRequest([]byte(` {"model_id": "m", "training_data_url": "file://file-1", "config": {"epochs": 2}, "extra": 1}`))
	if err != nil || req.ModelID != "m" || req.TrainingDataURL != "file://file-1" || string(req.Config) != `{"epochs": 2}` || req.ExperimentalConfig != nil {
		t.Fatalf("%+v %v", req, err)
	}
	for _, b := range []struct{ raw, path, code, msg string }{
		{``, "", "invalid_json", "request body is empty; expected a JSON object"},
		{`{"model_id": `, "", "invalid_json", ""},
		{`[]`, "", "invalid_type", "request body must be a JSON object, got an array"},
		{`{"training_data_url": "file-1"}`, "model_id", "missing_field", "model_id is required"},
		{`{"model_id": 3, "training_data_url": "file-1"}`, "model_id", "invalid_type", "model_id: expected a string, got a number"},
		{`{"model_id": "m"}`, "training_data_url", "missing_field", "training_data_url is required"},
		{`{"model_id": "m", "training_data_url": ""}`, "training_data_url", "invalid_value", ""},
		{`{"model_id": "m", "training_data_url": "f", "config": []}`, "config", "invalid_type", "config: expected an object, got an array"},
		{`{"model_id": "m", "training_data_url": "f", "experimental_config": 3}`, "experimental_config", "invalid_type", ""},
	} {
		_, err := ParseSFTRequest([]byte(b.raw))
		wantInvalid(t, b.raw, err, b.path, b.code, b.msg)
	}
}

// The one reader of training files: line numbers counted over blank lines,
// the first bad line named, one limit on a line's length, and a file of
// blank lines refused.
func TestReadSFTFile(t *testing.T) {
	const good = `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}`
	var lines []int
	err := ReadSFTFile(strings.NewReader(good+"\n\n  \n"+good), func(line int, ex SFTExample) error {
		lines = append(lines, line)
		if len(ex.Messages) != 2 {
			t.Errorf("line %d: %d messages", line, len(ex.Messages))
		}
		return nil
	})
	if err != nil || !slices.Equal(lines, []int{1, 4}) {
		t.Fatalf("lines %v: %v", lines, err)
	}
	long := io.MultiReader(strings.NewReader(good+"\n"+`{"messages": "`),
		io.LimitReader(xs{}, MaxSFTLineBytes), strings.NewReader(`"}`))
	for _, c := range []struct {
		data io.Reader
		msg  string
	}{
		{strings.NewReader(good + "\n" + `{"messages": "x"}`), "line 2: messages: expected an array, got a string"},
		{strings.NewReader("\n \n"), "the file has no examples"},
		{long, fmt.Sprintf("line 2 is longer than %d bytes", MaxSFTLineBytes)},
	} {
		err := ReadSFTFile(c.data, func(int, SFTExample) error { return nil })
		he := httpx.AsError(err)
		if err == nil || he.Code != "invalid_file" || he.Message != c.msg {
			t.Errorf("%v, want %q", err, c.msg)
		}
	}
	stop := errors.New("stop")
	if err := ReadSFTFile(strings.NewReader(good), func(int, SFTExample) error { return stop }); err != stop {
		t.Errorf("fn's error: %v", err)
	}
}

// reward_std_dev has one definition: the mean population std over the
// groups with more than one trajectory; the mean reward is over every
// trajectory.
func TestRewardStats(t *testing.T) {
	var s RewardStats
	if s.Mean() != 0 || s.StdDev() != 0 || s.Trajectories() != 0 {
		t.Fatal("empty stats are not zero")
	}
	s.AddGroup([]float64{1, 0, 0, 1}) // std 0.5
	s.AddGroup([]float64{0.7})        // one trajectory: no spread
	s.AddGroup(nil)
	s.AddGroup([]float64{1, 1}) // std 0
	if s.Trajectories() != 7 || math.Abs(s.Mean()-4.7/7) > 1e-12 || math.Abs(s.StdDev()-0.25) > 1e-12 {
		t.Errorf("n %d, mean %g, std %g; want 7, %g, 0.25", s.Trajectories(), s.Mean(), s.StdDev(), 4.7/7)
	}
}

// xs is an endless stream of 'x'.
type xs struct{}

func (xs) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}
