package api

import (
	"bytes"
	"encoding/json"
	"errors"
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

// logMetrics computes the /log metrics of api.md for one split: the means
// over trajectories of reward and of each numeric key of metrics,
// exception_rate, reward_std_dev (rl.RewardStats, the definition RL jobs
// report too) and, for each numeric key of a
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
	var rewards rl.RewardStats
	var nExc int
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
		rewards.AddGroup(rs)
	}
	out := map[string]float64{}
	for k, s := range sums {
		out[split+"/"+k] = s / float64(counts[k])
	}
	for k, s := range gsums {
		out[split+"/group_"+k] = s / float64(gcounts[k])
	}
	nTraj := rewards.Trajectories()
	if nTraj > 0 {
		out[split+"/reward"] = rewards.Mean()
		out[split+"/reward_std_dev"] = rewards.StdDev()
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
