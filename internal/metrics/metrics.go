// Package metrics defines the manager's Prometheus metrics, registered with controller-runtime's registry.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// Controller holds the controller's metrics.
type Controller struct {
	readySeconds   prometheus.Histogram
	sandboxSeconds *prometheus.CounterVec
}

// NewController creates the controller's metrics and registers them, plus a collector that counts sandboxes
// by phase from the reader (the manager's cache) at scrape time, so the gauge is right after a restart.
func NewController(reg prometheus.Registerer, reader client.Reader) (*Controller, error) {
	m := &Controller{
		readySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_sandbox_ready_seconds",
			Help:    "Time from a Sandbox's creation until it is first Ready (pod running, isolation proven).",
			Buckets: []float64{0.5, 1, 1.5, 2, 3, 5, 8, 13, 21, 34, 60, 120},
		}),
		sandboxSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_seconds_total",
			Help: "Sandbox-seconds used by deleted sandboxes, from their start to their deletion, by namespace and size.",
		}, []string{"namespace", "size"}),
	}
	for _, c := range []prometheus.Collector{m.readySeconds, m.sandboxSeconds, &phaseCollector{reader: reader}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObserveReady records how long a sandbox took to become Ready.
func (m *Controller) ObserveReady(d time.Duration) { m.readySeconds.Observe(d.Seconds()) }

// AddUsage adds a deleted sandbox's sandbox-seconds.
func (m *Controller) AddUsage(namespace, size string, seconds int64) {
	m.sandboxSeconds.WithLabelValues(namespace, size).Add(float64(seconds))
}

var phaseDesc = prometheus.NewDesc("airlock_sandboxes", "Sandboxes by phase.", []string{"phase"}, nil)

// phaseCollector counts sandboxes by phase when scraped.
type phaseCollector struct{ reader client.Reader }

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- phaseDesc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list airlockv1.SandboxList
	if err := c.reader.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "counting sandboxes for metrics")
		return
	}
	counts := map[airlockv1.SandboxPhase]int{
		airlockv1.PhasePending: 0, airlockv1.PhaseReady: 0, airlockv1.PhaseExpired: 0,
		airlockv1.PhaseTerminating: 0, airlockv1.PhaseFailed: 0,
	}
	for i := range list.Items {
		p := list.Items[i].Status.Phase
		if p == "" {
			p = airlockv1.PhasePending
		}
		counts[p]++
	}
	for p, n := range counts {
		ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, float64(n), string(p))
	}
}
