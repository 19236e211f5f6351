package gateway

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus metrics. Sandbox counts and usage come from UsageCollector.
type Metrics struct {
	reg          prometheus.Registerer
	execDuration *prometheus.HistogramVec
	execs        *prometheus.CounterVec
	outputBytes  *prometheus.CounterVec
	rejected     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_gateway_exec_duration_seconds",
			Help:    "Wall time of commands run through the gateway, by outcome.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"outcome"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_gateway_exec_total",
			Help: "Commands run through the gateway, by tenant and outcome (exited, timeout, signal, oom, output_limit, sandbox_lost).",
		}, []string{"tenant", "outcome"}),
		outputBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_gateway_exec_output_bytes_total",
			Help: "Output bytes commands produced (before truncation), by tenant and stream.",
		}, []string{"tenant", "stream"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_gateway_rejected_total",
			Help: "Requests refused by a limit, by tenant and reason (rate_limited, quota_exceeded, too_many_concurrent_execs, too_many_exec_streams, memory_budget_exceeded, gateway_busy).",
		}, []string{"tenant", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.execDuration, m.execs, m.outputBytes, m.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering gateway metrics: %w", err)
		}
	}
	return m, nil
}

// Register adds another collector (e.g. UsageCollector) to the gateway's registry.
func (m *Metrics) Register(c prometheus.Collector) error {
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("registering collector: %w", err)
	}
	return nil
}
