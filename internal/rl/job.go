package rl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"flywheel/internal/engine/tiny"
	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
	"flywheel/internal/store"
)

// The default learning rates that DefaultLearningRate chooses from. Real
// models take rl.md's 5e-6, RL and SFT alike. The built-in tiny model (a
// 2-layer, hidden-64 random model) learns nothing visible at that rate, so
// its documented defaults are larger: 3e-3 for RL (the demo's reward rise;
// at 1e-2 the policy collapsed onto one repeated token within 3 jobs and
// sometimes fell back to the random model's reward after it: 3 of 64 seeds
// in BF16; internal/train's TestRLSweep), 8e-3 for SFT, which the trainer
// decays linearly to a tenth over each job's steps: with batch_size "auto",
// 16 conversations teaching one reply are memorised in 799 of 800 runs over
// HTTP (5e-3 without the decay: 396 of 400; docs/sft.md).
const (
	realModelLearningRate = 5e-6
	tinyRLLearningRate    = 3e-3
	tinySFTLearningRate   = 8e-3
)

// DefaultLearningRate is the one rule for the learning rate of a job whose
// request leaves it null (experimental_config.learning_rate for RL,
// config.learning_rate for SFT): 5e-6 for every real base model, and the
// tiny model's own defaults on flywheel/tiny (3e-3 RL, 8e-3 SFT). ResolveJob
// applies it when a job is submitted; the job record shows the result and
// the trainer runs it.
func DefaultLearningRate(kind store.JobKind, baseModel string) float64 {
	if baseModel != tiny.ID {
		return realModelLearningRate
	}
	if kind == store.KindSFT {
		return tinySFTLearningRate
	}
	return tinyRLLearningRate
}

// JobConfig is a training job's config, resolved once, when the job is
// submitted (ResolveJob): every default filled in and every range checked.
// The job record stores ExperimentalConfig and Config, and the worker runs
// exactly what they say (RecordedJob reads them back), so a job record
// always shows the config its trainer ran.
type JobConfig struct {
	Kind store.JobKind
	RL   Config    // Kind rl
	SFT  SFTConfig // Kind sft: LearningRates has at least one rate
	// ExperimentalConfig and Config are the job record's fields of those
	// names (api.md: "with defaults filled in"): every field with its value
	// or default, unknown fields kept as sent. Config is nil for RL.
	ExperimentalConfig, Config json.RawMessage
}

// ResolveJob resolves the config of a job of kind on baseModel from the
// request's experimental_config and (SFT) config, each raw (nil or null:
// {}): the learning rate by DefaultLearningRate when null, the rest by
// ResolveConfig (RL), ResolveSFTConfig and ResolveSFTExperimentalConfig
// (SFT, whose default seed derives from jobID). Errors are *httpx.Error
// naming the field's JSON path.
func ResolveJob(kind store.JobKind, baseModel, jobID string, experimentalConfig, config []byte) (JobConfig, error) {
	jc := JobConfig{Kind: kind}
	lr := DefaultLearningRate(kind, baseModel)
	var err error
	switch kind {
	case store.KindRL:
		jc.RL, jc.ExperimentalConfig, err = ResolveConfig(experimentalConfig, lr)
	case store.KindSFT:
		if jc.SFT, jc.Config, err = ResolveSFTConfig(config, lr); err != nil {
			return jc, err
		}
		jc.SFT.Seed, jc.ExperimentalConfig, err = ResolveSFTExperimentalConfig(experimentalConfig, jobID)
	default:
		err = fmt.Errorf("unknown job kind %q", kind)
	}
	return jc, err
}

// ErrUnresolved says that a job record holds no resolved config: flywheel
// versions before the config was resolved once at submission recorded an
// SFT job's config.learning_rate as null (and older ones may lack other
// fields), resolving the config again when the job ran. The queue resolves
// such a record's config at claim, from the stored request, and records it
// before the job runs.
var ErrUnresolved = errors.New("the job record has no resolved config (submitted by an older flywheel version)")

