package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/sandbox"
)

// runningPod is a sandbox pod whose container runs: with gateExit nil its gate has not passed yet, with 0 it
// passed (the container is ready), otherwise PID 1 failed its gate with that exit code and the pod failed.
func runningPod(gateExit *int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: sandbox.ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	switch {
	case gateExit == nil:
	case *gateExit == 0:
		p.Status.ContainerStatuses[0].Ready = true
	default:
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: *gateExit, Message: "network isolation not in effect"}}
	}
	return p
}

func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	later := &metav1.Time{Time: now.Add(time.Hour)}
	zero, one := int32(0), int32(1)
	failed := runningPod(&zero)
	failed.Status.Phase = corev1.PodFailed
	evicted := runningPod(&zero)
	evicted.Status.Phase, evicted.Status.Reason = corev1.PodFailed, "Evicted"
	evicted.Status.Message = `Usage of EmptyDir volume "workdir" exceeds the limit "1Gi". `
	evicted.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
	disrupted := runningPod(&zero)
	disrupted.Status.Phase = corev1.PodFailed
	disrupted.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint"}}
	pulling := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: sandbox.ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}}}
	// Where airlock-init is copied in, the copy's own trouble is the reason the sandbox waits, or failed.
	copyPulling := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending,
		InitContainerStatuses: []corev1.ContainerStatus{{Name: sandbox.InitCopyContainer, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.example/airlock/init:0.1.0"`}}}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: sandbox.ContainerName, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}}
	copyFailed := copyPulling.DeepCopy()
	copyFailed.Status.Phase = corev1.PodFailed
	copyFailed.Status.InitContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", Message: "airlock-init install: creating the copy: read-only file system"}}

	tests := map[string]struct {
		obs                      observation
		phase                    airlockv1.SandboxPhase
		ready, isolated, expired string
		readyMessage             string
	}{
		"no pod yet": {observation{policy: policyInEffect},
			airlockv1.PhasePending, "False/Creating", "False/GatePending", "False/NotExpired", ""},
		"running, gate passed": {observation{policy: policyInEffect, pod: runningPod(&zero), evidence: gvisorEvidence()},
			airlockv1.PhaseReady, "True/Ready", "True/Isolated", "False/NotExpired", ""},
		"gate passed without a verdict proves nothing": {observation{policy: policyInEffect, pod: runningPod(&zero), evidenceErr: errors.New("no verdict")},
			airlockv1.PhasePending, "False/NotIsolated", "False/GateUnproven", "False/NotExpired", "no verdict"},
		"running, gate not finished": {observation{policy: policyInEffect, pod: runningPod(nil)},
			airlockv1.PhasePending, "False/NotIsolated", "False/GatePending", "False/NotExpired", ""},
		"gate failed": {observation{policy: policyInEffect, pod: runningPod(&one)},
			airlockv1.PhaseFailed, "False/GateFailed", "False/GateFailed", "False/NotExpired", "network isolation not in effect"},
		"another policy selects the pod": {observation{policy: policyInEffect, pod: runningPod(&zero), others: []string{"open"}},
			airlockv1.PhasePending, "False/NotIsolated", "False/OtherPolicySelects", "False/NotExpired", ""},
		"policy edited": {observation{policy: policyModified, pod: runningPod(&zero)},
			airlockv1.PhasePending, "False/NotIsolated", "False/PolicyModified", "False/NotExpired", ""},
		"image missing says why": {observation{policy: policyInEffect, pod: pulling},
			airlockv1.PhasePending, "False/Starting", "False/GatePending", "False/NotExpired", "ErrImageNeverPull"},
		"the copy of airlock-init cannot be pulled": {observation{policy: policyInEffect, pod: copyPulling},
			airlockv1.PhasePending, "False/Starting", "False/GatePending", "False/NotExpired", "container airlock-init: ImagePullBackOff: Back-off pulling image"},
		"the copy of airlock-init failed": {observation{policy: policyInEffect, pod: copyFailed},
			airlockv1.PhaseFailed, "False/PodFailed", "False/GatePending", "False/NotExpired", "container airlock-init exited 1 (Error) airlock-init install: creating the copy"},
		"pod failed": {observation{policy: policyInEffect, pod: failed, evidence: gvisorEvidence()},
			airlockv1.PhaseFailed, "False/PodFailed", "True/Isolated", "False/NotExpired", "phase Failed with no reason given"},
		"evicted pod says why, not how its container ended": {observation{policy: policyInEffect, pod: evicted, evidence: gvisorEvidence()},
			airlockv1.PhaseFailed, "False/PodFailed", "True/Isolated", "False/NotExpired", `stopped: Evicted: Usage of EmptyDir volume "workdir" exceeds the limit "1Gi".`},
		"disrupted pod says why": {observation{policy: policyInEffect, pod: disrupted, evidence: gvisorEvidence()},
			airlockv1.PhaseFailed, "False/PodFailed", "True/Isolated", "False/NotExpired", "DeletionByTaintManager: Taint manager"},
		"pod lost": {observation{policy: policyInEffect, podLost: true},
			airlockv1.PhaseFailed, "False/PodLost", "False/GatePending", "False/NotExpired", ""},
		"template missing": {observation{blocked: &blocker{reason: ReasonTemplateNotFound, message: "no template"}},
			airlockv1.PhasePending, "False/TemplateNotFound", "False/PolicyMissing", "False/NotExpired", "no template"},
		"name conflict is permanent": {observation{blocked: &blocker{reason: ReasonNameConflict, permanent: true}},
			airlockv1.PhaseFailed, "False/NameConflict", "False/PolicyMissing", "False/NotExpired", ""},
		"expired": {observation{policy: policyInEffect, pod: runningPod(&zero), evidence: gvisorEvidence(), expiresAt: &metav1.Time{Time: now}},
			airlockv1.PhaseExpired, "False/Expired", "True/Isolated", "True/Expired", ""},
		"deleting": {observation{policy: policyInEffect, deleting: true},
			airlockv1.PhaseTerminating, "False/Terminating", "False/GatePending", "False/NotExpired", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sbx := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			tc.obs.now = now
			if tc.obs.expiresAt == nil {
				tc.obs.expiresAt = later
			}
			st := computeStatus(sbx, tc.obs)
			if st.Phase != tc.phase {
				t.Errorf("phase %s, want %s", st.Phase, tc.phase)
			}
			sbx.Status = st
			for typ, want := range map[string]string{airlockv1.ConditionReady: tc.ready, airlockv1.ConditionNetworkIsolated: tc.isolated, airlockv1.ConditionExpired: tc.expired} {
				if got := condition(sbx, typ); got != want {
					t.Errorf("%s: %s, want %s", typ, got, want)
				}
				if c := meta.FindStatusCondition(st.Conditions, typ); c.ObservedGeneration != 3 {
					t.Errorf("%s: observedGeneration %d, want 3", typ, c.ObservedGeneration)
				}
			}
			if msg := meta.FindStatusCondition(st.Conditions, airlockv1.ConditionReady).Message; tc.readyMessage != "" && !strings.Contains(msg, tc.readyMessage) {
				t.Errorf("Ready message %q does not say %q", msg, tc.readyMessage)
			}
		})
	}
}

