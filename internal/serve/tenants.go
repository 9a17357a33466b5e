package serve

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// DefaultMaxInflightPerKey is how many inference requests one API key may have
// in flight at once when Options.MaxInflightPerKey is zero: twice the default
// batch, a quarter of the default queue, so a key that floods the server gets
// 429s before it fills the queue, while round-robin admission and the tenant
// share (infer.Options.TenantShare) keep others' first tokens prompt.
const DefaultMaxInflightPerKey = 64

// tenantOf names the tenant of a request for per-key limits and fair
// admission (infer.Request.Tenant): its API key, or its user without one.
func tenantOf(p *auth.Principal) string {
	if p.KeyID != "" {
		return "key:" + p.KeyID
	}
	return "user:" + p.UserID
}

// keyLimiter counts the inference requests in flight per tenant.
type keyLimiter struct {
	max int // 0: no limit
	mu  sync.Mutex
	n   map[string]int
}

// acquire takes a slot of tenant, or reports false at the limit.
func (l *keyLimiter) acquire(tenant string) bool {
	if l.max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[tenant] >= l.max {
		return false
	}
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[tenant]++
	return true
}

func (l *keyLimiter) release(tenant string) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[tenant]--; l.n[tenant] <= 0 {
		delete(l.n, tenant) // the map holds only tenants with requests in flight
	}
}

// perKey wraps an inference handler with the per-key limit: past
// Options.MaxInflightPerKey requests in flight (streams included, until they
// end) a key gets 429 rate_limit_exceeded with retry-after.
func (s *Server) perKey(h httpx.HandlerFunc) httpx.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := httpx.Principal(r)
		if err != nil {
			return err
		}
		tenant := tenantOf(p)
		if !s.inflight.acquire(tenant) {
			secs := int(math.Ceil(s.opts.RetryAfter.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
			return &httpx.Error{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded",
				Message: fmt.Sprintf("this API key has %d inference requests in flight, the most allowed (--max-inflight-per-key); retry when one ends", s.inflight.max)}
		}
		defer s.inflight.release(tenant)
		return h(w, r)
	}
}
