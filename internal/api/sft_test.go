package api_test

import (
	"fmt"
	"strings"
	"testing"

	"flywheel/internal/rl"
)

// The SFT job record: config.epochs and experimental_config.seed filled in
// (the seed derived from the job id when not given); a bad seed or epochs
// is a 400 naming it.
func TestSFTJobSeedAndEpochs(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	id := e.createModel("m")
	const good = `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}` + "\n"
	file := e.must(upload(t, e, e.alice, "t.jsonl", good), 200).body["id"].(string)
	r := e.must(e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": id, "training_data_url": file,
		"config": map[string]any{"epochs": 3}, "experimental_config": map[string]any{"x": "kept"}}), 200)
	jobID := r.body["id"].(string)
	job := e.must(e.do("GET", "/v1/preview/training-jobs/"+jobID, e.alice, nil), 200).body
	exp := job["experimental_config"].(map[string]any)
	if exp["seed"] != float64(rl.DefaultSFTSeed(jobID)) || exp["x"] != "kept" || job["config"].(map[string]any)["epochs"] != 3.0 {
		t.Errorf("record: experimental_config %v, config %v", exp, job["config"])
	}
	r = e.must(e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": id, "training_data_url": file,
		"experimental_config": map[string]any{"seed": 12345678901}}), 200)
	job = e.must(e.do("GET", "/v1/preview/training-jobs/"+r.body["id"].(string), e.alice, nil), 200).body
	if got := job["experimental_config"].(map[string]any)["seed"]; got != 12345678901.0 {
		t.Errorf("seed given: %v", got)
	}
	for _, c := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"experimental_config": map[string]any{"seed": -1}}, "experimental_config.seed"},
		{map[string]any{"experimental_config": map[string]any{"seed": "1"}}, "experimental_config.seed"},
		{map[string]any{"config": map[string]any{"epochs": 0}}, "config.epochs"},
	} {
		c.body["model_id"], c.body["training_data_url"] = id, file
		if r := e.do("POST", "/v1/preview/sft-training-jobs", e.alice, c.body); r.status != 400 || r.errParam() != c.param {
			t.Errorf("%v: %d %s", c.body, r.status, r.raw)
		}
	}
}

// Every line of a fine-tune file is checked at upload; a bad one is a 400
// naming the line and the field. A file uploaded for another purpose is
// checked when an SFT job is created on it.
func TestSFTFileLines(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	id := e.createModel("m")
	const good = `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}`
	for _, c := range []struct{ line, msg string }{
		{`{"messages": "nope"}`, "line 3: messages: expected an array, got a string"},
		{`{"messages": [{"content": "x"}, {"role": "assistant", "content": "a"}]}`, "line 3: messages[0].role is required"},
		{`{"messages": [{"role": "user", "content": "x"}]}`, `line 3: messages: no message has role "assistant"`},
		{`{"messages": [{"role": "assistant", "content": {}}]}`, "line 3: messages[0].content: expected a string, null or an array"},
		{`{"messages": [{"role": "assistant", "content": "a"}], "tools": [1]}`, "line 3: tools[0]: expected an object, got a number"},
		{`{"messages": [`, "line 3: "},
	} {
		data := good + "\n\n" + c.line + "\n" + good + "\n"
		r := upload(t, e, e.alice, "bad.jsonl", data)
		if r.status != 400 || r.errParam() != "file" || !strings.Contains(fmt.Sprint(r.errField("message")), c.msg) {
			t.Errorf("%s: %d %s", c.line, r.status, r.raw)
		}
		file := e.must(uploadAs(t, e, e.alice, "assistants", "t.jsonl", data), 200).body["id"].(string)
		r = e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": id, "training_data_url": file})
		if r.status != 400 || r.errParam() != "training_data_url" || !strings.Contains(fmt.Sprint(r.errField("message")), c.msg) {
			t.Errorf("job on %s: %d %s", c.line, r.status, r.raw)
		}
	}
	file := e.must(uploadAs(t, e, e.alice, "assistants", "t.jsonl", good+"\n"), 200).body["id"].(string)
	e.must(e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": id, "training_data_url": file}), 200)
}
