package rl

import (
	"fmt"
	"slices"
	"testing"
)

// An SFT config's defaults, as typed and as the job record shows them: the
// default learning rate is the one the job runs, not null.
func TestResolveSFTConfigDefaults(t *testing.T) {
	for _, raw := range []string{"", "null", "{}", `{"batch_size": null, "learning_rate": null, "assistant_turns": null}`} {
		c, rec, err := ResolveSFTConfig([]byte(raw), 0.25)
		if err != nil || c.BatchSize != 0 || !slices.Equal(c.LearningRates, []float64{0.25}) || c.LastTurnOnly || c.Epochs != 1 ||
			string(rec) != `{"assistant_turns":"all","batch_size":"auto","epochs":1,"learning_rate":0.25}` {
			t.Fatalf("%q: %+v %s %v", raw, c, rec, err)
		}
	}
	c, rec, err := ResolveSFTConfig([]byte(`{"batch_size": 4, "learning_rate": [1e-3, 2e-3], "assistant_turns": "last", "extra": "kept", "epochs": 3}`), 0.25)
	if err != nil || c.BatchSize != 4 || !slices.Equal(c.LearningRates, []float64{1e-3, 2e-3}) || !c.LastTurnOnly || c.Epochs != 3 ||
		string(rec) != `{"assistant_turns":"last","batch_size":4,"epochs":3,"extra":"kept","learning_rate":[0.001,0.002]}` {
		t.Fatalf("%+v %s %v", c, rec, err)
	}
	c, rec, err = ResolveSFTConfig([]byte(`{"batch_size": "auto", "learning_rate": 0.5}`), 0.25)
	if err != nil || c.BatchSize != 0 || !slices.Equal(c.LearningRates, []float64{0.5}) ||
		string(rec) != `{"assistant_turns":"all","batch_size":"auto","epochs":1,"learning_rate":0.5}` {
		t.Fatalf("%+v %s %v", c, rec, err)
	}
}

// Each range of the SFT config at its boundary: a 400 naming the path.
func TestResolveSFTConfigRanges(t *testing.T) {
	if c, _, err := ResolveSFTConfig([]byte(`{"batch_size": 1, "learning_rate": 1e-300, "epochs": 1000}`), 0.25); err != nil || c.BatchSize != 1 || c.Epochs != MaxSFTEpochs {
		t.Fatalf("smallest valid values: %+v %v", c, err)
	}
	for _, b := range []struct{ raw, path, code, msg string }{
		{`{"batch_size": 0}`, "config.batch_size", "invalid_value", `config.batch_size: must be a positive integer or "auto"; got 0`},
		{`{"batch_size": -1}`, "config.batch_size", "invalid_value", ""},
		{`{"batch_size": 2.5}`, "config.batch_size", "invalid_value", ""},
		{`{"batch_size": "x"}`, "config.batch_size", "invalid_value", `config.batch_size: must be a positive integer or "auto"; got "x"`},
		{`{"batch_size": true}`, "config.batch_size", "invalid_type", `config.batch_size: expected an integer or "auto", got a boolean`},
		{`{"learning_rate": 0}`, "config.learning_rate", "invalid_value", "config.learning_rate: must be > 0"},
		{`{"learning_rate": 1e999}`, "config.learning_rate", "invalid_value", ""},
		{`{"learning_rate": 1e30}`, "config.learning_rate", "invalid_value", "config.learning_rate: must be at most 1 (got 1e+30)"},
		{`{"learning_rate": [1e-4, 2]}`, "config.learning_rate[1]", "invalid_value", "config.learning_rate[1]: must be at most 1 (got 2)"},
		{`{"learning_rate": []}`, "config.learning_rate", "invalid_value", "config.learning_rate: must not be an empty array"},
		{`{"learning_rate": [1e-4, "x"]}`, "config.learning_rate[1]", "invalid_type", "config.learning_rate[1]: expected a number, got a string"},
		{`{"learning_rate": [1e-4, 0]}`, "config.learning_rate[1]", "invalid_value", "config.learning_rate[1]: must be > 0"},
		{`{"learning_rate": "a"}`, "config.learning_rate", "invalid_type", "config.learning_rate: expected a number or an array of numbers, got a string"},
		{`{"assistant_turns": "first"}`, "config.assistant_turns", "invalid_value", `config.assistant_turns: must be "all" or "last"; got "first"`},
		{`{"assistant_turns": 1}`, "config.assistant_turns", "invalid_type", ""},
		{`3`, "config", "invalid_type", "config: expected an object, got a number"},
		{`{"epochs": 0}`, "config.epochs", "invalid_value", "config.epochs: must be an integer in [1, 1000]; got 0"},
		{`{"epochs": 1001}`, "config.epochs", "invalid_value", ""},
		{`{"epochs": 1.5}`, "config.epochs", "invalid_value", ""},
		{`{"epochs": "2"}`, "config.epochs", "invalid_type", "config.epochs: expected an integer, got a string"},
	} {
		_, _, err := ResolveSFTConfig([]byte(b.raw), 0.25)
		wantInvalid(t, b.raw, err, b.path, b.code, b.msg)
	}
}

