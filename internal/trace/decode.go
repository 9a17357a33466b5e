package trace

import (
	"bytes"
	"errors"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
)

// dec is a single-pass JSON decoder for the write path (start, end,
// upsert_batch): it reads fields by name, canonicalises JSON-valued fields
// while reading them, and reports type errors with the JSON path, so each
// byte of a batch is looked at once. Unknown fields are skipped (validated).
type dec struct {
	c     canon
	arena []byte // canonical values of this body, sub-sliced (capacity-limited) into ops
}

func newDec(data []byte) *dec { return &dec{c: newCanon(data)} }

func (d *dec) ws() { d.c.skipWS() }

func (d *dec) peek() byte {
	if d.c.Pos < len(d.c.Data) {
		return d.c.Data[d.c.Pos]
	}
	return 0
}

// syntax wraps a canon error as a 400.
func (d *dec) syntax(err error) error {
	var he *httpx.Error
	if errors.As(err, &he) {
		return err
	}
	return httpx.Invalid("", "invalid_json", "malformed JSON: %s", err.Error())
}

// typeErr is the 400 for a value at path that is not want (see
// httpx.TypeMismatch); at the top level, the body.
func (d *dec) typeErr(path, want string) error {
	got := jsonlex.KindOf(d.peek())
	if path == "" {
		return httpx.Invalid("", "invalid_type", "request body must be a JSON object, got %s", got)
	}
	return httpx.TypeMismatch(path, want, got)
}

// begin checks the body is not empty.
func (d *dec) begin() error {
	if len(bytes.TrimSpace(d.c.Data)) == 0 {
		return httpx.Invalid("", "invalid_json", "request body is empty; expected a JSON object")
	}
	return nil
}

// finish checks nothing but whitespace follows the top-level value.
func (d *dec) finish() error {
	d.ws()
	if d.c.Pos != len(d.c.Data) {
		return httpx.Invalid("", "invalid_json", "malformed JSON: unexpected data after the JSON value at byte %d", d.c.Pos)
	}
	return nil
}

// object reads an object, calling fn for each member with the decoder
// positioned at the value; fn must consume the value.
func (d *dec) object(path string, fn func(key string) error) error {
	d.ws()
	switch d.peek() {
	case '{':
	case 0:
		return d.syntax(d.c.Errorf("unexpected end of input"))
	default:
		return d.typeErr(path, "an object")
	}
	if err := d.c.Object(fn); err != nil {
		return d.syntax(err)
	}
	return nil
}

// array reads an array, calling fn for each element.
func (d *dec) array(path string, fn func(i int) error) error {
	d.ws()
	if d.peek() != '[' {
		return d.typeErr(path, "an array")
	}
	if err := d.c.Array(fn); err != nil {
		return d.syntax(err)
	}
	return nil
}

func (d *dec) null() bool {
	if d.peek() == 'n' {
		if err := d.c.lit("null"); err == nil {
			d.c.out = d.c.out[:0]
			return true
		}
	}
	return false
}

func (d *dec) optString(path string) (*string, error) {
	if d.null() {
		return nil, nil
	}
	if d.peek() != '"' {
		if err := d.checkValue(); err != nil {
			return nil, err
		}
		return nil, d.typeErr(path, "a string")
	}
	s, err := d.c.String()
	if err != nil {
		return nil, d.syntax(err)
	}
	return &s, nil
}

func (d *dec) optInt(path string) (*int64, error) {
	if d.null() {
		return nil, nil
	}
	b := d.peek()
	if b != '-' && (b < '0' || b > '9') {
		if err := d.checkValue(); err != nil {
			return nil, err
		}
		return nil, d.typeErr(path, "an integer")
	}
	text, _, err := d.c.Number()
	if err != nil {
		return nil, d.syntax(err)
	}
	v, perr := strconv.ParseInt(string(text), 10, 64)
	if perr != nil {
		return nil, httpx.Invalid(path, "invalid_type", "%s: expected an integer, got number %s", path, text)
	}
	return &v, nil
}

