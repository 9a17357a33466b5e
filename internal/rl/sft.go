package rl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"

	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
)

// SFTConfig is an SFT job's config (api.md: batch_size int|"auto"|null,
// learning_rate number|[number]|null, assistant_turns "all"|"last") and
// its experimental_config.seed, with their defaults filled in. It lives
// here beside experimental_config because both job kinds share the default
// learning rates (DefaultLearningRate) and the JSON-path errors.
type SFTConfig struct {
	// BatchSize is the number of examples per gradient step; 0 ("auto" or
	// null) packs examples by the trainer's token budget per step.
	BatchSize int
	// LearningRates has one rate per gradient step, the last repeating when
	// there are more steps (null: the one default rate). One rate decays
	// linearly to a tenth over the job's steps; a list is taken as it is.
	LearningRates []float64
	// LastTurnOnly is assistant_turns "last": only the last assistant turn
	// of each example is trained ("all", the default, trains every one).
	LastTurnOnly bool
	// Epochs is the number of passes over the file in one job (config.epochs,
	// an extension: default 1, at most MaxSFTEpochs). Each pass visits the
	// examples in a new order drawn from Seed.
	Epochs int
	// Seed is the data order's seed (experimental_config.seed, see
	// ResolveSFTExperimentalConfig).
	Seed uint64
}

// MaxSFTEpochs bounds config.epochs.
const MaxSFTEpochs = 1000

// sftConfigPath is where the SFT config sits in a request body.
const sftConfigPath = "config"

// ResolveSFTConfig validates raw, an SFT job's config (nil or null: {}),
// and returns it typed and as the job record shows it: unknown fields kept,
// batch_size "auto" when null, learning_rate defaultLR when null
// (DefaultLearningRate's), assistant_turns "all" and epochs 1 when null.
// Errors are *httpx.Error naming the JSON path (config.learning_rate[1]).
// Resolving a recorded config again gives the same config and record.
// Seed is left zero: ResolveSFTExperimentalConfig decides it.
func ResolveSFTConfig(raw []byte, defaultLR float64) (SFTConfig, json.RawMessage, error) {
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
		if err := checkLearningRate(o.keyPath("learning_rate"), defaultLR); err != nil {
			return c, nil, err
		}
		c.LearningRates = []float64{defaultLR}
		out["learning_rate"] = defaultLR
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
	if c.Epochs, err = o.intIn("epochs", 1, MaxSFTEpochs, 1); err != nil {
		return c, nil, err
	}
	out["epochs"] = c.Epochs
	b, err := json.Marshal(out)
	if err != nil {
		return c, nil, fmt.Errorf("encode config: %w", err)
	}
	return c, b, nil
}

// MaxSeed is the largest data-order seed: seeds are integers in
// [0, 2^53), so that every JSON client reads them back exactly.
const MaxSeed = 1<<53 - 1

// DefaultSFTSeed is the data-order seed of an SFT job whose
// experimental_config.seed is null: FNV-1a of the job id, cut to MaxSeed.
func DefaultSFTSeed(jobID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(jobID))
	return h.Sum64() & MaxSeed
}

// ResolveSFTExperimentalConfig validates raw, an SFT job's
// experimental_config (nil or null: {}), and returns the data-order seed
// (experimental_config.seed, an integer in [0, MaxSeed]; null: the job's
// DefaultSFTSeed) and the object as the job record shows it, the seed
// filled in and unknown fields kept. It is the one place that decides the
// seed, when a job is submitted (ResolveJob).
func ResolveSFTExperimentalConfig(raw []byte, jobID string) (uint64, json.RawMessage, error) {
	o, err := decodeObject(configPath, raw)
	if err != nil {
		return 0, nil, err
	}
	seed := DefaultSFTSeed(jobID)
	if v := o.get("seed"); v != nil {
		n, err := strconv.ParseUint(string(v), 10, 64)
		switch {
		case !isNumber(v):
			return 0, nil, typeError(o.keyPath("seed"), "an integer", v)
		case err != nil || n > MaxSeed:
			return 0, nil, valueError(o.keyPath("seed"), "must be an integer in [0, 2^53); got %s", v)
		}
		seed = n
	}
	out := o.record()
	out["seed"] = seed
	b, err := json.Marshal(out)
	if err != nil {
		return 0, nil, fmt.Errorf("encode experimental_config: %w", err)
	}
	return seed, b, nil
}

