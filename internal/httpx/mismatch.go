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
// when it decodes into a Go value: the field (te.Field, under prefix), the
// JSON type the Go field takes (jsonKind) and the type the body held.
func DecodeMismatch(prefix string, te *json.UnmarshalTypeError) *Error {
	path := jsonlex.Path(prefix)
	if te.Field != "" {
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