func TestComputeStatusKeepsTransitionTimesAndUsage(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	zero := int32(0)
	sbx := &airlockv1.Sandbox{}
	started := metav1.NewTime(t0)
	pod := runningPod(&zero)
	pod.Status.ContainerStatuses[0].State.Running.StartedAt = started
	obs := observation{now: t0.Add(10 * time.Second), policy: policyInEffect, pod: pod, evidence: gvisorEvidence(), expiresAt: &metav1.Time{Time: t0.Add(time.Hour)}}
	sbx.Status = computeStatus(sbx, obs)
	if sbx.Status.Usage == nil || sbx.Status.Usage.SandboxSeconds != 10 {
		t.Fatalf("usage at the Ready transition: %+v, want 10s", sbx.Status.Usage)
	}
	first := meta.FindStatusCondition(sbx.Status.Conditions, airlockv1.ConditionReady).LastTransitionTime

	obs.now = obs.now.Add(time.Minute)
	again := computeStatus(sbx, obs)
	if got := meta.FindStatusCondition(again.Conditions, airlockv1.ConditionReady).LastTransitionTime; !got.Equal(&first) {
		t.Errorf("unchanged condition moved its transition time: %v -> %v", first, got)
	}
	if again.Usage.SandboxSeconds != 10 {
		t.Errorf("usage must change only on transitions (so status is not rewritten every reconcile), got %d", again.Usage.SandboxSeconds)
	}
}

func gvisorEvidence() *airlockv1.IsolationEvidence {
	return &airlockv1.IsolationEvidence{Proven: airlockv1.IsolationGVisor, NodeKernel: "6.1.0-host", GateTarget: "10.123.0.1:10250"}
}

