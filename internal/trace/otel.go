package trace

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// POST /otel/v1/traces: OTLP/HTTP trace export (protobuf, the OTLP
// exporters' default encoding), as Weave's server takes it: the project is
// named by the `project_id` header (entity/project) and each span is stored
// as a finished call: id = span id, trace_id, parent_id = parent span id
// (16 and 32 hex digits, as sent), op_name = the span's name, started_at /
// ended_at from its times, attributes = its attributes (resource attributes
// under "otel.resource"), exception = the status message of an error span,
// inputs {} and output null. The export is one batch (one transaction).
//
// The message is decoded with protowire (the wire format; google.golang.org/
// protobuf is already in the module graph through the Prometheus client), so
// no generated OTLP types are needed: only the fields above are read and
// every other field is skipped.

// maxOtelSpans bounds the spans of one export (413 above it).
const maxOtelSpans = 10_000

type otelSpan struct {
	traceID, spanID, parentID []byte
	name                      string
	start, end                uint64
	attrs                     []byte // canonical JSON object
	statusCode                uint64
	statusMessage             string
}

var errOtel = errors.New("malformed OTLP protobuf")

// otelFields calls fn for each field of a protobuf message.
func otelFields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errOtel
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			n, l = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, l = protowire.ConsumeFixed32(b)
			n = uint64(x)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return errOtel
		}
		b = b[l:]
		if err := fn(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}

// appendAnyValue appends an OTLP AnyValue as JSON (depth-bounded).
func appendAnyValue(out []byte, b []byte, depth int) ([]byte, error) {
	if depth > 16 {
		return nil, errOtel
	}
	var val []byte = []byte("null")
	err := otelFields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch num {
		case 1: // string_value
			if !utf8.Valid(v) {
				return errOtel
			}
			val = appendPyString(nil, string(v))
		case 2: // bool_value
			val = []byte(strconv.FormatBool(n != 0))
		case 3: // int_value
			val = strconv.AppendInt(nil, int64(n), 10)
		case 4: // double_value
			f := math.Float64frombits(n)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				val = []byte("null")
			} else {
				val = appendPyFloat(nil, f)
			}
		case 5: // array_value {values = 1}
			arr := []byte{'['}
			first := true
			err := otelFields(v, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
				if num != 1 {
					return nil
				}
				if !first {
					arr = append(arr, ", "...)
				}
				first = false
				var err error
				arr, err = appendAnyValue(arr, v, depth+1)
				return err
			})
			if err != nil {
				return err
			}
			val = append(arr, ']')
		case 6: // kvlist_value {values = 1: KeyValue}
			obj, err := appendKeyValues(nil, v, depth+1)
			if err != nil {
				return err
			}
			val = obj
		case 7: // bytes_value
			val = appendPyString(nil, hex.EncodeToString(v))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(out, val...), nil
}

// appendKeyValues appends the repeated KeyValue (field 1) of b as a JSON object.
func appendKeyValues(out []byte, b []byte, depth int) ([]byte, error) {
	out = append(out, '{')
	first := true
	err := otelFields(b, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
		if num != 1 {
			return nil
		}
		var key string
		var value []byte
		if err := otelFields(v, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
			switch num {
			case 1:
				key = string(v)
			case 2:
				value = v
			}
			return nil
		}); err != nil {
			return err
		}
		if !utf8.ValidString(key) {
			return errOtel
		}
		if !first {
			out = append(out, ", "...)
		}
		first = false
		out = appendPyString(out, key)
		out = append(out, ": "...)
		var err error
		out, err = appendAnyValue(out, value, depth)
		return err
	})
	return append(out, '}'), err
}

