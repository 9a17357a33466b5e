package serve

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descActive  = prometheus.NewDesc("flywheel_serve_active_sequences", "Sequences in the running batch of a base model.", []string{"model"}, nil)
	descQueued  = prometheus.NewDesc("flywheel_serve_queued_requests", "Requests waiting for a batch slot.", []string{"model"}, nil)
	descSteps   = prometheus.NewDesc("flywheel_serve_steps_total", "Batched forward steps run.", []string{"model"}, nil)
	descGen     = prometheus.NewDesc("flywheel_serve_generated_tokens_total", "Tokens sampled.", []string{"model"}, nil)
	descPrompt  = prometheus.NewDesc("flywheel_serve_prompt_tokens_total", "Prompt tokens prefilled (once per request; the other choices of n > 1 clone the prefilled prompt; tokens taken from the prefix cache are not prefilled).", []string{"model"}, nil)
	descForward = prometheus.NewDesc("flywheel_serve_forward_seconds_total", "Time in engine forward passes.", []string{"model"}, nil)
	descAdapter = prometheus.NewDesc("flywheel_serve_adapter_loads_total", "LoRA adapters loaded from disk (cache misses).", nil, nil)

	descPrefixLookups = prometheus.NewDesc("flywheel_prefix_cache_lookups_total", "Requests whose prompt was looked up in the prefix cache.", []string{"model"}, nil)
	descPrefixHits    = prometheus.NewDesc("flywheel_prefix_cache_hits_total", "Requests that took at least one KV block of their prompt from the prefix cache.", []string{"model"}, nil)
	descPrefixTokens  = prometheus.NewDesc("flywheel_prefix_cache_hit_tokens_total", "Prompt tokens taken from the prefix cache instead of prefilled.", []string{"model"}, nil)
	descPrefixBytes   = prometheus.NewDesc("flywheel_prefix_cache_bytes", "Bytes of keys and values held by the prefix cache.", nil, nil)
	descPrefixBudget  = prometheus.NewDesc("flywheel_prefix_cache_budget_bytes", "The prefix cache's memory budget.", nil, nil)
	descPrefixEvicted = prometheus.NewDesc("flywheel_prefix_cache_evictions_total", "KV blocks evicted from the prefix cache to stay within its budget.", nil, nil)
)

// Describe implements prometheus.Collector, so a Server can be registered
// with the service's metrics registry.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descQueued, descSteps, descGen, descPrompt, descForward, descAdapter,
		descPrefixLookups, descPrefixHits, descPrefixTokens, descPrefixBytes, descPrefixBudget, descPrefixEvicted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	ms := make([]*servedModel, 0, len(s.models))
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
		if s.prefix != nil {
			ch <- prometheus.MustNewConstMetric(descPrefixLookups, prometheus.CounterValue, float64(st.PrefixLookups), m.id)
			ch <- prometheus.MustNewConstMetric(descPrefixHits, prometheus.CounterValue, float64(st.PrefixHits), m.id)
			ch <- prometheus.MustNewConstMetric(descPrefixTokens, prometheus.CounterValue, float64(st.PrefixHitTokens), m.id)
		}
	}
	ch <- prometheus.MustNewConstMetric(descAdapter, prometheus.CounterValue, float64(s.adapters.Loads()))
	if s.prefix != nil {
		ps := s.prefix.Stats()
		ch <- prometheus.MustNewConstMetric(descPrefixBytes, prometheus.GaugeValue, float64(ps.Bytes))
		ch <- prometheus.MustNewConstMetric(descPrefixBudget, prometheus.GaugeValue, float64(ps.Budget))
		ch <- prometheus.MustNewConstMetric(descPrefixEvicted, prometheus.CounterValue, float64(ps.Evictions))
	}
}

var _ prometheus.Collector = (*Server)(nil)