// intIn reads key as an integer in [lo, hi]; def when absent or null.
func (o object) intIn(key string, lo, hi, def int) (int, error) {
	v := o.get(key)
	if v == nil {
		return def, nil
	}
	if !isNumber(v) {
		return 0, typeError(o.keyPath(key), "an integer", v)
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < lo || n > hi {
		return 0, valueError(o.keyPath(key), "must be an integer in [%d, %d]; got %s", lo, hi, v)
	}
	return n, nil
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

// learningRate reads the JSON value v at path as a learning rate (see
// checkLearningRate).
func learningRate(path string, v json.RawMessage) (float64, error) {
	x, err := number(path, v)
	if err != nil {
		return x, err
	}
	return x, checkLearningRate(path, x)
}

// checkLearningRate is the one rule for a learning rate, RL or SFT: a
// number > 0 and at most MaxLearningRate (NaN fails the first test).
func checkLearningRate(path string, x float64) error {
	switch {
	case !(x > 0):
		return valueError(path, "must be > 0")
	case x > MaxLearningRate:
		return valueError(path, "must be at most %g (got %g)", MaxLearningRate, x)
	}
	return nil
}

// SFTExample is one line of an SFT training file (api.md: {"messages":
// [...], "tools": [...]?}), checked by ParseSFTLine.
type SFTExample struct {
	Messages []json.RawMessage // each a JSON object with a role
	Tools    []json.RawMessage // each a JSON object; nil when absent
}

// ParseSFTLine validates one line of an SFT training file and returns it
// typed. A line is a JSON object with messages, a non-empty array of
// messages: objects with a non-empty string role, content a string, null,
// or an array of content parts, tool_calls an array; at least one message
// has role "assistant" (there must be something to train on), and an
// assistant message has content or tool_calls; tools, when present, is an
// array of objects. Errors are *httpx.Error naming the field's path within
// the line (messages[2].content); callers add the line number. It is the
// one check of a line, at upload and in the trainer alike.
func ParseSFTLine(data []byte) (SFTExample, error) {
	var ex SFTExample
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		if len(data) == 0 || !json.Valid(data) {
			return ex, httpx.Invalid("", "invalid_json", "not a JSON value")
		}
		return ex, httpx.TypeMismatch("", "a JSON object", jsonlex.KindOf(data[0]))
	}
	o, err := decodeObject("", data)
	if err != nil {
		var he *httpx.Error
		if errors.As(err, &he) {
			he.Message = strings.TrimPrefix(he.Message, ": ")
		}
		return ex, err
	}
	if ex.Messages, err = o.objects("messages", true); err != nil {
		return ex, err
	}
	assistant := false
	for i, raw := range ex.Messages {
		m, err := decodeObject(o.keyPath("messages")+"["+strconv.Itoa(i)+"]", raw)
		if err != nil {
			return ex, err
		}
		role, err := m.str("role")
		if err != nil {
			return ex, err
		}
		if role == nil || *role == "" {
			return ex, httpx.Invalid(m.keyPath("role"), "missing_field", "%s is required", m.keyPath("role"))
		}
		content := m.get("content")
		if content != nil && content[0] != '"' && content[0] != '[' {
			return ex, typeError(m.keyPath("content"), "a string, null or an array of content parts", content)
		}
		calls := m.get("tool_calls")
		if calls != nil && calls[0] != '[' {
			return ex, typeError(m.keyPath("tool_calls"), "an array", calls)
		}
		if *role == "assistant" {
			assistant = true
			if content == nil && calls == nil {
				return ex, httpx.Invalid(m.keyPath("content"), "missing_field",
					"%s: an assistant message needs content or tool_calls", m.keyPath("content"))
			}
		}
	}
	if !assistant {
		return ex, httpx.Invalid("messages", "invalid_value", "messages: no message has role \"assistant\"; there is nothing to train on")
	}
	ex.Tools, err = o.objects("tools", false)
	return ex, err
}

// MaxSFTLineBytes is the longest line an SFT training file may hold (64
// MiB): a longer line is refused at upload and when a job is created on a
// file uploaded for another purpose, so the trainer never meets one.
const MaxSFTLineBytes = 64 << 20

// ReadSFTFile reads an SFT training file (JSONL, one example a line) and
// calls fn with each example and its line number (from 1); blank lines are
// skipped. Every line is checked by ParseSFTLine. It is the one reader of
// training files, for the upload's check and the trainer alike. Errors
// name the line: "line 3: messages[1].role is required", "line 7 is longer
// than 67108864 bytes", or "the file has no examples", each an
// *httpx.Error with code invalid_file (the caller sets its param); an
// error reading r or of fn is returned as it is.
func ReadSFTFile(r io.Reader, fn func(line int, ex SFTExample) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), MaxSFTLineBytes)
	line, n := 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		n++
		ex, err := ParseSFTLine(b)
		if err != nil {
			return httpx.Invalid("", "invalid_file", "line %d: %s", line, httpx.AsError(err).Message)
		}
		if err := fn(line, ex); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return httpx.Invalid("", "invalid_file", "line %d is longer than %d bytes", line+1, MaxSFTLineBytes)
		}
		return err
	}
	if n == 0 {
		return httpx.Invalid("", "invalid_file", "the file has no examples")
	}
	return nil
}

// objects reads key as an array of JSON objects; when required it must be
// present and non-empty.
func (o object) objects(key string, required bool) ([]json.RawMessage, error) {
	p := o.keyPath(key)
	v := o.get(key)
	if v == nil {
		if required {
			return nil, httpx.Invalid(p, "missing_field", "%s is required", p)
		}
		return nil, nil
	}
	if v[0] != '[' {
		return nil, typeError(p, "an array", v)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, httpx.Invalid(p, "invalid_json", "%s: %s", p, err.Error())
	}
	if required && len(elems) == 0 {
		return nil, valueError(p, "must not be empty")
	}
	for i, e := range elems {
		if e[0] != '{' {
			return nil, typeError(p+"["+strconv.Itoa(i)+"]", "an object", e)
		}
	}
	return elems, nil
}
