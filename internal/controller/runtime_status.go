package controller

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/pid1link"
	"airlock.dev/airlock/internal/sandbox"
)

// gatePassed tells whether the sandbox container's PID 1 passed its gate: only then does it answer the pod's
// readiness probe (an httpGet of its readiness port), so the container is ready.
func gatePassed(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == sandbox.ContainerName {
			return s.Ready && s.State.Running != nil
		}
	}
	return false
}

// attestationWait is how long after its gate passed a pod's PID 1 may take to show its attestation in the log
// (the kubelet copies the container's output to the log file as it comes).
const attestationWait = 10 * time.Second

// gatePassedAt is when the pod became ready (its gate passed), zero if unknown.
func gatePassedAt(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// gateFailure returns the termination message of a sandbox container that ended: PID 1 ends at once, with the
// reason in its termination message, when its gate fails.
func gateFailure(pod *corev1.Pod) (string, bool) {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == sandbox.ContainerName && s.State.Terminated != nil {
			t := s.State.Terminated
			if msg := strings.TrimSpace(t.Message); msg != "" {
				return msg, true
			}
			return fmt.Sprintf("the sandbox container ended (exit %d, %s) before its gate passed", t.ExitCode, t.Reason), true
		}
	}
	return "", false
}

// buildEvidence checks what a pod's PID 1 attested once its gate passed (st) against the pod and its node. The
// gate counts only if the target PID 1 really probed is known to listen: the node's kubelet port from the Node's
// status on the pod's host IP, or the operator's --gate-target. A VM counts only if the pod's kernel was checked
// against the kernel of the node it runs on.
func buildEvidence(pod *corev1.Pod, node *corev1.Node, gateTarget string, st *attestation.Statement) (*airlockv1.IsolationEvidence, error) {
	expected, kernels := sandbox.ExpectedIsolationOf(pod)
	if expected == "" {
		return nil, fmt.Errorf("the pod's PID 1 was given no isolation to prove (%s): was the pod made by an older manager?", sandbox.ExpectIsolationFlag)
	}
	proven, method, err := attestedIsolation(expected, st)
	if err != nil {
		return nil, err
	}
	if _, err := pid1link.ParsePublicKey(st.Key); err != nil {
		return nil, fmt.Errorf("PID 1's attestation: %w", err)
	}
	if node == nil {
		return nil, fmt.Errorf("the pod's node %q is not known, so the gate's target and the kernel cannot be checked", pod.Spec.NodeName)
	}
	nodeKernel := node.Status.NodeInfo.KernelVersion
	if nodeKernel == "" {
		return nil, fmt.Errorf("node %s reports no kernel version (status.nodeInfo.kernelVersion)", node.Name)
	}
	if expected == airlockv1.IsolationKata && !slices.Contains(kernels, nodeKernel) {
		return nil, fmt.Errorf("the pod's kernel was checked against %v, which does not include the kernel of its node %s (%s): a node joined since? recreate the sandbox",
			kernels, node.Name, nodeKernel)
	}
	target := gateTarget
	if target == "" {
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		if port == 0 || pod.Status.HostIP == "" {
			return nil, fmt.Errorf("node %s reports no kubelet port (status.daemonEndpoints), so nothing is known to listen where the gate probed: set the manager's --gate-target", node.Name)
		}
		target = net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(int(port)))
	}
	if st.GateTarget != target {
		return nil, fmt.Errorf("PID 1's gate probed %s, but the address known to listen is %s, so its block proves nothing (did the kubelet ports of the nodes differ? set the manager's --gate-target)",
			st.GateTarget, target)
	}
	if want := sandbox.PodArg(pod, sandbox.ProxyTargetFlag); st.ProxyTarget != want {
		return nil, fmt.Errorf("PID 1 reached the egress proxy at %q, but was told %q", st.ProxyTarget, want)
	}
	return &airlockv1.IsolationEvidence{Proven: proven, Method: method, Unverified: st.Unverified, PodKernel: st.Kernel,
		NodeKernel: nodeKernel, GateTarget: st.GateTarget, Gate: st.Gate, ProxyTarget: st.ProxyTarget}, nil
}

// attestedIsolation reads what PID 1 attests it proved against what it was told to prove: that isolation, by
// evidence that can prove it, or, told to prove gVisor, unverified with what it looked for. A PID 1 of the
// previous release names no method: its marker (gVisor) or its kernel (a VM) was the only way it proved.
func attestedIsolation(expected airlockv1.Isolation, st *attestation.Statement) (airlockv1.Isolation, airlockv1.IsolationMethod, error) {
	method := airlockv1.IsolationMethod(st.Method)
	switch {
	case st.Isolation == sandbox.AttestedUnverified && expected == airlockv1.IsolationGVisor:
		if st.Unverified == "" || method != "" {
			return "", "", fmt.Errorf("PID 1 attests unverified isolation without saying what it looked for, or with a method (%q)", method)
		}
		return airlockv1.IsolationUnverified, "", nil
	case st.Isolation != sandbox.IsolationFlag(expected):
		return "", "", fmt.Errorf("PID 1 attests %q isolation, but was told to prove %s", st.Isolation, expected)
	case expected == airlockv1.IsolationGVisor && method == "" && st.GVisorMarker:
		method = airlockv1.MethodMarker
	case expected == airlockv1.IsolationKata && method == "":
		method = airlockv1.MethodKernel
	}
	if !slices.Contains(provingMethods[expected], method) {
		return "", "", fmt.Errorf("PID 1 attests %s isolation by %q, which does not prove it", expected, method)
	}
	return expected, method, nil
}

