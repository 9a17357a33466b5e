package rl

import (
	"encoding/json"
	"fmt"
	"strconv"

	"flywheel/internal/httpx"
)

// SFTConfig is an SFT job's config (api.md: batch_size int|"auto"|null,
// learning_rate number|[number]|null, assistant_turns "all"|"last") with
// its defaults filled in. It lives here beside experimental_config because
// both job kinds share the default learning rates and the JSON-path errors.
type SFTConfig struct {
	// BatchSize is the number of examples per gradient step; 0 ("auto" or
	// null) packs examples by the trainer's token budget per step.
	BatchSize int
	// LearningRates has one rate per gradient step, the last repeating when
	// there are more steps; nil (null) means the base model's default.
	LearningRates []float64
	// LastTurnOnly is assistant_turns "last": only the last assistant turn
	// of each example is trained ("all", the default, trains every one).
	LastTurnOnly bool
}

// sftConfigPath is where the SFT config sits in a request body.
const sftConfigPath = "config"

// ParseSFTConfig validates raw, an SFT job's config (nil or null: {}),
// and returns it typed and as the job record shows it: unknown fields kept,
// batch_size "auto" when null, learning_rate null when null, and
// assistant_turns "all" when null. Errors are *httpx.Error naming the JSON
// path (config.learning_rate[1]).
func ParseSFTConfig(raw []byte) (SFTConfig, json.RawMessage, error) {
	var c SFTConfig
	o, err := decodeObject(sftConfigPath, raw)
	if err != nil {
		return c, nil, err
	}
	out := o.record()
	if out["batch_size"], c.BatchSize, err = o.batchSize(); err != nil {
		return c, nil, err
	}
	if c.LearningRates, err = o.learningRates(); err != nil {
		return c, nil, err
	}
	switch v := o.get("learning_rate"); {
	case v == nil:
		out["learning_rate"] = nil
	case isNumber(v):
		out["learning_rate"] = c.LearningRates[0]
	default:
		out["learning_rate"] = c.LearningRates
	}
	turns, err := o.str("assistant_turns")
	if err != nil {
		return c, nil, err
	}
	switch t := deref(turns, "all"); t {
	case "all", "last":
		c.LastTurnOnly = t == "last"
		out["assistant_turns"] = t
	default:
		return c, nil, valueError(o.keyPath("assistant_turns"), "must be \"all\" or \"last\"; got %q", t)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return c, nil, fmt.Errorf("encode config: %w", err)
	}
	return c, b, nil
}

// batchSize reads batch_size: a positive integer, "auto" or null (0). rec
// is its value in the job record.
func (o object) batchSize() (rec any, n int, err error) {
	p := o.keyPath("batch_size")
	v := o.get("batch_size")
	switch {
	case v == nil:
		return "auto", 0, nil
	case v[0] == '"':
		s, err := o.str("batch_size")
		if err != nil {
			return nil, 0, err
		}
		if *s != "auto" {
			return nil, 0, valueError(p, "must be a positive integer or \"auto\"; got %q", *s)
		}
		return *s, 0, nil
	case isNumber(v):
		n, err := strconv.Atoi(string(v))
		if err != nil || n <= 0 {
			return nil, 0, valueError(p, "must be a positive integer or \"auto\"; got %s", v)
		}
		return n, n, nil
	}
	return nil, 0, typeError(p, "an integer or \"auto\"", v)
}

// learningRates reads learning_rate: a number or a non-empty array of
// numbers, each in (0, MaxLearningRate]; nil when null.
func (o object) learningRates() ([]float64, error) {
	p := o.keyPath("learning_rate")
	v := o.get("learning_rate")
	switch {
	case v == nil:
		return nil, nil
	case isNumber(v):
		x, err := learningRate(p, v)
		return []float64{x}, err
	case v[0] != '[':
		return nil, typeError(p, "a number or an array of numbers", v)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, httpx.Invalid(p, "invalid_json", "%s: %s", p, err.Error())
	}
	if len(elems) == 0 {
		return nil, valueError(p, "must not be an empty array")
	}
	lrs := make([]float64, len(elems))
	for i, e := range elems {
		var err error
		if lrs[i], err = learningRate(p+"["+strconv.Itoa(i)+"]", e); err != nil {
			return nil, err
		}
	}
	return lrs, nil
}

// learningRate reads the JSON value v at path as a learning rate: a finite
// number > 0 and at most MaxLearningRate.
func learningRate(path string, v json.RawMessage) (float64, error) {
	x, err := number(path, v)
	switch {
	case err != nil:
	case x <= 0:
		err = valueError(path, "must be > 0")
	case x > MaxLearningRate:
		err = valueError(path, "must be at most %g (got %g)", MaxLearningRate, x)
	}
	return x, err
}