// RecordedJob reads a job record's config (the ExperimentalConfig and
// Config that ResolveJob returned and the store kept) back into the
// JobConfig the trainer runs. Every field ResolveJob fills must be there:
// one that is missing or null is an error wrapping ErrUnresolved, which
// names the field. No default is applied here.
func RecordedJob(kind store.JobKind, experimentalConfig, config json.RawMessage) (JobConfig, error) {
	jc := JobConfig{Kind: kind, ExperimentalConfig: experimentalConfig}
	// NaN as the default learning rate: requireKeys guarantees the record
	// has one, and a NaN that got through would fail checkLearningRate.
	nan := math.NaN()
	var err error
	switch kind {
	case store.KindRL:
		if err := requireKeys(configPath, experimentalConfig, rlRecordKeys...); err != nil {
			return jc, err
		}
		jc.RL, _, err = ResolveConfig(experimentalConfig, nan)
	case store.KindSFT:
		jc.Config = config
		if err := requireKeys(sftConfigPath, config, "batch_size", "learning_rate", "assistant_turns", "epochs"); err != nil {
			return jc, err
		}
		if err := requireKeys(configPath, experimentalConfig, "seed"); err != nil {
			return jc, err
		}
		if jc.SFT, _, err = ResolveSFTConfig(config, nan); err != nil {
			return jc, err
		}
		jc.SFT.Seed, _, err = ResolveSFTExperimentalConfig(experimentalConfig, "")
	default:
		err = fmt.Errorf("unknown job kind %q", kind)
	}
	if err != nil {
		return jc, fmt.Errorf("the job record's config: %w", err)
	}
	return jc, nil
}

// rlRecordKeys are the experimental_config fields that ResolveConfig
// always fills with a value (the other two it records, x_k2_tau and
// max_negative_advantage_importance_sampling_weight, are null when unset).
var rlRecordKeys = []string{"ppo", "epsilon", "epsilon_high", "importance_sampling_level", "mask_prob_ratio",
	"advantage_balance", "scale_rewards", "precalculate_logprobs", "learning_rate"}

// requireKeys checks that the recorded object raw at path has a non-null
// value for each key; the first missing one is an error wrapping
// ErrUnresolved.
func requireKeys(path string, raw json.RawMessage, keys ...string) error {
	o, err := decodeObject(path, raw)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if o.get(k) == nil {
			return fmt.Errorf("%s is null: %w", o.keyPath(k), ErrUnresolved)
		}
	}
	return nil
}

// SentConfig returns the experimental_config and (SFT) config of a stored
// request body of a job of kind, raw as the client sent them: what
// ResolveJob reads. Only a job record without a resolved config
// (ErrUnresolved) needs it, to be resolved at claim.
func SentConfig(kind store.JobKind, body []byte) (experimentalConfig, config json.RawMessage, err error) {
	if kind == store.KindSFT {
		req, err := ParseSFTRequest(body)
		return req.ExperimentalConfig, req.Config, err
	}
	var req struct {
		ExperimentalConfig json.RawMessage `json:"experimental_config"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, fmt.Errorf("invalid training request: %w", err)
	}
	return req.ExperimentalConfig, nil, nil
}

// SFTRequest is the body of POST /v1/preview/sft-training-jobs (api.md),
// its two configs raw for ResolveJob.
type SFTRequest struct {
	ModelID         string
	TrainingDataURL string // a file id (file-…, optionally file://) or a W&B artifact URL
	// Config and ExperimentalConfig are the objects as sent; nil when
	// absent or null.
	Config, ExperimentalConfig json.RawMessage
}

// ParseSFTRequest checks an SFT training-job body's shape: a JSON object
// with model_id and training_data_url non-empty strings, config and
// experimental_config objects when present (their fields are ResolveJob's
// to check). Errors are *httpx.Error naming the field.
func ParseSFTRequest(body []byte) (SFTRequest, error) {
	var req SFTRequest
	data := bytes.TrimSpace(body)
	switch {
	case len(data) == 0:
		return req, httpx.Invalid("", "invalid_json", "request body is empty; expected a JSON object")
	case !json.Valid(data):
		return req, httpx.Invalid("", "invalid_json", "malformed JSON: the request body is not a JSON value")
	case data[0] != '{':
		return req, httpx.Invalid("", "invalid_type", "request body must be a JSON object, got %s", jsonlex.KindOf(data[0]))
	}
	o, err := decodeObject("", data)
	if err != nil {
		return req, err
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"model_id", &req.ModelID}, {"training_data_url", &req.TrainingDataURL}} {
		s, err := o.str(f.key)
		if err != nil {
			return req, err
		}
		if s == nil {
			return req, httpx.Invalid(f.key, "missing_field", "%s is required", f.key)
		}
		*f.dst = *s
	}
	if req.TrainingDataURL == "" {
		return req, valueError("training_data_url", "must be the id of an uploaded file (file-...) or a W&B artifact logged to flywheel (wandb-artifact:///entity/project/name:vN)")
	}
	for _, f := range []struct {
		key string
		dst *json.RawMessage
	}{{sftConfigPath, &req.Config}, {configPath, &req.ExperimentalConfig}} {
		v := o.get(f.key)
		if v != nil && v[0] != '{' {
			return req, typeError(f.key, "an object", v)
		}
		*f.dst = v
	}
	return req, nil
}
