package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// deletions records the etcd revision at which each pod and NetworkPolicy of a namespace was deleted, as the
// API server's watch reports it (the resourceVersion of the DELETED event). Revisions order the deletes on
// the server; the arrival times of two separate watch streams need not. The finalizer deletes the pod, waits
// until it is gone, and only then deletes the policy; the garbage collector alone (a broken finalizer) deletes
// both at once, and the policy, which has no grace period, goes first.
type deletions struct {
	mu       sync.Mutex
	pods     map[string]uint64
	policies map[string]uint64
	errs     []error
}

func watchDeletions(t *testing.T, ns string) *deletions {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("watch client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &deletions{pods: map[string]uint64{}, policies: map[string]uint64{}}
	var wg sync.WaitGroup
	for _, l := range []client.ObjectList{&corev1.PodList{}, &networkingv1.NetworkPolicyList{}} {
		w, err := wc.Watch(ctx, l, client.InNamespace(ns))
		if err != nil {
			cancel()
			t.Fatalf("watching %T: %v", l, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range w.ResultChan() {
				if ev.Type != watch.Deleted {
					continue
				}
				d.mu.Lock()
				switch o := ev.Object.(type) {
				case *corev1.Pod:
					d.record(d.pods, o.Name, o.ResourceVersion)
				case *networkingv1.NetworkPolicy:
					d.record(d.policies, o.Name, o.ResourceVersion)
				default:
					d.errs = append(d.errs, fmt.Errorf("unexpected watch object %T", ev.Object))
				}
				d.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return d
}

// record stores a delete's revision; mu is held.
func (d *deletions) record(m map[string]uint64, name, rv string) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		d.errs = append(d.errs, fmt.Errorf("%s: resourceVersion %q is not an etcd revision: %w", name, rv, err))
		return
	}
	m[name] = n
}

// podBeforePolicy checks, for name, that its pod was deleted (at an earlier revision) before its policy.
func (d *deletions) podBeforePolicy(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) > 0 {
		return d.errs[0]
	}
	pod, okPod := d.pods[name]
	np, okNP := d.policies[name]
	switch {
	case !okPod || !okNP:
		return fmt.Errorf("%s: deletion not seen yet (pod %v, policy %v)", name, okPod, okNP)
	case pod >= np:
		return fmt.Errorf("%s: policy deleted (revision %d) before its pod was gone (revision %d)", name, np, pod)
	}
	return nil
}

// sandboxEvents returns the Events with reason about sandbox name in ns (events.k8s.io, as the manager writes).
func sandboxEvents(ctx context.Context, ns, name, reason string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Sandbox" && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out, nil
}

// nodeArtifacts counts what a pod leaves on the node: its CRI pod sandboxes in ns, host-side veths on the pod
// bridge, and CNI network namespaces. Garbage collection of API objects removes none of these.
type nodeArtifacts struct {
	criPods []string
	veths   int
	netns   int
}

func (a nodeArtifacts) String() string {
	return fmt.Sprintf("%d CRI pod sandboxes %v, %d veths on the bridge, %d CNI netns", len(a.criPods), a.criPods, a.veths, a.netns)
}

func readNodeArtifacts(ns string) (nodeArtifacts, error) {
	var a nodeArtifacts
	out, err := exec.Command("crictl", "pods", "--namespace", ns, "-q").CombinedOutput()
	if err != nil {
		return a, fmt.Errorf("crictl pods: %v: %s", err, out)
	}
	a.criPods = strings.Fields(string(out))
	links, err := filepath.Glob("/sys/class/net/airlock0/brif/*")
	if err != nil {
		return a, err
	}
	a.veths = len(links)
	ns2, err := filepath.Glob("/run/netns/cni-*")
	if err != nil {
		return a, err
	}
	a.netns = len(ns2)
	if _, err := os.Stat("/sys/class/net/airlock0"); err != nil {
		return a, fmt.Errorf("the local cluster's pod bridge airlock0: %w", err)
	}
	return a, nil
}