// The data-order seed: given, or derived from the job id; recorded in the
// job's experimental_config with unknown fields kept.
func TestResolveSFTExperimentalConfig(t *testing.T) {
	seed, rec, err := ResolveSFTExperimentalConfig(nil, "job-a")
	if err != nil || seed != DefaultSFTSeed("job-a") || string(rec) != fmt.Sprintf(`{"seed":%d}`, seed) {
		t.Fatalf("default: %d %s %v", seed, rec, err)
	}
	if DefaultSFTSeed("job-a") == DefaultSFTSeed("job-b") || DefaultSFTSeed("x") > MaxSeed {
		t.Fatal("default seeds should differ by job and stay below 2^53")
	}
	seed, rec, err = ResolveSFTExperimentalConfig([]byte(`{"seed": 9007199254740991, "x": 1.50}`), "job-a")
	if err != nil || seed != MaxSeed || string(rec) != `{"seed":9007199254740991,"x":1.50}` {
		t.Fatalf("given: %d %s %v", seed, rec, err)
	}
	for _, b := range []struct{ raw, code string }{
		{`{"seed": -1}`, "invalid_value"}, {`{"seed": 1.5}`, "invalid_value"}, {`{"seed": 9007199254740992}`, "invalid_value"},
		{`{"seed": "7"}`, "invalid_type"},
	} {
		_, _, err := ResolveSFTExperimentalConfig([]byte(b.raw), "j")
		wantInvalid(t, b.raw, err, "experimental_config.seed", b.code, "")
	}
	_, _, err = ResolveSFTExperimentalConfig([]byte(`[]`), "j")
	wantInvalid(t, "array", err, "experimental_config", "invalid_type", "")
}

// Each check of a training-file line: a 400 naming the field's path in the
// line.
func TestParseSFTLine(t *testing.T) {
	ex, err := ParseSFTLine([]byte(`{"messages": [{"role": "system", "content": null}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
		{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "x"}, {"role": "assistant", "content": "ok"}], "tools": [{"type": "function"}]}`))
	if err != nil || len(ex.Messages) != 5 || len(ex.Tools) != 1 {
		t.Fatalf("%+v %v", ex, err)
	}
	for _, b := range []struct{ raw, path, code, msg string }{
		{`not json`, "", "invalid_json", "not a JSON value"},
		{`[1]`, "", "invalid_type", "expected a JSON object, got an array"},
		{`{}`, "messages", "missing_field", "messages is required"},
		{`{"messages": []}`, "messages", "invalid_value", "messages: must not be empty"},
		{`{"messages": {}}`, "messages", "invalid_type", "messages: expected an array, got an object"},
		{`{"messages": [1]}`, "messages[0]", "invalid_type", "messages[0]: expected an object, got a number"},
		{`{"messages": [{"content": "a"}]}`, "messages[0].role", "missing_field", "messages[0].role is required"},
		{`{"messages": [{"role": 3}]}`, "messages[0].role", "invalid_type", "messages[0].role: expected a string, got a number"},
		{`{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": 5}]}`, "messages[1].content", "invalid_type",
			"messages[1].content: expected a string, null or an array of content parts, got a number"},
		{`{"messages": [{"role": "user", "content": "q"}, {"role": "assistant"}]}`, "messages[1].content", "missing_field", ""},
		{`{"messages": [{"role": "assistant", "tool_calls": {}}]}`, "messages[0].tool_calls", "invalid_type", ""},
		{`{"messages": [{"role": "user", "content": "q"}]}`, "messages", "invalid_value", ""},
		{`{"messages": [{"role": "assistant", "content": "a"}], "tools": {}}`, "tools", "invalid_type", "tools: expected an array, got an object"},
		{`{"messages": [{"role": "assistant", "content": "a"}], "tools": ["f"]}`, "tools[0]", "invalid_type", ""},
	} {
		_, err := ParseSFTLine([]byte(b.raw))
		wantInvalid(t, b.raw, err, b.path, b.code, b.msg)
	}
}
