package api

import (
	"context"
	"net/http"
	"os"
	"time"

	"flywheel/internal/basemodels"
	"flywheel/internal/httpx"
)

// minFreeBytes is the free space under which the storage check fails.
const minFreeBytes = 256 << 20

func (s *Server) registerHealth() {
	s.public.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": s.cfg.Version})
	})
	s.public.HandleFunc("GET /v1/system-check", s.systemCheck)
}

// systemCheck reports the health of the service's dependencies; 503 when
// any check fails.
func (s *Server) systemCheck(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	ok := true

	db := map[string]any{"ok": true, "latency_ms": 0.0, "error": nil}
	t0 := time.Now()
	if err := s.st.Ping(ctx); err != nil {
		db["ok"], db["error"], ok = false, "database did not answer a ping", false
		s.log.Error("system check: database", "err", err)
	}
	db["latency_ms"] = float64(time.Since(t0).Microseconds()) / 1000

	queue := map[string]any{"ok": true}
	if qs, err := s.st.QueueStats(ctx); err != nil {
		queue["ok"], queue["error"], ok = false, "queue state is unreadable", false
	} else {
		age := 0.0
		if qs.OldestQueued != nil {
			age = time.Since(*qs.OldestQueued).Seconds()
		}
		queue["queued"], queue["running"], queue["oldest_queued_age_s"] = qs.Queued, qs.Running, age
	}

	// No server paths here: the route answers without a key.
	engine := map[string]any{"ok": true}
	if bases, err := basemodels.List(s.cfg.ModelsDir); err != nil {
		engine["ok"], engine["error"], ok = false, "models dir is not readable", false
	} else {
		engine["base_models"] = bases
	}

	storage := map[string]any{"ok": true}
	if st, err := os.Stat(s.cfg.DataDir); err != nil || !st.IsDir() {
		storage["ok"], storage["error"], ok = false, "data dir is missing", false
	} else if free, err := freeBytes(s.cfg.DataDir); err == nil {
		storage["free_bytes"] = free
		if free < minFreeBytes {
			storage["ok"], storage["error"], ok = false, "less than 256 MiB free in the data dir", false
		}
	}

	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	httpx.WriteJSON(w, status, map[string]any{
		"api": true, "ok": ok, "version": s.cfg.Version, "uptime_s": int(time.Since(s.started).Seconds()),
		"database": db, "queue": queue, "engine": engine, "storage": storage,
	})
}
