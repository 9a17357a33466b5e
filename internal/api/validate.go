package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
	"flywheel/internal/rl"
)

// decodeGeneric decodes a small JSON body into generic values, numbers kept
// as json.Number, so that validation can name the JSON path of a wrong-typed
// field (array indices included). Large training payloads use the scanner.
func decodeGeneric(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, httpx.Invalid("", "invalid_json", "request body is empty; expected a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, httpx.Invalid("", "invalid_json", "malformed JSON at byte %d: %s", se.Offset, se.Error())
		}
		return nil, httpx.Invalid("", "invalid_json", "malformed JSON: %s", err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, httpx.Invalid("", "invalid_json", "malformed JSON: unexpected data after the JSON value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, httpx.Invalid("", "invalid_type", "request body must be a JSON object, got %s", kindOf(v))
	}
	return m, nil
}

// kindOf is the JSON kind of a value decodeGeneric produced.
func kindOf(v any) jsonlex.Kind {
	switch v.(type) {
	case nil:
		return jsonlex.Null
	case bool:
		return jsonlex.Bool
	case json.Number, float64:
		return jsonlex.Number
	case string:
		return jsonlex.String
	case []any:
		return jsonlex.Array
	case map[string]any:
		return jsonlex.Object
	}
	return jsonlex.Invalid
}

func join(path, key string) string { return string(jsonlex.Path(path).Key(key)) }

func index(path string, i int) string { return string(jsonlex.Path(path).Index(i)) }

func typeErr(path, want string, got any) error { return httpx.TypeMismatch(path, want, kindOf(got)) }

func valueErr(path, format string, args ...any) error {
	return httpx.Invalid(path, "invalid_value", path+": "+format, args...)
}

// fields reads typed values out of a generic object, reporting errors with
// the object's path. A missing key and JSON null both read as absent.
type fields struct {
	m    map[string]any
	path string
}

func (f fields) str(key string, required bool) (string, bool, error) {
	v, ok := f.m[key]
	p := join(f.path, key)
	if !ok || v == nil {
		if required {
			return "", false, httpx.Invalid(p, "missing_field", "%s is required", p)
		}
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, typeErr(p, "a string", v)
	}
	return s, true, nil
}

func toNumber(path string, v any) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, typeErr(path, "a number", v)
	}
	x, err := n.Float64()
	if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
		return 0, valueErr(path, "number %s is out of range; numbers must be finite", n)
	}
	return x, nil
}

func (f fields) object(key string) (map[string]any, bool, error) {
	v, ok := f.m[key]
	if !ok || v == nil {
		return nil, false, nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		return nil, false, typeErr(join(f.path, key), "an object", v)
	}
	return o, true, nil
}

func (f fields) array(key string, required bool) ([]any, bool, error) {
	v, ok := f.m[key]
	p := join(f.path, key)
	if !ok || v == nil {
		if required {
			return nil, false, httpx.Invalid(p, "missing_field", "%s is required", p)
		}
		return nil, false, nil
	}
	a, ok := v.([]any)
	if !ok {
		return nil, false, typeErr(p, "an array", v)
	}
	return a, true, nil
}

// sftRequest is a validated SFT training-job request.
type sftRequest struct {
	ModelID            string
	FileID             string
	Config             json.RawMessage // as the job record shows it, with defaults filled (rl.ParseSFTConfig)
	ExperimentalConfig json.RawMessage // as sent; rl.ResolveSFTExperimentalConfig reads it
}

// validateSFT validates an SFT training-job request body.
func validateSFT(data []byte) (sftRequest, error) {
	var req sftRequest
	m, err := decodeGeneric(data)
	if err != nil {
		return req, err
	}
	f := fields{m: m}
	if req.ModelID, _, err = f.str("model_id", true); err != nil {
		return req, err
	}
	if req.FileID, _, err = f.str("training_data_url", true); err != nil {
		return req, err
	}
	if req.FileID == "" {
		return req, valueErr("training_data_url", "must be the id of an uploaded file (file-...) or a W&B artifact logged to flywheel (wandb-artifact:///entity/project/name:vN)")
	}
	for _, o := range []struct {
		key string
		dst *json.RawMessage
	}{{"config", &req.Config}, {"experimental_config", &req.ExperimentalConfig}} {
		v, _, err := f.object(o.key)
		if err != nil {
			return req, err
		}
		if *o.dst, err = json.Marshal(v); err != nil { // numbers are json.Number: written back as sent
			return req, fmt.Errorf("encode %s: %w", o.key, err)
		}
	}
	if _, req.Config, err = rl.ParseSFTConfig(req.Config); err != nil {
		return req, err
	}
	if _, _, err = rl.ResolveSFTExperimentalConfig(req.ExperimentalConfig, ""); err != nil {
		return req, err
	}
	return req, nil
}

