package httpx

import (
	"context"
	"errors"
	"net/http"
)

// HandlerFunc is a handler that returns its error instead of writing it.
// GroupMux.Route mounts it through the one adapter that turns a returned
// error into an answer in the route group's envelope, so no handler
// chooses an envelope or a status for errors it did not make itself.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// ErrResponseStarted marks an error that happened after the response began
// (a streamed answer cut short by a failing query): nothing more can be
// written, so the adapter logs it and answers nothing. Wrap it:
// fmt.Errorf("%w: %v", httpx.ErrResponseStarted, err).
var ErrResponseStarted = errors.New("response already started")

type requestIDKey struct{}

// WithRequestID returns a context carrying the request id the server gave
// the request (its X-Request-Id).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id of the request being served ("" when
// it did not come through the server's middleware).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// adapt is the handler adapter: fn's error, passed through the group
// mux's domain mapping, becomes an *Error (AsError: anything unknown an
// opaque 500) written in the group's envelope; 5xx are logged with the
// request id. An error after the response started is only logged, and a
// request whose client went away (its context cancelled) gets no answer.
func (m *GroupMux) adapt(fn HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := fn(w, r)
		if err == nil {
			return
		}
		if m.mapErr != nil {
			err = m.mapErr(err)
		}
		log := m.rt.logger()
		switch {
		case errors.Is(err, ErrResponseStarted):
			log.Error("request failed after its response started", "request_id", RequestID(r.Context()), "route", r.Pattern, "err", err)
			return
		case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
			return // the client went away
		}
		e := AsError(err)
		if e.Status >= http.StatusInternalServerError {
			log.Error("request failed", "request_id", RequestID(r.Context()), "route", r.Pattern, "status", e.Status, "err", err)
		}
		m.g.WriteError(w, e)
	}
}