// decodeOtel reads an ExportTraceServiceRequest into spans.
func decodeOtel(b []byte) ([]otelSpan, error) {
	var spans []otelSpan
	err := otelFields(b, func(num protowire.Number, _ protowire.Type, rs []byte, _ uint64) error {
		if num != 1 { // resource_spans
			return nil
		}
		resource := []byte("{}")
		var scopes [][]byte
		if err := otelFields(rs, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
			switch num {
			case 1: // resource {attributes = 1}
				var err error
				resource, err = appendKeyValues(nil, v, 0)
				return err
			case 2: // scope_spans
				scopes = append(scopes, v)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, ss := range scopes {
			if err := otelFields(ss, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
				if num != 2 { // spans
					return nil
				}
				if len(spans) >= maxOtelSpans {
					return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "resource_spans", Code: "too_many_spans",
						Message: fmt.Sprintf("an export holds at most %d spans", maxOtelSpans)}
				}
				sp := otelSpan{attrs: []byte("{}")}
				var attrs [][]byte
				if err := otelFields(v, func(num protowire.Number, _ protowire.Type, v []byte, n uint64) error {
					switch num {
					case 1:
						sp.traceID = v
					case 2:
						sp.spanID = v
					case 4:
						sp.parentID = v
					case 5:
						sp.name = string(v)
					case 7:
						sp.start = n
					case 8:
						sp.end = n
					case 9:
						attrs = append(attrs, v)
					case 15: // status {message = 2, code = 3}
						return otelFields(v, func(num protowire.Number, _ protowire.Type, v []byte, n uint64) error {
							switch num {
							case 2:
								sp.statusMessage = string(v)
							case 3:
								sp.statusCode = n
							}
							return nil
						})
					}
					return nil
				}); err != nil {
					return err
				}
				// attributes: the span's KeyValues (field 9, repeated) and the resource's
				var kv []byte
				for _, a := range attrs {
					kv = protowire.AppendTag(kv, 1, protowire.BytesType)
					kv = protowire.AppendBytes(kv, a)
				}
				obj, err := appendKeyValues(nil, kv, 0)
				if err != nil {
					return err
				}
				if len(obj) > 2 {
					obj = append(obj[:len(obj)-1], ", "...)
				} else {
					obj = obj[:1]
				}
				obj = append(obj, `"otel.resource": `...)
				obj = append(append(obj, resource...), '}')
				// the stored form every JSON column has (checked, not assumed)
				if sp.attrs, err = Canonicalize(obj); err != nil {
					return errOtel
				}
				spans = append(spans, sp)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return spans, err
}

// otelID is a span or trace id as the call store keeps it: lowercase hex.
func otelID(b []byte, size int) (string, bool) {
	if len(b) != size {
		return "", false
	}
	id := hex.EncodeToString(b)
	return id, validID(id)
}

func (s *Service) handleOtelExport(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/x-protobuf") && !strings.HasPrefix(ct, "application/protobuf") {
		return httpx.Invalid("Content-Type", "unsupported", "OTLP export is served as protobuf (application/x-protobuf), not %q", ct)
	}
	projectID := r.Header.Get("project_id")
	entity, name, err := authorize(p, projectID, "project_id header")
	if err != nil {
		return err
	}
	spans, err := decodeOtel(body)
	if err != nil {
		if errors.Is(err, errOtel) {
			return httpx.Invalid("", "invalid_protobuf", "the body is not an OTLP ExportTraceServiceRequest")
		}
		return err
	}
	ops := make([]*writeOp, 0, 2*len(spans))
	for i, sp := range spans {
		path := fmt.Sprintf("spans[%d]", i)
		traceID, ok1 := otelID(sp.traceID, 16)
		spanID, ok2 := otelID(sp.spanID, 8)
		if !ok1 || !ok2 {
			return httpx.Invalid(path, "invalid_value", "a span needs a 16-byte trace id and an 8-byte span id, not all zero")
		}
		var parent *string
		if len(sp.parentID) > 0 {
			pid, ok := otelID(sp.parentID, 8)
			if !ok {
				return httpx.Invalid(path+".parent_span_id", "invalid_value", "expected 8 bytes, not all zero")
			}
			parent = &pid
		}
		opName := sp.name
		if err := checkText(&opName, path+".name"); err != nil {
			return err
		}
		if opName == "" {
			return httpx.Invalid(path+".name", "missing_field", "a span needs a name")
		}
		if sp.start > math.MaxInt64 || sp.end > math.MaxInt64 || sp.start == 0 {
			return httpx.Invalid(path+".start_time_unix_nano", "invalid_value", "expected a time after 1970")
		}
		start := &writeOp{kind: 's', entity: entity, name: name, userID: p.UserID, id: spanID, traceID: traceID, parentID: parent,
			opName: &opName, startedAt: time.Unix(0, int64(sp.start)).UnixMicro(), attributes: sp.attrs, inputs: []byte("{}")}
		end := &writeOp{kind: 'e', entity: entity, name: name, id: spanID, output: []byte("null"), summary: []byte("{}")}
		end.endedAt = start.startedAt
		if sp.end > 0 {
			end.endedAt = time.Unix(0, int64(sp.end)).UnixMicro()
		}
		if sp.statusCode == 2 { // STATUS_CODE_ERROR
			msg := sp.statusMessage
			if msg == "" {
				msg = "error"
			}
			if err := checkText(&msg, path+".status.message"); err != nil {
				return err
			}
			end.exception = &msg
		}
		ops = append(ops, start, end)
	}
	if err := s.apply(r.Context(), ops); err != nil {
		return err
	}
	// an empty ExportTraceServiceResponse
	writeRaw(w, http.StatusOK, "application/x-protobuf", nil)
	return nil
}
