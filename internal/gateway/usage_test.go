package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

func TestUsageCollector(t *testing.T) {
	now := time.Unix(10_000, 0)
	started := metav1.NewTime(now.Add(-90*time.Second - 300*time.Millisecond))
	live := airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "t1"},
		Status: airlockv1.SandboxStatus{Phase: airlockv1.PhaseReady, Size: "small", StartedAt: &started}}
	pending := airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "t1"}}
	expired := airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "t2"},
		Status: airlockv1.SandboxStatus{Phase: airlockv1.PhaseExpired, Size: "large", StartedAt: &started, Usage: &airlockv1.SandboxUsage{SandboxSeconds: 60}}}
	items := []airlockv1.Sandbox{live, pending, expired}
	u := NewUsageCollector(func() []airlockv1.Sandbox { return items })
	u.now = func() time.Time { return now }

	// Deleting the expired sandbox moves its 60 s into the running total: the counter must not drop.
	u.EventHandler().OnDelete(&expired)
	items = items[:2]

	reg := prometheus.NewRegistry()
	reg.MustRegister(u)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	want := map[string]float64{
		"airlock_gateway_active_sandboxes{tenant=t1}":                   2,
		"airlock_gateway_sandbox_seconds_total{size=large,tenant=t2}":   60,
		"airlock_gateway_sandbox_seconds_total{size=small,tenant=t1}":   91, // 90.3 s, billed per started second
		"airlock_gateway_sandbox_seconds_total{size=unknown,tenant=t1}": 0,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
