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

	"airlock.dev/airlock/internal/exec"
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

// Two gateways behind one Service, each counting the Service's ready endpoints: together they admit the
// tenant's limit, not twice it, and the share follows the endpoints as they change.
func TestIntegrationExecLimitHoldsAcrossReplicas(t *testing.T) {
	const limit = 4
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(startEnv(t))
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "airlock-gw-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice, err := cs.DiscoveryV1().EndpointSlices(ns.Name).Create(ctx, gatewaySlice(ns.Name, true, true), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var counters []*ReplicaCounter
	var gws []*gw
	for i := range 2 {
		rc, err := WatchReplicas(ctx, cs, ns.Name, "gw", testr.New(t).WithValues("replica", i))
		if err != nil {
			t.Fatal(err)
		}
		if rc.Count() != 2 {
			t.Fatalf("replicas counted %d, want 2", rc.Count())
		}
		counters = append(counters, rc)
		gws = append(gws, newGateway(t, func(o *Options) {
			o.MaxExecsPerTenant, o.Replicas = limit, rc.Count
			if i > 0 { // the same key Secrets and the same sandboxes, as two pods of one Deployment see
				o.Auth = gws[0].srv.opts.Auth
				engine, err := exec.New(gws[0].exec.RESTConfig(), exec.Options{})
				if err != nil {
					t.Fatal(err)
				}
				o.Engine = engine
			}
		}))
	}
	tenant, key := gws[0].tenant(t, 20)
	id := gws[0].readySandbox(t, tenant, t.TempDir())
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
	if ran, refused := flood(limit, gws...); ran != limit || refused != limit {
		t.Fatalf("2 replicas, per-tenant limit %d, %d calls to each: %d ran and %d were refused, want %d and %d",
			limit, limit, ran, refused, limit, limit)
	}
	// One endpoint turns unready (a pod stopping): the replica left takes the whole limit.
	slice.Endpoints[1].Conditions.Ready = ptr.To(false)
	if _, err := cs.DiscoveryV1().EndpointSlices(ns.Name).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return counters[0].Count() == 1 })
	if ran, refused := flood(limit+1, gws[0]); ran != limit || refused != 1 {
		t.Fatalf("1 ready replica, %d calls: %d ran and %d were refused, want %d and 1", limit+1, ran, refused, limit)
	}
}
