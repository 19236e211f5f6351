package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/controller"
)

func withRuntimeClass(name string) func(*airlockv1.Sandbox) {
	return func(s *airlockv1.Sandbox) { s.Spec.RuntimeClassName = ptr.To(name) }
}

// TestGVisorProvenByKernelLog: under gVisor as GKE Sandbox runs it (RuntimeClass gvisor-managed: handler gvisor,
// runsc without --gvisor-marker-file, hack/cluster/runsc-managed.toml) the default handler allowlist accepts
// the class, and PID 1 proves gVisor by the boot lines syslog(2) answers with: status.isolation gvisor, method
// kernel-log, while the marker is absent inside.
func TestGVisorProvenByKernelLog(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "klog", withRuntimeClass("gvisor-managed"))
	s := waitReady(t, ns, "klog")
	ev := s.Status.IsolationEvidence
	if s.Status.Isolation != airlockv1.IsolationGVisor || s.Status.RuntimeHandler != "gvisor" || ev == nil ||
		ev.Method != airlockv1.MethodKernelLog || ev.PodKernel == ev.NodeKernel {
		t.Fatalf("want isolation gvisor under handler gvisor, proven by the kernel log on a kernel not the node's: isolation %q handler %q evidence %+v",
			s.Status.Isolation, s.Status.RuntimeHandler, ev)
	}
	if res := sh(t, ns, "klog", "cat /proc/gvisor/kernel_is_gvisor", 30*time.Second); res.ExitCode == 0 {
		t.Errorf("the marker exists under runsc-managed.toml (%q): this runtime does not play a platform without it", res.Stdout)
	}
	t.Logf("isolation %s by %s; pod kernel %s, node kernel %s", s.Status.Isolation, ev.Method, ev.PodKernel, ev.NodeKernel)
}

// TestUnverifiedIsolation: under gVisor that shows nothing a sandbox can prove it by (RuntimeClass
// gvisor-seccomp: no marker, and the pod's RuntimeDefault seccomp profile applied inside, which refuses
// syslog(2)), the sandbox fails with IsolationUnverified and says what PID 1 looked for; once the operator
// allows unverified isolation a new one runs and says isolation unverified.
func TestUnverifiedIsolation(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "unproven", withRuntimeClass("gvisor-seccomp"))
	eventually(t, readyTimeout, "refused as unverified", func() error {
		s, err := getSandbox(ns, "unproven")
		if err != nil {
			return err
		}
		ev := s.Status.IsolationEvidence
		if s.Status.Phase != airlockv1.PhaseFailed || conditionStatus(s, airlockv1.ConditionReady) != "False/"+controller.ReasonIsolationUnverified ||
			s.Status.Isolation != airlockv1.IsolationUnverified || ev == nil || !strings.Contains(ev.Unverified, "syslog(2)") {
			return fmt.Errorf("%s; evidence %+v", describe(s), ev)
		}
		return nil
	})

	restartManager(t, "--allow-unverified-isolation")
	createSandbox(t, ns, "allowed", withRuntimeClass("gvisor-seccomp"))
	s := waitReady(t, ns, "allowed")
	if s.Status.Isolation != airlockv1.IsolationUnverified || s.Status.IsolationEvidence.PodKernel == s.Status.IsolationEvidence.NodeKernel {
		t.Fatalf("allowed: isolation %q evidence %+v", s.Status.Isolation, s.Status.IsolationEvidence)
	}
	if res := sh(t, ns, "allowed", "echo ok", 30*time.Second); strings.TrimSpace(res.Stdout) != "ok" {
		t.Errorf("a command in an allowed unverified sandbox: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
