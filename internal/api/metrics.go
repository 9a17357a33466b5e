package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"flywheel/internal/store"
)

// metrics are the server's Prometheus metrics.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inflight prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry, st store.Jobs) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flywheel_http_requests_total",
			Help: "HTTP requests served, by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "flywheel_http_request_duration_seconds",
			Help:    "HTTP request latency, by method and route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method", "route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flywheel_http_requests_in_flight",
			Help: "HTTP requests being served.",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.inflight, &jobCollector{st: st})
	return m
}

// methodLabel bounds the method label to the methods HTTP defines: anything
// else (a client can send any token) is "other", so invented methods add no
// series. The route label is already bounded (a mux pattern or "unmatched"),
// and the code label is a status code the server wrote.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "other"
}

// codeLabel bounds the status code label to 100..599 ("other" otherwise).
func codeLabel(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status)
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// jobCollector reads queue depth and jobs by status from the store at
// scrape time, so the figures are right across restarts.
type jobCollector struct {
	st store.Jobs
}

var (
	descJobs = prometheus.NewDesc("flywheel_jobs", "Training jobs by status.", []string{"status"}, nil)
	descQ    = prometheus.NewDesc("flywheel_queue_depth", "Training jobs waiting in the queue (QUEUED).", nil, nil)
	descAge  = prometheus.NewDesc("flywheel_queue_oldest_age_seconds", "Age of the oldest queued training job (0 when none).", nil, nil)
)

func (c *jobCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descJobs
	ch <- descQ
	ch <- descAge
}

func (c *jobCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if counts, err := c.st.JobCounts(ctx); err == nil {
		for st, n := range counts {
			ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n), string(st))
		}
	}
	if qs, err := c.st.QueueStats(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(descQ, prometheus.GaugeValue, float64(qs.Queued))
		age := 0.0
		if qs.OldestQueued != nil {
			age = time.Since(*qs.OldestQueued).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, age)
	}
}

func levelFor(status int) slog.Level {
	switch {
	case status >= 500:
		return slog.LevelError
	case status >= 400:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

func slogStr(k, v string) slog.Attr               { return slog.String(k, v) }
func slogInt(k string, v int) slog.Attr           { return slog.Int(k, v) }
func slogInt64(k string, v int64) slog.Attr       { return slog.Int64(k, v) }
func slogDur(k string, v time.Duration) slog.Attr { return slog.Duration(k, v) }