// checkValue validates the value at the cursor without consuming it, so a
// type error is not reported for malformed JSON.
func (d *dec) checkValue() error {
	save := d.c.Pos
	if err := d.skip(); err != nil {
		return err
	}
	d.c.Pos = save
	return nil
}

// canonical reads any JSON value and returns its canonical form. Values are
// appended to one arena per body; the returned slice's capacity ends at its
// length, so later appends never write into it (a grown arena leaves earlier
// values in the old array, still valid).
func (d *dec) canonical() ([]byte, error) {
	if d.arena == nil {
		d.arena = make([]byte, 0, len(d.c.Data)+len(d.c.Data)/8+64)
	}
	save := d.c.out
	start := len(d.arena)
	d.c.out = d.arena
	err := d.c.value()
	d.arena = d.c.out
	d.c.out = save
	if err != nil {
		return nil, d.syntax(err)
	}
	return d.arena[start:len(d.arena):len(d.arena)], nil
}

// skip reads and validates a value, discarding it.
func (d *dec) skip() error {
	if _, err := d.c.Skip(); err != nil {
		return d.syntax(err)
	}
	return nil
}

// decodeStartReq reads a start request object. JSON-valued fields come back
// canonical. With nested (batch items), the object may instead be the Weave
// SDKs' {"start": {...}} wrapper: the fields are then read from inside it and
// r.path names where they were found, so errors point there.
func (d *dec) decodeStartReq(prefix string, nested bool) (*startReq, error) {
	r := startReq{path: prefix}
	if err := d.startFields(&r, prefix, nested); err != nil {
		return nil, err
	}
	return &r, nil
}

func (d *dec) startFields(r *startReq, prefix string, nested bool) error {
	return d.object(prefix, func(key string) error {
		path := joinPath(prefix, key)
		var err error
		switch key {
		case "project_id":
			var v *string
			if v, err = d.optString(path); v != nil {
				r.ProjectID = *v
			}
		case "id":
			r.ID, err = d.optString(path)
		case "trace_id":
			r.TraceID, err = d.optString(path)
		case "parent_id":
			r.ParentID, err = d.optString(path)
		case "thread_id":
			r.ThreadID, err = d.optString(path)
		case "turn_id":
			r.TurnID, err = d.optString(path)
		case "op_name":
			r.OpName, err = d.optString(path)
		case "display_name":
			r.DisplayName, err = d.optString(path)
		case "started_at":
			r.StartedAt, err = d.optString(path)
		case "attributes":
			r.Attributes, err = d.canonical()
		case "inputs":
			r.Inputs, err = d.canonical()
		case "platform_run_id":
			r.PlatformRunID, err = d.optString(path)
		case "platform_run_step":
			r.PlatformRunStep, err = d.optInt(path)
		case "start":
			if !nested || d.null() {
				return d.skip()
			}
			r.path = path
			return d.startFields(r, path, false)
		default: // platform_user_id included: the server sets it
			err = d.skip()
		}
		return err
	})
}

// decodeEndReq reads an end request object; nested as for decodeStartReq
// ({"end": {...}}).
func (d *dec) decodeEndReq(prefix string, nested bool) (*endReq, error) {
	r := endReq{path: prefix}
	if err := d.endFields(&r, prefix, nested); err != nil {
		return nil, err
	}
	return &r, nil
}

func (d *dec) endFields(r *endReq, prefix string, nested bool) error {
	return d.object(prefix, func(key string) error {
		path := joinPath(prefix, key)
		var err error
		switch key {
		case "project_id":
			var v *string
			if v, err = d.optString(path); v != nil {
				r.ProjectID = *v
			}
		case "id":
			r.ID, err = d.optString(path)
		case "ended_at":
			r.EndedAt, err = d.optString(path)
		case "exception":
			r.Exception, err = d.optString(path)
		case "output":
			r.Output, err = d.canonical()
		case "summary":
			r.Summary, err = d.canonical()
		case "platform_run_step_end":
			r.PlatformRunStepEnd, err = d.optInt(path)
		case "end":
			if !nested || d.null() {
				return d.skip()
			}
			r.path = path
			return d.endFields(r, path, false)
		default:
			err = d.skip()
		}
		return err
	})
}
