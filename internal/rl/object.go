package rl

import (
	"bytes"
	"encoding/json"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
)

// object is a small JSON object of a request (experimental_config, an SFT
// job's config) read key by key; errors name path.key. Absent keys and
// JSON null read as absent (every field is nullable, null = default).
type object struct {
	path string
	raw  map[string]json.RawMessage
}

// decodeObject decodes data, the value at path, as an object; empty data
// and null read as the empty object.
func decodeObject(path string, data []byte) (object, error) {
	o := object{path: path}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" {
		return o, nil
	}
	if data[0] != '{' {
		if !json.Valid(data) {
			return o, httpx.Invalid(path, "invalid_json", "%s: malformed JSON", path)
		}
		return o, httpx.TypeMismatch(path, "an object", jsonlex.KindOf(data[0]))
	}
	if err := json.Unmarshal(data, &o.raw); err != nil {
		return o, httpx.Invalid(path, "invalid_json", "%s: %s", path, err.Error())
	}
	return o, nil
}

func (o object) keyPath(key string) string { return string(jsonlex.Path(o.path).Key(key)) }

// get returns the raw value of key, nil when absent or null.
func (o object) get(key string) json.RawMessage {
	v := o.raw[key]
	if len(v) == 0 || v[0] == 'n' {
		return nil
	}
	return v
}

func (o object) number(key string) (*float64, error) {
	v := o.get(key)
	if v == nil {
		return nil, nil
	}
	x, err := number(o.keyPath(key), v)
	return &x, err
}

func (o object) boolean(key string) (*bool, error) {
	v := o.get(key)
	if v == nil {
		return nil, nil
	}
	if v[0] != 't' && v[0] != 'f' {
		return nil, typeError(o.keyPath(key), "a boolean", v)
	}
	b := v[0] == 't'
	return &b, nil
}

func (o object) str(key string) (*string, error) {
	v := o.get(key)
	if v == nil {
		return nil, nil
	}
	if v[0] != '"' {
		return nil, typeError(o.keyPath(key), "a string", v)
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, httpx.Invalid(o.keyPath(key), "invalid_json", "%s: %s", o.keyPath(key), err.Error())
	}
	return &s, nil
}

// record returns the object as the job record shows it before defaults
// are filled: every key, values decoded with numbers kept as written.
func (o object) record() map[string]any {
	out := make(map[string]any, len(o.raw)+12)
	for k, v := range o.raw {
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var x any
		_ = dec.Decode(&x) // v is one valid JSON value: decodeObject checked it
		out[k] = x
	}
	return out
}

// number reads the JSON value v at path as a finite number.
func number(path string, v json.RawMessage) (float64, error) {
	if !isNumber(v) {
		return 0, typeError(path, "a number", v)
	}
	x, err := strconv.ParseFloat(string(v), 64)
	if err != nil { // out of range: ±Inf
		return 0, valueError(path, "number %s is out of range; numbers must be finite", v)
	}
	return x, nil
}

// isNumber reports whether the JSON value v is a number.
func isNumber(v json.RawMessage) bool { return v[0] == '-' || v[0] >= '0' && v[0] <= '9' }

// typeError reports that the value v at path is not of the wanted JSON type.
func typeError(path, want string, v json.RawMessage) error {
	return httpx.TypeMismatch(path, want, jsonlex.KindOf(v[0]))
}

// valueError reports a value at path outside its range or set.
func valueError(path, format string, args ...any) error {
	return httpx.Invalid(path, "invalid_value", path+": "+format, args...)
}
