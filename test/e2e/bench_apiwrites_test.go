package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// apiWrites reads the API server's count of write requests (create, update, patch, delete) so far, by
// resource[/subresource], from its own apiserver_request_total: the difference over a round says which
// writes the round cost and whose they were.
func apiWrites(ctx context.Context) (map[string]float64, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	fam, ok := families["apiserver_request_total"]
	if !ok {
		return nil, fmt.Errorf("the API server's metrics have no apiserver_request_total")
	}
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		key := l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// writesBetween formats after - before, largest first: "pods 20, sandboxes/status 20, ...".
func writesBetween(before, after map[string]float64) string {
	diff := map[string]float64{}
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			diff[k] = d
			total += d
		}
	}
	keys := slices.SortedFunc(maps.Keys(diff), func(a, b string) int {
		if diff[a] != diff[b] {
			return int(diff[b] - diff[a])
		}
		return strings.Compare(a, b)
	})
	parts := []string{fmt.Sprintf("%.0f in all", total)}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, diff[k]))
	}
	return strings.Join(parts, ", ")
}
