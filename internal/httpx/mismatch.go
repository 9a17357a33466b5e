package httpx

import (
	"encoding/json"
	"strings"

	"flywheel/internal/jsonlex"
)

// TypeMismatch is the 400 (code "invalid_type") for a value of the wrong
// JSON type at path: "messages[2].content: expected a string, got a number".
// The RL validator, the call store's decoder and the API's generic
// validation all say it this way.
func TypeMismatch(path, want string, got jsonlex.Kind) *Error {
	return Invalid(path, "invalid_type", "%s", jsonlex.Path(path).Mismatch(want, got))
}

// DecodeMismatch is TypeMismatch for the type error encoding/json reports
// when it decodes the document data into a Go value: the field (under
// prefix), the JSON type the Go field takes (jsonKind) and the type the
// body held. The field is the JSON path of the value at the error's offset
// (jsonlex.PathAt: "messages[1].content", "temperature"), not te.Field's Go
// path, which names embedded structs ("SamplingRequest.temperature") and no
// indices; te.Field only where data does not lex that far.
func DecodeMismatch(prefix string, data []byte, te *json.UnmarshalTypeError) *Error {
	path := jsonlex.Path(prefix)
	if at, ok := jsonlex.PathAt(data, int(te.Offset)-1); ok {
		switch {
		case path == "":
			path = at
		case at == "":
		case at[0] == '[':
			path += at
		default:
			path += "." + at
		}
	} else if te.Field != "" {
		path = path.Key(te.Field)
	}
	want := jsonKind(te.Type.Kind().String())
	if path == "" {
		return Invalid("", "invalid_type", "request body must be %s, got %s", want, decodedKind(te.Value))
	}
	return TypeMismatch(string(path), want, decodedKind(te.Value))
}

// decodedKind is the JSON type of the value an UnmarshalTypeError
// describes ("number", "number 1.5", "string", "bool", "array", "object").
func decodedKind(v string) jsonlex.Kind {
	switch {
	case strings.HasPrefix(v, "number"):
		return jsonlex.Number
	case v == "string":
		return jsonlex.String
	case v == "bool":
		return jsonlex.Bool
	case v == "array":
		return jsonlex.Array
	case v == "object":
		return jsonlex.Object
	case v == "null":
		return jsonlex.Null
	}
	return jsonlex.Invalid
}
