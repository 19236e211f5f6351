package egressproxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus metrics, per sandbox.
type Metrics struct {
	connections *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	unknown     prometheus.Counter
	limited     prometheus.Counter
	busy        prometheus.Counter
	displaced   prometheus.Counter
	open        prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_egress_connections_total",
			Help: "Connections Restricted sandboxes asked the egress proxy for, by sandbox and verdict (allowed, denied).",
		}, []string{"namespace", "sandbox", "verdict"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_egress_bytes_total",
			Help: "Bytes the egress proxy carried for each sandbox: sent (by the sandbox) and received (by it).",
		}, []string{"namespace", "sandbox", "direction"}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_egress_unknown_callers_total",
			Help: "Requests refused because their source address is no Restricted sandbox's pod.",
		}),
		limited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_egress_connection_limit_refusals_total",
			Help: "Connections refused because their source already had the per-sandbox maximum open.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_egress_connection_cap_refusals_total",
			Help: "Connections refused because the proxy was serving its maximum of connections (--max-connections).",
		}),
		displaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_egress_displaced_connections_total",
			Help: "Connections closed before sending a request, at the maximum of connections, to serve a newer one.",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "airlock_egress_open_connections",
			Help: "Connections the proxy is serving.",
		}),
	}
	for _, c := range []prometheus.Collector{m.connections, m.bytes, m.unknown, m.limited, m.busy, m.displaced, m.open} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// The LimitListener's counts; a nil *Metrics counts nothing.

func (m *Metrics) limitedPerSource() {
	if m != nil {
		m.limited.Inc()
	}
}

func (m *Metrics) limitedTotal() {
	if m != nil {
		m.busy.Inc()
	}
}

func (m *Metrics) displacedOne() {
	if m != nil {
		m.displaced.Inc()
	}
}

func (m *Metrics) setOpen(n int) {
	if m != nil {
		m.open.Set(float64(n))
	}
}

// Forget drops a deleted sandbox's series, so their number follows the live sandboxes.
func (m *Metrics) Forget(namespace, name string) {
	labels := prometheus.Labels{"namespace": namespace, "sandbox": name}
	m.connections.DeletePartialMatch(labels)
	m.bytes.DeletePartialMatch(labels)
}
