// Package httpx holds what every handler group shares: the route groups
// (Routes, Group: each route's authentication and error envelope, declared
// where it is mounted), the one handler adapter (GroupMux.Route: a handler
// returns its error, the adapter answers it in the group's envelope), the
// one way to get the caller (Principal), the one body reader (ReadBody),
// JSON responses, the two error envelopes of the wire contract (OpenAI's
// under /v1, {"reason"} under the call store), and strict JSON decoding
// whose errors name the JSON path of the offending field.
package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"

	"flywheel/internal/store"
)

// WriteJSON writes v as a JSON response with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Error is an API error that knows its HTTP status and, for /v1 routes, the
// OpenAI envelope fields. Handlers return *Error values; the writers below
// render them in the envelope of the route group.
type Error struct {
	Status  int    // HTTP status
	Message string // human readable, never Go internals
	Type    string // OpenAI "type", e.g. "invalid_request_error"; derived from Status when empty
	Param   string // JSON path of the offending field, e.g. "trajectory_groups[3].trajectories[0].reward"
	Code    string // machine code, e.g. "invalid_type", "missing_field", "not_found"
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%s (param %s)", e.Message, e.Param)
	}
	return e.Message
}

// Errorf builds an Error with status and formatted message.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// Invalid is a 400 naming the JSON path param.
func Invalid(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Param: param, Code: code}
}

// NotFound is a 404 with the given message.
func NotFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf(format, args...), Code: "not_found"}
}

func typeFor(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusConflict:
		return "conflict_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// AsError converts any error to an *Error. Errors that are not *Error become
// an opaque 500 so internals never reach the client.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body exceeds the limit of %d bytes", mbe.Limit), Code: "body_too_large"}
	}
	if DiskFull(err) {
		return &Error{Status: http.StatusInsufficientStorage, Message: "the server's disk is full; nothing of this request was kept, retry once space is freed", Code: "insufficient_storage"}
	}
	if store.Unavailable(err) {
		return &Error{Status: http.StatusServiceUnavailable, Message: "the database is unavailable; retry shortly", Code: "unavailable"}
	}
	return &Error{Status: http.StatusInternalServerError, Message: "internal server error", Code: "internal_error"}
}

// DiskFull reports whether err says a disk is full: a write's ENOSPC or
// EDQUOT, SQLite's SQLITE_FULL ("database or disk is full") or PostgreSQL's
// disk_full (SQLSTATE 53100). Such a request is 507, not 500.
func DiskFull(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) && st.SQLState() == "53100" {
		return true
	}
	var coded interface{ Code() int } // modernc.org/sqlite's *Error
	return errors.As(err, &coded) && coded.Code()&0xff == 13 && strings.Contains(err.Error(), "full")
}

// WriteOpenAIError writes err in the OpenAI envelope used under /v1:
// {"error": {"message", "type", "param", "code"}}.
func WriteOpenAIError(w http.ResponseWriter, err error) {
	e := AsError(err)
	typ := e.Type
	if typ == "" {
		typ = typeFor(e.Status)
	}
	var param, code any
	if e.Param != "" {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	WriteJSON(w, e.Status, map[string]any{"error": map[string]any{
		"message": e.Message, "type": typ, "param": param, "code": code,
	}})
}

// WriteReason writes err as {"reason": "..."} used by the call-store routes:
// the message, after the field it names unless it starts with it already
// (TypeMismatch's "limit: expected an integer, got a number").
func WriteReason(w http.ResponseWriter, err error) {
	e := AsError(err)
	msg := e.Message
	if e.Param != "" && !strings.HasPrefix(msg, e.Param+": ") {
		msg = fmt.Sprintf("%s: %s", e.Param, e.Message)
	}
	WriteJSON(w, e.Status, map[string]any{"reason": msg})
}
