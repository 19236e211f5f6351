package metrics

import "github.com/prometheus/client_golang/prometheus"

// Pool holds the metrics of warm pools.
type Pool struct {
	claims *prometheus.CounterVec
}

// Claim results, the values of the result label.
const (
	ClaimWarm = "warm"
	ClaimCold = "cold"
)

// NewPool creates the pool metrics and registers them.
func NewPool(reg prometheus.Registerer) (*Pool, error) {
	m := &Pool{claims: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "airlock_pool_claims_total",
		Help: "Sandboxes that named a pool, by namespace, pool and result: warm (a member was adopted) or cold (the pool was drained or did not fit; a pod was created).",
	}, []string{"namespace", "pool", "result"})}
	if err := reg.Register(m.claims); err != nil {
		return nil, err
	}
	return m, nil
}

// Claim counts one claim's result.
func (m *Pool) Claim(namespace, pool, result string) {
	m.claims.WithLabelValues(namespace, pool, result).Inc()
}
