package httpx

import (
	"errors"
	"io"
	"net/http"
)

// The server's one body limit is the middleware's (api.Config.MaxBodyBytes,
// flag --max-body-bytes): it wraps every request body in an
// http.MaxBytesReader before any handler runs. The readers here add no
// limit of their own; a body over it fails with *http.MaxBytesError, which
// they answer 413.

// FlushEvery is how much of a body ReadBody accumulates before handing it
// on (to a file being written, to validation running beside the read).
const FlushEvery = 1 << 20

// firstBodyBuffer is the buffer a body with a Content-Length starts in.
const firstBodyBuffer = 64 << 10

// ReadBody reads the whole request body. When sink is not nil it gets each
// filled megabyte as it arrives (and the rest at the end), so the body can
// be written to disk while it is still being read. When Content-Length is
// known the buffer grows geometrically as bytes arrive up to exactly that
// size (GrowBody), so an announced body that never comes costs nothing.
// Errors are *Error: 413 over the server's limit, 400 for a body cut short
// or unreadable.
func ReadBody(r *http.Request, sink func([]byte)) ([]byte, error) {
	if r.ContentLength <= 0 {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, bodyError(err)
		}
		if sink != nil {
			sink(b)
		}
		return b, nil
	}
	if sink == nil {
		sink = func([]byte) {}
	}
	buf, off, err := GrowBody(r.Body, r.ContentLength, sink)
	if err != nil {
		return nil, err
	}
	if err := FillBody(r.Body, buf, off, func(from, to int) { sink(buf[from:to]) }); err != nil {
		return nil, err
	}
	return buf, nil
}

// GrowBody reads the start of a body of the announced size into a buffer
// that doubles as bytes arrive, until the buffer has the announced size: it
// returns that buffer and how much of it is filled (at least an eighth).
// Memory follows what the client sent (8x at most), never what it
// announced. sink gets every FlushEvery bytes as in FillBody. Errors are
// as ReadBody's.
func GrowBody(body io.Reader, size int64, sink func([]byte)) ([]byte, int, error) {
	buf := make([]byte, min(size, firstBodyBuffer))
	off, done := 0, 0
	for {
		if off == len(buf) {
			if int64(len(buf)) == size {
				break
			}
			// Double, or take the announced size once an eighth of it
			// has arrived: at most 8x what arrived is held, and the
			// copies add up to a quarter of the body.
			n := 2 * int64(len(buf))
			if int64(len(buf)) >= size/8 {
				n = size
			}
			next := make([]byte, min(size, n))
			copy(next, buf[:off])
			buf = next
			if int64(len(buf)) == size {
				break
			}
		}
		n, err := body.Read(buf[off:])
		off += n
		if off-done >= FlushEvery {
			sink(buf[done:off])
			done = off
		}
		if int64(off) == size {
			break
		}
		if err == io.EOF {
			return nil, 0, shortBody()
		}
		if err != nil {
			return nil, 0, bodyError(err)
		}
	}
	if done < off {
		sink(buf[done:off])
	}
	return buf, off, nil
}

// FillBody reads body into buf[off:], calling flushed(from, to) each time
// at least FlushEvery more bytes have arrived and once at the end, so that
// buf[:to] is complete when it is called. Errors are as ReadBody's.
func FillBody(body io.Reader, buf []byte, off int, flushed func(from, to int)) error {
	done := off
	for off < len(buf) {
		n, err := body.Read(buf[off:min(off+FlushEvery, len(buf))])
		off += n
		if off-done >= FlushEvery || off == len(buf) {
			flushed(done, off)
			done = off
		}
		if err == io.EOF && off < len(buf) {
			return shortBody()
		}
		if err != nil && err != io.EOF {
			return bodyError(err)
		}
	}
	return nil
}

func shortBody() error {
	return Invalid("", "invalid_json", "request body is shorter than its Content-Length")
}

// bodyError is the answer to a failed body read: 413 over the server's
// limit, else 400 (the client cut the body short or stalled past the
// server's body read timeout).
func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return AsError(err)
	}
	return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "could not read the request body"}
}
