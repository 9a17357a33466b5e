package serve

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descActive  = prometheus.NewDesc("flywheel_serve_active_sequences", "Sequences in the running batch of a base model.", []string{"model"}, nil)
	descQueued  = prometheus.NewDesc("flywheel_serve_queued_requests", "Requests waiting for a batch slot.", []string{"model"}, nil)
	descSteps   = prometheus.NewDesc("flywheel_serve_steps_total", "Batched forward steps run.", []string{"model"}, nil)
	descGen     = prometheus.NewDesc("flywheel_serve_generated_tokens_total", "Tokens sampled.", []string{"model"}, nil)
	descPrompt  = prometheus.NewDesc("flywheel_serve_prompt_tokens_total", "Prompt tokens prefilled (once per request; the other choices of n > 1 clone the prefilled prompt).", []string{"model"}, nil)
	descForward = prometheus.NewDesc("flywheel_serve_forward_seconds_total", "Time in engine forward passes.", []string{"model"}, nil)
	descAdapter = prometheus.NewDesc("flywheel_serve_adapter_loads_total", "LoRA adapters loaded from disk (cache misses).", nil, nil)
)

// Describe implements prometheus.Collector, so a Server can be registered
// with the service's metrics registry.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descQueued, descSteps, descGen, descPrompt, descForward, descAdapter} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	ms := make([]*lmodel, 0, len(s.models))
	for _, m := range s.models {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	for _, m := range ms {
		st := m.sched.Stats()
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(st.Active), m.id)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.Queued), m.id)
		ch <- prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(st.Steps), m.id)
		ch <- prometheus.MustNewConstMetric(descGen, prometheus.CounterValue, float64(st.GenTokens), m.id)
		ch <- prometheus.MustNewConstMetric(descPrompt, prometheus.CounterValue, float64(st.PromptTokens), m.id)
		ch <- prometheus.MustNewConstMetric(descForward, prometheus.CounterValue, st.Forward.Seconds(), m.id)
	}
	ch <- prometheus.MustNewConstMetric(descAdapter, prometheus.CounterValue, float64(s.adapters.Loads()))
}

var _ prometheus.Collector = (*Server)(nil)
