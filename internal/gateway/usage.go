package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	toolscache "k8s.io/client-go/tools/cache"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// UsageCollector exports active sandboxes per tenant and sandbox-seconds per tenant and size, computed from
// Sandbox status (startedAt, usage) at scrape time. Seconds of deleted sandboxes are kept in a running total
// fed by the informer's delete events, so the counter never goes down while the gateway runs.
type UsageCollector struct {
	list func() []airlockv1.Sandbox
	now  func() time.Time

	mu     sync.Mutex
	closed map[[2]string]float64 // tenant, size -> seconds of deleted sandboxes
}

var (
	activeDesc  = prometheus.NewDesc("airlock_gateway_active_sandboxes", "Sandboxes that are pending or ready, by tenant.", []string{"tenant"}, nil)
	secondsDesc = prometheus.NewDesc("airlock_gateway_sandbox_seconds_total", "Sandbox-seconds (billed per started second) by tenant and size, from container start.", []string{"tenant", "size"}, nil)
)

// NewUsageCollector reads sandboxes with list (e.g. from an informer's store).
func NewUsageCollector(list func() []airlockv1.Sandbox) *UsageCollector {
	return &UsageCollector{list: list, now: time.Now, closed: map[[2]string]float64{}}
}

// EventHandler is to be added to the Sandbox informer: it banks the usage of deleted sandboxes.
func (u *UsageCollector) EventHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		sb, ok := obj.(*airlockv1.Sandbox)
		if !ok {
			return
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		u.closed[[2]string{sb.Namespace, sizeOf(sb)}] += float64(usageSeconds(sb, u.now()))
	}}
}

func sizeOf(sb *airlockv1.Sandbox) string {
	if sb.Status.Size != "" {
		return string(sb.Status.Size)
	}
	if sb.Spec.Size != "" {
		return string(sb.Spec.Size)
	}
	return "unknown"
}

// Describe implements prometheus.Collector.
func (u *UsageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- activeDesc
	ch <- secondsDesc
}

// Collect implements prometheus.Collector.
func (u *UsageCollector) Collect(ch chan<- prometheus.Metric) {
	now := u.now()
	active := map[string]float64{}
	u.mu.Lock()
	secs := make(map[[2]string]float64, len(u.closed))
	for k, v := range u.closed {
		secs[k] = v
	}
	u.mu.Unlock()
	for _, sb := range u.list() {
		if st := statusOf(&sb); st == "pending" || st == "ready" {
			active[sb.Namespace]++
		}
		secs[[2]string{sb.Namespace, sizeOf(&sb)}] += float64(usageSeconds(&sb, now))
	}
	for t, n := range active {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, n, t)
	}
	for k, v := range secs {
		ch <- prometheus.MustNewConstMetric(secondsDesc, prometheus.CounterValue, v, k[0], k[1])
	}
}
