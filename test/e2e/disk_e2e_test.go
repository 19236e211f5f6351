package e2e

import (
	"strings"
	"testing"
	"time"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// TestDiskLimitFailsTheWriterNotTheSandbox: under gVisor /tmp and the working directory are in the container's
// root filesystem, whose overlay runsc sizes to the sandbox's disk limit (dev.gvisor.flag.overlay2, 1Gi for
// small). A 20 GB dd into either fails with ENOSPC at the limit, and the sandbox stays Ready with its earlier
// files and runs the next command; the kubelet does not evict it later either. Run once without the protection
// (the pod without the overlay annotation, the image with an empty /tmp): it failed, /tmp was runsc's own
// in-memory tmpfs; a 3 GB file in the emptyDir working directory got the pod evicted 12.7 s later.
func TestDiskLimitFailsTheWriterNotTheSandbox(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "disk", func(s *airlockv1.Sandbox) { s.Spec.Size = airlockv1.SizeSmall })
	waitReady(t, ns, "disk")
	if r := sh(t, ns, "disk", "echo kept > $HOME/state", 10*time.Second); r.Outcome != podexec.OutcomeExited || r.ExitCode != 0 {
		t.Fatalf("write state: %+v", r)
	}
	// On an empty /tmp runsc mounts its own tmpfs, in memory: the image's /tmp must keep it in the root overlay.
	if r := sh(t, ns, "disk", `awk '$5 == "/tmp"' /proc/self/mountinfo`, 10*time.Second); r.ExitCode != 0 || r.Stdout != "" {
		t.Fatalf("/tmp must not be a mount of its own: %+v", r)
	}
	for _, dir := range []string{"/tmp", "$HOME"} {
		start := time.Now()
		res := sh(t, ns, "disk", "dd if=/dev/zero of="+dir+"/big bs=1M count=20000", 2*time.Minute)
		took := time.Since(start)
		t.Logf("dd into %s: outcome=%s exit=%d in %v: %s", dir, res.Outcome, res.ExitCode, took, strings.TrimSpace(res.Stderr))
		if res.Outcome != podexec.OutcomeExited || res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") {
			t.Fatalf("dd into %s: want exit non-zero with ENOSPC, got %+v", dir, res)
		}
		if r := sh(t, ns, "disk", "cat $HOME/state && rm "+dir+"/big", 30*time.Second); r.ExitCode != 0 || r.Stdout != "kept\n" {
			t.Fatalf("after dd into %s the sandbox must answer with its state: %+v", dir, r)
		}
	}
	// The kubelet measures disk use every few seconds; an emptyDir over its sizeLimit was evicted ~60 s later.
	deadline := time.Now().Add(75 * time.Second)
	for time.Now().Before(deadline) {
		s, err := getSandbox(ns, "disk")
		if err != nil {
			t.Fatalf("getting sandbox: %v", err)
		}
		if s.Status.Phase != airlockv1.PhaseReady {
			t.Fatalf("sandbox left Ready after filling its disk: %s", describe(s))
		}
		time.Sleep(time.Second)
	}
	if r := sh(t, ns, "disk", "cat $HOME/state", 10*time.Second); r.ExitCode != 0 || r.Stdout != "kept\n" {
		t.Fatalf("state after the wait: %+v", r)
	}
}