// The runtime is judged by what the pod proved from inside, against what its handler promises now. Each refusal
// case fails with its check in runtimeBlocker removed (verified by reverting it).
func TestComputeStatusRuntimeIsolation(t *testing.T) {
	zero := int32(0)
	strict := sandbox.DefaultDefaults()
	allowing := sandbox.DefaultDefaults()
	allowing.AllowUnisolated = true
	host := &airlockv1.IsolationEvidence{Proven: airlockv1.IsolationNone, NodeKernel: "6.1.0-host", GateTarget: "10.123.0.1:10250"}
	allowingUnverified := sandbox.DefaultDefaults()
	allowingUnverified.AllowUnverified = true
	unverified := &airlockv1.IsolationEvidence{Proven: airlockv1.IsolationUnverified, Unverified: "gVisor's marker is absent",
		PodKernel: "4.4.0", NodeKernel: "6.1.0-host", GateTarget: "10.123.0.1:10250"}
	unverifiedOnHost := unverified.DeepCopy()
	unverifiedOnHost.PodKernel = "6.1.0-host"
	vm := &airlockv1.IsolationEvidence{Proven: airlockv1.IsolationKata, NodeKernel: "6.1.0-host", GateTarget: "10.123.0.1:10250"}
	tests := map[string]struct {
		handler   string
		ev        *airlockv1.IsolationEvidence
		d         sandbox.Defaults
		phase     airlockv1.SandboxPhase
		ready     string
		isolation airlockv1.Isolation
		message   string
	}{
		"gVisor proven":                 {"runsc", gvisorEvidence(), strict, airlockv1.PhaseReady, "True/Ready", airlockv1.IsolationGVisor, ""},
		"kata proven by its own kernel": {"kata-qemu", vm, strict, airlockv1.PhaseReady, "True/Ready", airlockv1.IsolationKata, ""},
		"runsc proved nothing (made when it was not isolating)": {"runsc", host, strict, airlockv1.PhaseFailed, "False/RuntimeMismatch", airlockv1.IsolationNone, `handler "runsc" should give gVisor`},
		"kata proved gVisor":                {"kata", gvisorEvidence(), allowing, airlockv1.PhaseFailed, "False/RuntimeMismatch", airlockv1.IsolationGVisor, "a VM"},
		"runc refused":                      {"runc", host, strict, airlockv1.PhaseFailed, "False/RuntimeNotIsolating", airlockv1.IsolationNone, "--allow-unisolated-runtimes"},
		"runc allowed says none":            {"runc", host, allowing, airlockv1.PhaseReady, "True/Ready", airlockv1.IsolationNone, ""},
		"unknown handler, host kernel":      {"", host, strict, airlockv1.PhaseFailed, "False/RuntimeNotIsolating", airlockv1.IsolationNone, "node's own kernel"},
		"unknown handler, gVisor is gVisor": {"", gvisorEvidence(), strict, airlockv1.PhaseReady, "True/Ready", airlockv1.IsolationGVisor, ""},
		// Fails with unverifiedBlocker's allowance check removed: checked.
		"gVisor unverified, refused": {"gvisor", unverified, strict, airlockv1.PhaseFailed, "False/IsolationUnverified", airlockv1.IsolationUnverified,
			"--allow-unverified-isolation"},
		"gVisor unverified, allowed": {"gvisor", unverified, allowingUnverified, airlockv1.PhaseReady, "True/Ready", airlockv1.IsolationUnverified, ""},
		// Fails with unverifiedBlocker's kernel check removed: checked.
		"unverified on its node's kernel, even allowed": {"gvisor", unverifiedOnHost, allowingUnverified, airlockv1.PhaseFailed, "False/RuntimeMismatch",
			airlockv1.IsolationUnverified, "its node's own kernel 6.1.0-host"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
			sbx := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: airlockv1.SandboxStatus{PodName: "s", RuntimeHandler: tc.handler}}
			obs := observation{now: now, expiresAt: &metav1.Time{Time: now.Add(time.Hour)}, policy: policyInEffect,
				pod: runningPod(&zero), evidence: tc.ev, defaults: tc.d}
			st := computeStatus(sbx, obs)
			sbx.Status = st
			if st.Phase != tc.phase || condition(sbx, airlockv1.ConditionReady) != tc.ready || st.Isolation != tc.isolation {
				t.Errorf("phase %s Ready %s isolation %q; want %s %s %q", st.Phase, condition(sbx, airlockv1.ConditionReady), st.Isolation, tc.phase, tc.ready, tc.isolation)
			}
			if msg := meta.FindStatusCondition(st.Conditions, airlockv1.ConditionReady).Message; !strings.Contains(msg, tc.message) {
				t.Errorf("Ready message %q does not say %q", msg, tc.message)
			}
			if st.IsolationEvidence == nil || *st.IsolationEvidence != *tc.ev {
				t.Errorf("evidence not recorded: %+v", st.IsolationEvidence)
			}
			// Evidence an older manager recorded (no Proven) keeps the isolation it judged.
			old := sbx.DeepCopy()
			old.Status.IsolationEvidence.Proven = ""
			if again := computeStatus(old, obs); again.Phase != tc.phase || again.Isolation != tc.isolation {
				t.Errorf("from an older manager's evidence: phase %s isolation %q", again.Phase, again.Isolation)
			}
			// Recorded evidence stands on later reconciles, which do not read it again.
			obs.evidence = nil
			if again := computeStatus(sbx, obs); again.Phase != tc.phase || again.Isolation != tc.isolation {
				t.Errorf("from recorded evidence: phase %s isolation %q", again.Phase, again.Isolation)
			}
		})
	}
}

