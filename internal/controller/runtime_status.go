package controller

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/verdict"
)

// gateExited returns the init container's termination message and whether it exited 0 (the gate passed).
func gateExited(pod *corev1.Pod) (string, bool) {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == sandbox.InitContainerName && s.State.Terminated != nil {
			return s.State.Terminated.Message, s.State.Terminated.ExitCode == 0
		}
	}
	return "", false
}

// buildEvidence checks the init container's verdict against the pod's node. The gate's result counts only if
// its target is known to listen: the node's kubelet port from the Node's status on the pod's host IP, or the
// operator's --gate-target. The node's kernel tells a VM's kernel from the node's own.
func buildEvidence(msg string, pod *corev1.Pod, node *corev1.Node, gateTarget string) (*airlockv1.IsolationEvidence, error) {
	v, err := verdict.Parse(strings.TrimSpace(msg))
	if err != nil {
		return nil, fmt.Errorf("the init container left no verdict to check (%w): was the pod made by an older manager?", err)
	}
	if node == nil {
		return nil, fmt.Errorf("the pod's node %q is not known, so the gate's target and the kernel cannot be checked", pod.Spec.NodeName)
	}
	if node.Status.NodeInfo.KernelVersion == "" {
		return nil, fmt.Errorf("node %s reports no kernel version (status.nodeInfo.kernelVersion)", node.Name)
	}
	want := gateTarget
	if want == "" {
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		if port == 0 || pod.Status.HostIP == "" {
			return nil, fmt.Errorf("node %s reports no kubelet port (status.daemonEndpoints), so nothing is known to listen where the gate probed %s: set the manager's --gate-target", node.Name, v.Target)
		}
		want = net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(int(port)))
	}
	if v.Target != want {
		return nil, fmt.Errorf("the gate probed %s, but the address known to listen is %s (node %s), so its %s proves nothing: do the nodes' kubelet ports differ? set the manager's --gate-target",
			v.Target, want, node.Name, v.Gate)
	}
	if want := proxyTarget(pod); v.Proxy != want {
		return nil, fmt.Errorf("the pod's gate was to reach the egress proxy %q and reports %q", want, v.Proxy)
	}
	return &airlockv1.IsolationEvidence{Kernel: v.Kernel, NodeKernel: node.Status.NodeInfo.KernelVersion,
		GVisorMarker: v.GVisorMarker, Gate: string(v.Gate), GateTarget: v.Target, ProxyTarget: v.Proxy}, nil
}

// proxyTarget is the egress proxy the pod's gate was told to reach; empty for sandboxes without an allowlist.
func proxyTarget(pod *corev1.Pod) string {
	for _, c := range pod.Spec.InitContainers {
		if c.Name != sandbox.InitContainerName {
			continue
		}
		for _, a := range c.Args {
			if t, ok := strings.CutPrefix(a, sandbox.ProxyTargetFlag); ok {
				return t
			}
		}
	}
	return ""
}

var describeIsolation = map[airlockv1.Isolation]string{airlockv1.IsolationGVisor: "gVisor",
	airlockv1.IsolationKata: "a kernel other than the node's, not gVisor", airlockv1.IsolationNone: "the node's own kernel"}

// runtimeBlocker fails a sandbox whose pod, seen from inside, is not isolated the way its handler promised,
// or not isolated at all when that is not allowed. The pod will not change runtime, so it is permanent.
func runtimeBlocker(handler string, observed airlockv1.Isolation, ev *airlockv1.IsolationEvidence, d sandbox.Defaults) *blocker {
	seen := fmt.Sprintf("from inside the pod the kernel is %q (the node's is %q) and gVisor's marker is %s",
		ev.Kernel, ev.NodeKernel, map[bool]string{true: "present", false: "absent"}[ev.GVisorMarker])
	if want := d.ExpectedIsolation(handler); handler != "" && want != airlockv1.IsolationNone && observed != want {
		hint := ""
		if want == airlockv1.IsolationGVisor && !ev.GVisorMarker {
			hint = " (runsc proves gVisor with its marker file: enable gvisor-marker-file in the runsc config, docs/runtimes.md)"
		}
		return &blocker{reason: ReasonRuntimeMismatch, permanent: true, message: fmt.Sprintf(
			"RuntimeClass handler %q should give %s isolation, but %s: that is %s%s", handler, want, seen, describeIsolation[observed], hint)}
	}
	if observed == airlockv1.IsolationNone && !d.AllowUnisolated {
		return &blocker{reason: ReasonRuntimeNotIsolating, permanent: true, message: fmt.Sprintf(
			"the pod runs on the node's own kernel (RuntimeClass handler %q): %s; non-isolating runtimes are not allowed (--allow-unisolated-runtimes)", handler, seen)}
	}
	return nil
}
