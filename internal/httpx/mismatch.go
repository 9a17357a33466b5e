package httpx

import "flywheel/internal/jsonlex"

// TypeMismatch is the 400 (code "invalid_type") for a value of the wrong
// JSON type at path: "messages[2].content: expected a string, got a number".
// The RL validator, the call store's decoder and the API's generic
// validation all say it this way.
func TypeMismatch(path, want string, got jsonlex.Kind) *Error {
	return Invalid(path, "invalid_type", "%s", jsonlex.Path(path).Mismatch(want, got))
}
