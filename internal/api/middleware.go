package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// writeError writes err in the envelope of the request's route group
// (httpx.Group, chosen where the route is registered); OpenAI's when the
// request did not come through the middleware.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	g := httpx.Public
	if info, ok := r.Context().Value(infoKey{}).(*reqInfo); ok {
		g = info.group
	}
	g.WriteError(w, err)
}

// statusWriter records the status and size of a response. It unwraps to
// the underlying writer so http.ResponseController (flush for SSE,
// deadlines) keeps working.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// reqInfo is filled in as the request travels down the middleware.
type reqInfo struct {
	user  string
	group httpx.Group // the route's group (its auth and error envelope)
}

type infoKey struct{}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// middleware wraps the mux: request id, logging, metrics, recovery, body
// limit and authentication, in that order.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = uuid.Must(uuid.NewV7()).String()
		}
		w.Header().Set("X-Request-Id", id)
		route, group := s.rt.Lookup(r)
		info := &reqInfo{group: group}
		ctx := httpx.WithRequestID(r.Context(), id)
		ctx = context.WithValue(ctx, infoKey{}, info)
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}
		if route == "" || route == "/" {
			route = "unmatched"
		}
		s.metrics.inflight.Inc()
		defer func() {
			s.metrics.inflight.Dec()
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic serving request", "request_id", id, "route", route, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if sw.status == 0 {
					writeError(sw, r, &httpx.Error{Status: http.StatusInternalServerError, Message: "internal server error", Code: "internal_error"})
				}
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			method := methodLabel(r.Method)
			s.metrics.requests.WithLabelValues(method, route, codeLabel(status)).Inc()
			s.metrics.latency.WithLabelValues(method, route).Observe(d.Seconds())
			s.log.LogAttrs(r.Context(), levelFor(status), "http request",
				slogStr("request_id", id), slogStr("method", r.Method), slogStr("route", route),
				slogStr("path", r.URL.Path), slogInt("status", status), slogDur("latency", d),
				slogInt64("bytes", sw.bytes), slogStr("user", info.user))
		}()
		if r.ContentLength > s.cfg.MaxBodyBytes {
			writeError(sw, r, &httpx.Error{Status: http.StatusRequestEntityTooLarge,
				Message: fmt.Sprintf("request body of %d bytes exceeds the limit of %d bytes", r.ContentLength, s.cfg.MaxBodyBytes),
				Code:    "body_too_large"})
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = newProgressBody(sw, r.Body, r.ContentLength, s.cfg.BodyReadTimeout)
			r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
		}
		switch mode := group.Auth; mode {
		case httpx.AuthNone:
		case httpx.AuthUndeclared:
			// A route mounted without a group: denied, never public by accident.
			s.log.Error("route declares no group; denied", "request_id", id, "route", route)
			writeError(sw, r, unauthorized("this route declares no authentication; it is denied"))
			return
		default:
			p, err := s.authenticate(r, mode)
			if err != nil {
				if mode == httpx.AuthBasicBearer {
					sw.Header().Set("WWW-Authenticate", `Basic realm="flywheel"`)
				} else {
					sw.Header().Set("WWW-Authenticate", `Bearer realm="flywheel"`)
				}
				writeError(sw, r, err)
				return
			}
			info.user = p.UserName
			r = r.WithContext(auth.WithPrincipal(r.Context(), p))
		}
		next.ServeHTTP(sw, r)
	})
}

// authenticate resolves the request's API key.
func (s *Server) authenticate(r *http.Request, mode httpx.Auth) (*auth.Principal, error) {
	h := r.Header.Get("Authorization")
	var key string
	scheme, rest, _ := strings.Cut(h, " ")
	switch {
	case h == "":
		if mode == httpx.AuthBasicBearer {
			return nil, unauthorized("missing credentials: send Authorization: Basic base64(user:API key)")
		}
		return nil, unauthorized("missing API key: send Authorization: Bearer <API key>")
	case strings.EqualFold(scheme, "Bearer"):
		key = strings.TrimSpace(rest)
	case strings.EqualFold(scheme, "Basic") && mode == httpx.AuthBasicBearer:
		_, pw, ok := r.BasicAuth()
		if !ok {
			return nil, unauthorized("malformed Basic credentials")
		}
		key = pw
	default:
		return nil, unauthorized("unsupported Authorization scheme; send Authorization: Bearer <API key>")
	}
	p, err := s.auth.get(r.Context(), key, s.st)
	if err != nil {
		if errors.Is(err, store.ErrUnauthorized) {
			return nil, unauthorized("invalid API key")
		}
		s.log.Error("authenticate", "request_id", httpx.RequestID(r.Context()), "err", err)
		return nil, &httpx.Error{Status: http.StatusServiceUnavailable, Message: "authentication is temporarily unavailable", Code: "unavailable"}
	}
	return p, nil
}

func unauthorized(msg string) error {
	return &httpx.Error{Status: http.StatusUnauthorized, Message: msg, Code: "invalid_api_key"}
}

// authCache keeps resolved keys for a short time so that hot paths (chat
// completions) do not hit the database on every request. Revocation takes
// effect within the TTL.
type authCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[32]byte]authEntry
}

type authEntry struct {
	p       *auth.Principal
	expires time.Time
}

func newAuthCache(ttl time.Duration) *authCache {
	return &authCache{ttl: ttl, m: map[[32]byte]authEntry{}}
}

func (c *authCache) get(ctx context.Context, key string, st store.Keys) (*auth.Principal, error) {
	if c.ttl < 0 {
		return st.Authenticate(ctx, key)
	}
	h := sha256.Sum256([]byte(key))
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[h]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.p, nil
	}
	p, err := st.Authenticate(ctx, key)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) > 10000 {
		clear(c.m)
	}
	c.m[h] = authEntry{p: p, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	return p, nil
}

// progressBody holds a request body to a progress deadline rather than a total
// one: the connection's read deadline is BodyReadTimeout from the last read
// that brought bytes, so a slow but live upload of any size goes on while a
// stalled one fails (and its connection is closed) after BodyReadTimeout.
// The deadline is set before the handler runs, so a body nobody reads (a
// request refused for its key) cannot hold the connection either, and is
// cleared once the body is complete, so a long response (an SSE stream) is
// not cut.
type progressBody struct {
	body      io.ReadCloser
	rc        *http.ResponseController
	timeout   time.Duration
	remaining int64 // bytes still announced; -1 when unknown
	last      time.Time
	cleared   bool
}

func newProgressBody(w http.ResponseWriter, body io.ReadCloser, contentLength int64, timeout time.Duration) io.ReadCloser {
	b := &progressBody{body: body, rc: http.NewResponseController(w), timeout: timeout, remaining: contentLength, last: time.Now()}
	if contentLength < 0 {
		b.remaining = -1
	}
	if b.rc.SetReadDeadline(b.last.Add(timeout)) != nil {
		return body // not a net.Conn underneath (a test recorder): nothing to bound
	}
	return b
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 && b.remaining > 0 {
		b.remaining -= int64(n)
	}
	switch {
	case err != nil || b.remaining == 0:
		b.clear()
	case n > 0:
		// Extend the deadline; at most every timeout/8 to keep reads cheap.
		if now := time.Now(); now.Sub(b.last) > b.timeout/8 {
			b.last = now
			_ = b.rc.SetReadDeadline(now.Add(b.timeout))
		}
	}
	return n, err
}

func (b *progressBody) clear() {
	if !b.cleared {
		b.cleared = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

func (b *progressBody) Close() error { return b.body.Close() }