// logMetrics computes the /log metrics of api.md for one split: the means
// over trajectories of reward and of each numeric key of metrics,
// exception_rate, reward_std_dev (the mean over the groups with more than
// one trajectory of the population std of their rewards, 0 when there is
// none, as the ART client computes it) and, for each numeric key of a
// group's own metrics, its mean over the groups that have it as
// "group_{name}". Keys are "{split}/{name}".
func logMetrics(m map[string]any) (string, map[string]float64, error) {
	f := fields{m: m}
	split, ok, err := f.str("split", false)
	if err != nil {
		return "", nil, err
	}
	if !ok || split == "" {
		split = "val"
	}
	if err := checkChars("split", split); err != nil {
		return "", nil, err
	}
	groups, _, err := f.array("trajectory_groups", true)
	if err != nil {
		return "", nil, err
	}
	sums, counts := map[string]float64{}, map[string]int{}
	gsums, gcounts := map[string]float64{}, map[string]int{}
	var rewardSum, stdSum float64
	var nTraj, nExc, nGroups int
	for gi, g := range groups {
		gp := index("trajectory_groups", gi)
		gm, ok := g.(map[string]any)
		if !ok {
			return "", nil, typeErr(gp, "an object", g)
		}
		gf := fields{m: gm, path: gp}
		trajs, _, err := gf.array("trajectories", true)
		if err != nil {
			return "", nil, err
		}
		exc, _, err := gf.array("exceptions", false)
		if err != nil {
			return "", nil, err
		}
		nExc += len(exc)
		if err := groupMetrics(gf, gsums, gcounts); err != nil {
			return "", nil, err
		}
		var rs []float64
		for ti, t := range trajs {
			tp := index(join(gp, "trajectories"), ti)
			tm, ok := t.(map[string]any)
			if !ok {
				return "", nil, typeErr(tp, "an object", t)
			}
			tf := fields{m: tm, path: tp}
			rv, ok := tm["reward"]
			if !ok || rv == nil {
				return "", nil, httpx.Invalid(join(tp, "reward"), "missing_field", "%s is required", join(tp, "reward"))
			}
			r, err := toNumber(join(tp, "reward"), rv)
			if err != nil {
				return "", nil, err
			}
			rs = append(rs, r)
			metrics, _, err := tf.object("metrics")
			if err != nil {
				return "", nil, err
			}
			for k, v := range metrics {
				if err := checkChars(join(join(tp, "metrics"), k), k); err != nil {
					return "", nil, err
				}
				if x, ok := metricNumber(v); ok {
					sums[k] += x
					counts[k]++
				}
			}
		}
		if len(rs) > 1 {
			var mean, sq float64
			for _, r := range rs {
				mean += r
			}
			mean /= float64(len(rs))
			for _, r := range rs {
				sq += (r - mean) * (r - mean)
			}
			stdSum += math.Sqrt(sq / float64(len(rs)))
			nGroups++
		}
		if len(rs) > 0 {
			for _, r := range rs {
				rewardSum += r
			}
			nTraj += len(rs)
		}
	}
	out := map[string]float64{}
	for k, s := range sums {
		out[split+"/"+k] = s / float64(counts[k])
	}
	for k, s := range gsums {
		out[split+"/group_"+k] = s / float64(gcounts[k])
	}
	if nTraj > 0 {
		out[split+"/reward"] = rewardSum / float64(nTraj)
		out[split+"/reward_std_dev"] = 0
		if nGroups > 0 {
			out[split+"/reward_std_dev"] = stdSum / float64(nGroups)
		}
	}
	if nTraj+nExc > 0 {
		out[split+"/exception_rate"] = float64(nExc) / float64(nTraj+nExc)
	}
	return split, out, nil
}

// groupMetrics adds the numeric values of a trajectory group's own metrics
// to sums and counts.
func groupMetrics(gf fields, sums map[string]float64, counts map[string]int) error {
	metrics, _, err := gf.object("metrics")
	if err != nil {
		return err
	}
	for k, v := range metrics {
		if x, ok := metricNumber(v); ok {
			sums[k] += x
			counts[k]++
		}
	}
	return nil
}

// metricNumber reads a metric value: a finite number, or a boolean as 0/1;
// ok is false for anything else (strings, nulls, objects are not metrics).
func metricNumber(v any) (float64, bool) {
	switch v := v.(type) {
	case json.Number:
		x, err := v.Float64()
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return 0, false
		}
		return x, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}