// provingMethods are the evidence that proves each isolation; none needs none.
var provingMethods = map[airlockv1.Isolation][]airlockv1.IsolationMethod{
	airlockv1.IsolationGVisor: {airlockv1.MethodMarker, airlockv1.MethodKernelLog},
	airlockv1.IsolationKata:   {airlockv1.MethodKernel},
	airlockv1.IsolationNone:   {""},
}

// isRuntimeMismatch tells a gate that failed because the runtime is not the isolation it promised.
func isRuntimeMismatch(msg string) bool { return strings.HasPrefix(msg, sandbox.RuntimeMismatchPrefix) }

// isInitMismatch tells a PID 1 that is not the manager's airlock-init: one that said so, one the runtime could
// not start (the image lacks it: the runtime's message names the path), or one too old to know --protocol
// (its flag error, which the pod's termination message falls back to).
func isInitMismatch(msg string) bool {
	return strings.HasPrefix(msg, sandbox.InitMismatchPrefix) || strings.Contains(msg, sandbox.InitBinary) ||
		strings.Contains(msg, "flag provided but not defined: -protocol") // sandbox.ProtocolFlag, as Go's flag package names it
}

var describeIsolation = map[airlockv1.Isolation]string{airlockv1.IsolationGVisor: "gVisor",
	airlockv1.IsolationKata: "a VM (a kernel none of the nodes runs)", airlockv1.IsolationNone: "no isolation of its own (the node's kernel)",
	airlockv1.IsolationUnverified: "nothing"}

// runtimeBlocker fails a sandbox whose pod proved an isolation other than what its handler promises now (the
// operator's settings changed since), or none, or proved nothing, when that is not allowed. The pod will not
// change runtime, so it is permanent. A pod that proves the opposite of what it was told to never passes its
// gate (gateFailure).
func runtimeBlocker(handler string, ev *airlockv1.IsolationEvidence, d sandbox.Defaults) *blocker {
	if ev.Proven == airlockv1.IsolationUnverified {
		return unverifiedBlocker(handler, ev, d)
	}
	if want := d.ExpectedIsolation(handler); handler != "" && want != airlockv1.IsolationNone && ev.Proven != want {
		return &blocker{reason: ReasonRuntimeMismatch, permanent: true, message: fmt.Sprintf(
			"RuntimeClass handler %q should give %s isolation, but its pod proved %s", handler, describeIsolation[want], describeIsolation[ev.Proven])}
	}
	if ev.Proven == airlockv1.IsolationNone && !d.AllowUnisolated {
		return &blocker{reason: ReasonRuntimeNotIsolating, permanent: true, message: fmt.Sprintf(
			"the pod runs on the node's own kernel %s (RuntimeClass handler %q); non-isolating runtimes are not allowed (--allow-unisolated-runtimes)", ev.NodeKernel, handler)}
	}
	return nil
}

// unverifiedBlocker judges a pod that found nothing proving the isolation its handler promises. On its node's
// own kernel it is no sandbox at all: a mismatch, whatever the operator allows. Otherwise its kernel is not
// the node's (gVisor or a VM that does not show itself), and it runs only where the operator allows unverified
// isolation.
func unverifiedBlocker(handler string, ev *airlockv1.IsolationEvidence, d sandbox.Defaults) *blocker {
	if ev.PodKernel == ev.NodeKernel {
		return &blocker{reason: ReasonRuntimeMismatch, permanent: true, message: fmt.Sprintf(
			"RuntimeClass handler %q should give isolation, but its pod runs its node's own kernel %s (%s)", handler, ev.NodeKernel, ev.Unverified)}
	}
	if !d.AllowUnverified {
		return &blocker{reason: ReasonIsolationUnverified, permanent: true, message: fmt.Sprintf(
			"nothing proved the isolation RuntimeClass handler %q promises: %s; its kernel %s is not its node's (%s), but unverified isolation is not allowed: "+
				"enable gvisor-marker-file in the nodes' runsc config (docs/runtimes.md) or allow it (--allow-unverified-isolation, chart manager.allowUnverifiedIsolation)",
			handler, ev.Unverified, ev.PodKernel, ev.NodeKernel)}
	}
	return nil
}
