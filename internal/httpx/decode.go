package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// DecodeJSON decodes the request body into v. Malformed JSON is a 400 with
// code "invalid_json"; a field of the wrong type is a 400 naming its JSON path
// (code "invalid_type"); a body over the server's limit is a 413. Unknown
// fields are ignored, as the wire contract requires.
func DecodeJSON(r *http.Request, v any) error {
	data, err := ReadBody(r, nil)
	if err != nil {
		return err
	}
	return UnmarshalJSON(data, v)
}

// UnmarshalJSON is DecodeJSON for bytes already read.
func UnmarshalJSON(data []byte, v any) error {
	if len(strings.TrimSpace(string(data))) == 0 {
		return Invalid("", "invalid_json", "request body is empty; expected a JSON object")
	}
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return DecodeMismatch("", data, te)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return Invalid("", "invalid_json", "malformed JSON at byte %d: %s", se.Offset, se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return Invalid("", "invalid_json", "malformed JSON: unexpected end of input")
	}
	return Invalid("", "invalid_json", "malformed JSON: %s", err.Error())
}

// jsonKind names, as a JSON type with its article ("an object", "a
// number"), the Go kind an encoding/json UnmarshalTypeError reports.
func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "ptr", "interface":
		return "a value"
	}
	return fmt.Sprintf("a %s", goKind)
}
