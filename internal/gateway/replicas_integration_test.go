package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"airlock.dev/airlock/internal/podexec"
)

// gatewaySlice is an EndpointSlice of Service gw in ns with one endpoint per ready flag, as the EndpointSlice
// controller (which envtest does not run) would write it for the gateway's pods.
func gatewaySlice(ns string, ready ...bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw-abcde",
		Labels: map[string]string{discoveryv1.LabelServiceName: "gw"}}, AddressType: discoveryv1.AddressTypeIPv4}
	for i, r := range ready {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(r)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("gw-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}})
	}
	return s
}

// replicaSet is two gateways behind one Service, each counting the Service's ready endpoints (an EndpointSlice
// with two, both ready), sharing the key Secrets and reaching the same sandboxes, as two pods of one Deployment
// do.
type replicaSet struct {
	gws      []*gw
	counters []*ReplicaCounter
	cs       kubernetes.Interface
	slice    *discoveryv1.EndpointSlice
}

func twoReplicas(t *testing.T, mutate func(*Options)) *replicaSet {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rs := &replicaSet{cs: kubernetes.NewForConfigOrDie(startEnv(t))}
	ns, err := rs.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "airlock-gw-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rs.slice, err = rs.cs.DiscoveryV1().EndpointSlices(ns.Name).Create(ctx, gatewaySlice(ns.Name, true, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		rc, err := WatchReplicas(ctx, rs.cs, ns.Name, "gw", testr.New(t).WithValues("replica", i))
		if err != nil {
			t.Fatal(err)
		}
		if rc.Count() != 2 {
			t.Fatalf("replicas counted %d, want 2", rc.Count())
		}
		rs.counters = append(rs.counters, rc)
		rs.gws = append(rs.gws, newGateway(t, func(o *Options) {
			mutate(o)
			o.Replicas = rc.Count
			if i > 0 { // the same key Secrets and the same sandboxes, as two pods of one Deployment see
				o.Auth = rs.gws[0].srv.opts.Auth
				engine, err := podexec.New(rs.gws[0].exec.RESTConfig(), podexec.Options{})
				if err != nil {
					t.Fatal(err)
				}
				o.Engine = engine
			}
		}))
	}
	return rs
}

// stopSecond marks the second endpoint unready (a pod stopping) and waits until the first replica counts one.
func (rs *replicaSet) stopSecond(t *testing.T) {
	rs.slice.Endpoints[1].Conditions.Ready = ptr.To(false)
	if _, err := rs.cs.DiscoveryV1().EndpointSlices(rs.slice.Namespace).Update(context.Background(), rs.slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return rs.counters[0].Count() == 1 })
}

// Two gateways behind one Service: together they admit the tenant's limit, not twice it, and the share follows
// the endpoints as they change.
func TestIntegrationExecLimitHoldsAcrossReplicas(t *testing.T) {
	const limit = 4
	rs := twoReplicas(t, func(o *Options) { o.MaxExecsPerTenant = limit })
	tenant, key := rs.gws[0].tenant(t, 20)
	id := rs.gws[0].readySandbox(t, tenant, t.TempDir())
	// flood sends n calls to each gateway at once; each call runs long enough for all to overlap.
	flood := func(n int, to ...*gw) (ran, refused int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, g := range to {
			for range n {
				wg.Go(func() {
					resp, raw, err := g.tryRaw(key, "POST", "/v1/sandboxes/"+id+"/exec", `{"command": "sleep 2"}`)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("exec: %v", err)
					case resp.StatusCode == 200:
						ran++
					case resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "" && strings.Contains(string(raw), CodeTooManyExecs):
						refused++
					default:
						t.Errorf("exec: %d %s", resp.StatusCode, raw)
					}
				})
			}
		}
		wg.Wait()
		return ran, refused
	}
	if ran, refused := flood(limit, rs.gws...); ran != limit || refused != limit {
		t.Fatalf("2 replicas, per-tenant limit %d, %d calls to each: %d ran and %d were refused, want %d and %d",
			limit, limit, ran, refused, limit, limit)
	}
	// One endpoint turns unready: the replica left takes the whole limit.
	rs.stopSecond(t)
	if ran, refused := flood(limit+1, rs.gws[0]); ran != limit || refused != 1 {
		t.Fatalf("1 ready replica, %d calls: %d ran and %d were refused, want %d and 1", limit+1, ran, refused, limit)
	}
}

// A key's create rate holds across replicas: two gateways admit its burst once between them, not once each, and
// the replica left alone admits the whole burst. Fails with a bucket per replica at the full rate: checked.
func TestIntegrationCreateRateHoldsAcrossReplicas(t *testing.T) {
	const burst = 4
	// A rate slow enough that no token comes back during the test.
	rs := twoReplicas(t, func(o *Options) { o.CreateRate, o.CreateBurst = 0.001, burst })
	tenant, _ := rs.gws[0].tenant(t, 20)
	// creates sends n creates to each gateway at once with key.
	creates := func(key string, n int, to ...*gw) (admitted, refused int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, g := range to {
			for range n {
				wg.Go(func() {
					resp, raw, err := g.tryRaw(key, "POST", "/v1/sandboxes", `{}`)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("create: %v", err)
					case resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "" && strings.Contains(string(raw), CodeRateLimited):
						refused++
					case resp.StatusCode < 300:
						admitted++
					default:
						t.Errorf("create: %d %s", resp.StatusCode, raw)
					}
				})
			}
		}
		wg.Wait()
		return admitted, refused
	}
	if admitted, refused := creates(rs.gws[0].key(t, tenant), burst, rs.gws...); admitted != burst || refused != burst {
		t.Fatalf("2 replicas, burst %d, %d creates to each: %d admitted and %d refused, want %d and %d",
			burst, burst, admitted, refused, burst, burst)
	}
	rs.stopSecond(t)
	if admitted, refused := creates(rs.gws[0].key(t, tenant), burst+1, rs.gws[0]); admitted != burst || refused != 1 {
		t.Fatalf("1 ready replica, burst %d, %d creates of a new key: %d admitted and %d refused, want %d and 1",
			burst, burst+1, admitted, refused, burst)
	}
}