// The gate's block proves isolation only for a target known to listen, as PID 1 attests it probed: the pod's
// node's kubelet port, or the operator's --gate-target; and a VM only against its node's kernel. Without each
// check its case passes (checked for the attested target: "PID 1 probed its own loopback" then passes).
func TestBuildEvidence(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{
		NodeInfo:        corev1.NodeSystemInfo{KernelVersion: "6.1.0-host"},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}}}}
	noPort := node.DeepCopy()
	noPort.Status.DaemonEndpoints.KubeletEndpoint.Port = 0
	noKernel := node.DeepCopy()
	noKernel.Status.NodeInfo.KernelVersion = ""
	r, err := sandbox.Resolve(&airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Spec: airlockv1.SandboxSpec{Image: "img"}},
		nil, sandbox.DefaultDefaults())
	if err != nil {
		t.Fatal(err)
	}
	podWith := func(edit func(*sandbox.PodOptions)) *corev1.Pod {
		o := sandbox.DefaultPodOptions("init")
		o.Isolation = airlockv1.IsolationGVisor
		edit(&o)
		p := sandbox.BuildPod(&airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}}, r, o)
		p.Spec.NodeName, p.Status.HostIP = "n1", "10.123.0.1"
		return p
	}
	good := podWith(func(*sandbox.PodOptions) {})
	otherPort := podWith(func(o *sandbox.PodOptions) { o.GatePort = 10255 })
	configured := podWith(func(o *sandbox.PodOptions) { o.GateTarget = "10.123.0.1:10255" })
	vm := podWith(func(o *sandbox.PodOptions) {
		o.Isolation, o.HostKernels = airlockv1.IsolationKata, []string{"6.1.0-host"}
	})
	vmElsewhere := podWith(func(o *sandbox.PodOptions) {
		o.Isolation, o.HostKernels = airlockv1.IsolationKata, []string{"6.1.0-other"}
	})
	older := podWith(func(*sandbox.PodOptions) {})
	older.Spec.Containers[0].Command = []string{sandbox.InitBinary, "pid1"}
	attested := func(p *corev1.Pod, edit func(*attestation.Statement)) *attestation.Statement {
		st := attestedAs(p)
		if edit != nil {
			edit(st)
		}
		return st
	}
	tests := map[string]struct {
		pod        *corev1.Pod
		node       *corev1.Node
		gateTarget string
		st         *attestation.Statement
		want       airlockv1.Isolation
		wantErr    string
	}{
		"kubelet port of the pod's node":    {good, node, "", attested(good, nil), airlockv1.IsolationGVisor, ""},
		"configured target":                 {configured, noPort, "10.123.0.1:10255", attested(configured, nil), airlockv1.IsolationGVisor, ""},
		"a VM checked against its node":     {vm, node, "", attested(vm, nil), airlockv1.IsolationKata, ""},
		"a VM not checked against its node": {vmElsewhere, node, "", attested(vmElsewhere, nil), "", "does not include the kernel of its node"},
		"probed a port not known to listen": {otherPort, node, "", attested(otherPort, nil), "", "known to listen is 10.123.0.1:10250"},
		"configured target not probed":      {good, node, "10.0.0.9:443", attested(good, nil), "", "known to listen is 10.0.0.9:443"},
		"node reports no kubelet port":      {good, noPort, "", attested(good, nil), "", "no kubelet port"},
		"node reports no kernel":            {good, noKernel, "", attested(good, nil), "", "no kernel version"},
		"node unknown":                      {good, nil, "", attested(good, nil), "", "not known"},
		"nothing to prove (older manager)":  {older, node, "", attested(good, nil), "", "no isolation to prove"},
		// What a tenant's AIRLOCK_NODE_IP=127.0.0.1 made PID 1 probe before the env was reserved: the pod's
		// flags look right, only the attestation tells.
		"PID 1 probed its own loopback": {good, node, "", attested(good, func(s *attestation.Statement) { s.GateTarget = "127.0.0.1:10250" }),
			"", "PID 1's gate probed 127.0.0.1:10250"},
		"PID 1 attests another isolation": {good, node, "", attested(good, func(s *attestation.Statement) { s.Isolation = "none" }),
			"", `attests "none" isolation`},
		"PID 1 attests a malformed key": {good, node, "", attested(good, func(s *attestation.Statement) { s.Key = "ed25519:AAAA" }),
			"", "supervisor key"},
		"PID 1 reached another proxy": {good, node, "", attested(good, func(s *attestation.Statement) { s.ProxyTarget = "10.0.0.5:3128" }),
			"", "egress proxy"},
		"gVisor by its kernel log": {good, node, "", attested(good, func(s *attestation.Statement) {
			s.GVisorMarker, s.Method = false, "kernel-log"
		}), airlockv1.IsolationGVisor, ""},
		"gVisor from a PID 1 that names no method": {good, node, "", attested(good, func(s *attestation.Statement) { s.Method = "" }),
			airlockv1.IsolationGVisor, ""},
		"gVisor unverified, with what was looked for": {good, node, "", attested(good, func(s *attestation.Statement) { attestUnverified(s, "4.4.0") }),
			airlockv1.IsolationUnverified, ""},
		// Each of these fails with attestedIsolation's check removed: checked.
		"gVisor by a method that proves a VM": {good, node, "", attested(good, func(s *attestation.Statement) { s.Method = "kernel" }),
			"", `by "kernel", which does not prove it`},
		"gVisor by no evidence at all": {good, node, "", attested(good, func(s *attestation.Statement) { s.Method, s.GVisorMarker = "", false }),
			"", `by "", which does not prove it`},
		"unverified without a reason": {good, node, "", attested(good, func(s *attestation.Statement) {
			attestUnverified(s, "4.4.0")
			s.Unverified = ""
		}), "", "without saying what it looked for"},
		"unverified where a VM was to be proven": {vm, node, "", attested(vm, func(s *attestation.Statement) { attestUnverified(s, "4.4.0") }),
			"", `attests "unverified" isolation, but was told to prove kata`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ev, err := buildEvidence(tc.pod, tc.node, tc.gateTarget, tc.st)
			if tc.wantErr == "" {
				if err != nil || ev == nil || ev.Proven != tc.want || ev.NodeKernel != "6.1.0-host" || ev.GateTarget != tc.st.GateTarget || ev.Gate != "refused" ||
					ev.PodKernel != tc.st.Kernel || ev.Unverified != tc.st.Unverified {
					t.Fatalf("got %+v, %v", ev, err)
				}
				if method := map[airlockv1.Isolation]airlockv1.IsolationMethod{airlockv1.IsolationGVisor: airlockv1.MethodMarker,
					airlockv1.IsolationKata: airlockv1.MethodKernel}[tc.want]; tc.st.Method != "" {
					if ev.Method != airlockv1.IsolationMethod(tc.st.Method) {
						t.Errorf("method %q, attested %q", ev.Method, tc.st.Method)
					}
				} else if ev.Method != method {
					t.Errorf("method %q, want %q for a PID 1 that names none", ev.Method, method)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %+v, %v; want an error saying %q", ev, err, tc.wantErr)
			}
		})
	}
}

// A PID 1 that is not the manager's airlock-init is told apart from a failed gate, in each way it shows: its
// own words, the runtime's failure to start a missing binary, and an older binary's flag error (the
// termination message falls back to its log).
func TestGateStateTellsAnInitMismatch(t *testing.T) {
	for msg, want := range map[string]string{
		sandbox.InitMismatchPrefix + "the manager speaks init protocol 2":                                                                  ReasonInitMismatch,
		`failed to create containerd task: exec: "` + sandbox.InitBinary + `": stat ` + sandbox.InitBinary + `: no such file or directory`: ReasonInitMismatch,
		"flag provided but not defined: -protocol\nUsage of pid1:":                                                                         ReasonInitMismatch,
		sandbox.RuntimeMismatchPrefix + "no gVisor marker":                                                                                 ReasonRuntimeMismatch,
		"network isolation not in effect after 30s":                                                                                        ReasonGateFailed,
	} {
		pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: sandbox.ContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}}}}}}
		if g := gateState(pod, nil, nil); g.reason != want || !strings.Contains(g.message, msg) {
			t.Errorf("%q: %s %q, want %s", msg, g.reason, g.message, want)
		}
	}
}
