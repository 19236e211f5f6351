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
	proven, kernels := sandbox.ExpectedIsolationOf(pod)
	if proven == "" {
		return nil, fmt.Errorf("the pod's PID 1 was given no isolation to prove (%s): was the pod made by an older manager?", sandbox.ExpectIsolationFlag)
	}
	if st.Isolation != sandbox.IsolationFlag(proven) {
		return nil, fmt.Errorf("PID 1 attests %q isolation, but was told to prove %s", st.Isolation, proven)
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
	if proven == airlockv1.IsolationKata && !slices.Contains(kernels, nodeKernel) {
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
	return &airlockv1.IsolationEvidence{Proven: proven, NodeKernel: nodeKernel, GateTarget: st.GateTarget, Gate: st.Gate,
		ProxyTarget: st.ProxyTarget}, nil
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
	airlockv1.IsolationKata: "a VM (a kernel none of the nodes runs)", airlockv1.IsolationNone: "no isolation of its own (the node's kernel)"}

// runtimeBlocker fails a sandbox whose pod proved an isolation other than what its handler promises now (the
// operator's settings changed since), or none when that is not allowed. The pod will not change runtime, so it
// is permanent. A pod that cannot prove what it was told to never passes its gate (gateFailure).
func runtimeBlocker(handler string, ev *airlockv1.IsolationEvidence, d sandbox.Defaults) *blocker {
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
