package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/controller"
)

// TestGVisorIsolationIsProvenFromInside: a gVisor sandbox's status says gvisor because its PID 1 saw gVisor's
// marker before it served any command, and its network gate names the node's kubelet port, the port the Node
// reports listening. Without runsc's --gvisor-marker-file the sandbox would fail with RuntimeMismatch instead
// (TestGateChecksTheRuntime and TestIntegrationRuntimeEvidenceIsChecked cover that case).
func TestGVisorIsolationIsProvenFromInside(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "proof")
	s := waitReady(t, ns, "proof")
	ev := s.Status.IsolationEvidence
	if s.Status.Isolation != airlockv1.IsolationGVisor || s.Status.RuntimeHandler != "runsc" || ev == nil || ev.Proven != airlockv1.IsolationGVisor {
		t.Fatalf("want isolation gvisor under handler runsc with the marker seen: isolation %q handler %q evidence %+v",
			s.Status.Isolation, s.Status.RuntimeHandler, ev)
	}
	ctx := context.Background()
	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "proof"}, pod); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	if ev.NodeKernel != node.Status.NodeInfo.KernelVersion {
		t.Errorf("evidence node kernel %q, Node says %q", ev.NodeKernel, node.Status.NodeInfo.KernelVersion)
	}
	if res := sh(t, ns, "proof", "uname -r", 30*time.Second); strings.TrimSpace(res.Stdout) == ev.NodeKernel || res.ExitCode != 0 {
		t.Errorf("uname -r inside is %q (exit %d), the node's is %q: want gVisor's own", res.Stdout, res.ExitCode, ev.NodeKernel)
	}
	want := net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)))
	if ev.GateTarget != want || !strings.Contains(meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionNetworkIsolated).Message, want) {
		t.Errorf("gate target %q, want the node's kubelet port %s named in NetworkIsolated: %s", ev.GateTarget, want, describe(s))
	}
	t.Logf("isolation %s (node kernel %s); gate target %s", s.Status.Isolation, ev.NodeKernel, ev.GateTarget)
	// The same marker, seen by a command.
	if res := sh(t, ns, "proof", "cat /proc/gvisor/kernel_is_gvisor", 30*time.Second); strings.TrimSpace(res.Stdout) != "gvisor" {
		t.Errorf("marker inside: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestRuncIsRefusedUnlessAllowed: runc's handler is not isolating, so a runc sandbox gets no pod until the
// operator allows non-isolating runtimes; then it runs on the node's own kernel and says isolation none; when
// the allowance is withdrawn it fails. Verified on the local cluster: with the handler check in the
// controller's resolve step removed, it fails at "a refused sandbox has a pod".
func TestRuncIsRefusedUnlessAllowed(t *testing.T) {
	ns := newTenant(t)
	ctx := context.Background()
	createSandbox(t, ns, "plain", withTemplate("python-node-runc"))
	eventually(t, 30*time.Second, "refused as not isolating", func() error {
		s, err := getSandbox(ns, "plain")
		if err != nil {
			return err
		}
		if got := conditionStatus(s, airlockv1.ConditionReady); got != "False/"+controller.ReasonRuntimeNotIsolating {
			return fmt.Errorf("Ready %s", got)
		}
		return nil
	})
	// Not even for a moment: no pod was created.
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plain"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused sandbox has a pod (err %v)", err)
	}

	restartManager(t, "--allow-unisolated-runtimes")
	s := waitReady(t, ns, "plain")
	host, _ := exec.Command("uname", "-r").Output()
	ev := s.Status.IsolationEvidence
	if s.Status.Isolation != airlockv1.IsolationNone || s.Status.RuntimeHandler != "runc" || ev == nil ||
		ev.NodeKernel != strings.TrimSpace(string(host)) || ev.Proven != airlockv1.IsolationNone {
		t.Fatalf("allowed runc: want isolation none on the host's kernel %q: isolation %q handler %q evidence %+v",
			strings.TrimSpace(string(host)), s.Status.Isolation, s.Status.RuntimeHandler, ev)
	}
	if res := sh(t, ns, "plain", "uname -r", 30*time.Second); strings.TrimSpace(res.Stdout) != strings.TrimSpace(string(host)) {
		t.Errorf("under runc uname -r should be the host's %q, got %q", host, res.Stdout)
	}

	restartManager(t)
	eventually(t, 30*time.Second, "failed once non-isolating runtimes are no longer allowed", func() error {
		s, err := getSandbox(ns, "plain")
		if err != nil {
			return err
		}
		if s.Status.Phase != airlockv1.PhaseFailed || conditionStatus(s, airlockv1.ConditionReady) != "False/"+controller.ReasonRuntimeNotIsolating {
			return fmt.Errorf("%s", describe(s))
		}
		return nil
	})
}

// restartManager replaces the running manager by one with these extra flags; the suite's own is restored
// when the test ends.
func restartManager(tb testing.TB, extra ...string) {
	tb.Helper()
	mgr.stop()
	m, err := startManager(extra...)
	if err != nil {
		tb.Fatalf("restarting manager with %v: %v", extra, err)
	}
	mgr = m
	if len(extra) > 0 {
		tb.Cleanup(func() {
			if mgr != m {
				return // already replaced
			}
			mgr.stop()
			if mgr, err = startManager(); err != nil {
				tb.Errorf("restoring the manager: %v", err)
			}
		})
	}
}
