package rl

import (
	"slices"
	"testing"
)

// An SFT config's defaults, as typed and as the job record shows them.
func TestParseSFTConfigDefaults(t *testing.T) {
	for _, raw := range []string{"", "null", "{}", `{"batch_size": null, "learning_rate": null, "assistant_turns": null}`} {
		c, rec, err := ParseSFTConfig([]byte(raw))
		if err != nil || c.BatchSize != 0 || c.LearningRates != nil || c.LastTurnOnly ||
			string(rec) != `{"assistant_turns":"all","batch_size":"auto","learning_rate":null}` {
			t.Fatalf("%q: %+v %s %v", raw, c, rec, err)
		}
	}
	c, rec, err := ParseSFTConfig([]byte(`{"batch_size": 4, "learning_rate": [1e-3, 2e-3], "assistant_turns": "last", "extra": "kept"}`))
	if err != nil || c.BatchSize != 4 || !slices.Equal(c.LearningRates, []float64{1e-3, 2e-3}) || !c.LastTurnOnly ||
		string(rec) != `{"assistant_turns":"last","batch_size":4,"extra":"kept","learning_rate":[0.001,0.002]}` {
		t.Fatalf("%+v %s %v", c, rec, err)
	}
	c, rec, err = ParseSFTConfig([]byte(`{"batch_size": "auto", "learning_rate": 0.5}`))
	if err != nil || c.BatchSize != 0 || !slices.Equal(c.LearningRates, []float64{0.5}) ||
		string(rec) != `{"assistant_turns":"all","batch_size":"auto","learning_rate":0.5}` {
		t.Fatalf("%+v %s %v", c, rec, err)
	}
}

// Each range of the SFT config at its boundary: a 400 naming the path.
func TestParseSFTConfigRanges(t *testing.T) {
	if c, _, err := ParseSFTConfig([]byte(`{"batch_size": 1, "learning_rate": 1e-300}`)); err != nil || c.BatchSize != 1 {
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
	} {
		_, _, err := ParseSFTConfig([]byte(b.raw))
		wantInvalid(t, b.raw, err, b.path, b.code, b.msg)
	}
}
