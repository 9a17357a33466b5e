package serve

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/infer"
)

// MaxLogitBias bounds logit_bias's entries.
const MaxLogitBias = 1024

// parsePenalties validates presence_penalty and frequency_penalty (OpenAI:
// [-2, 2]), repetition_penalty (vLLM: > 0, 1 is off) and logit_bias (token
// id strings to biases in [-100, 100]); nil when none changes anything.
// Token ids are checked against the model's vocabulary by checkLogitBias.
func parsePenalties(presence, frequency, repetition *float64, logitBias json.RawMessage) (*infer.Penalties, error) {
	var p infer.Penalties
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"presence_penalty", presence, &p.Presence}, {"frequency_penalty", frequency, &p.Frequency}} {
		if f.v == nil {
			continue
		}
		if !(*f.v >= -2 && *f.v <= 2) {
			return nil, httpx.Invalid(f.name, "invalid_value", "%s must be between -2 and 2, got %v", f.name, *f.v)
		}
		*f.dst = *f.v
	}
	if repetition != nil {
		if !(*repetition > 0) || math.IsInf(*repetition, 1) {
			return nil, httpx.Invalid("repetition_penalty", "invalid_value", "repetition_penalty must be a finite number greater than 0 (1 is off), got %v", *repetition)
		}
		p.Repetition = *repetition
	}
	if !isNull(logitBias) {
		var lb map[string]float64
		if err := json.Unmarshal(logitBias, &lb); err != nil {
			return nil, httpx.Invalid("logit_bias", "invalid_type", "logit_bias: expected an object mapping token ids to numbers")
		}
		if len(lb) > MaxLogitBias {
			return nil, tooLong("logit_bias", "logit_bias has %d entries; at most %d are allowed", len(lb), MaxLogitBias)
		}
		for k, v := range lb {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 || strconv.Itoa(id) != k {
				return nil, httpx.Invalid("logit_bias", "invalid_value", "logit_bias: key %q is not a token id", truncate(k, 32))
			}
			if !(v >= -100 && v <= 100) {
				return nil, httpx.Invalid("logit_bias."+k, "invalid_value", "logit_bias: the bias of token %d must be between -100 and 100, got %v", id, v)
			}
			if v == 0 {
				continue
			}
			if p.LogitBias == nil {
				p.LogitBias = map[int]float64{}
			}
			p.LogitBias[id] = v
		}
	}
	if p.Presence == 0 && p.Frequency == 0 && (p.Repetition == 0 || p.Repetition == 1) && len(p.LogitBias) == 0 {
		return nil, nil
	}
	return &p, nil
}

// checkLogitBias checks that logit_bias names tokens of lm's vocabulary.
func checkLogitBias(p *infer.Penalties, lm *servedModel) error {
	if p == nil {
		return nil
	}
	V := lm.m.Config.VocabSize
	for id := range p.LogitBias {
		if id >= V {
			return httpx.Invalid("logit_bias", "invalid_value", "logit_bias: token id %d is out of range [0, %d)", id, V)
		}
	}
	return nil
}

// truncate shortens s to at most n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s...", s[:n])
}
