package controller

import (
	"context"
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/pid1link"
	"airlock.dev/airlock/internal/sandbox"
)

// testKey is the session key the tests' stand-in PID 1s attest.
var testKey = func() string {
	id, err := pid1link.NewIdentity()
	if err != nil {
		panic(err)
	}
	return id.PublicKey()
}()

// attestedAs is what a pod's PID 1 attests when it does what its flags say (envtest runs no kubelet, so no PID 1
// writes a log): $(AIRLOCK_NODE_IP) is the pod's host IP, as the kubelet expands it.
func attestedAs(pod *corev1.Pod) *attestation.Statement {
	iso, _ := sandbox.ExpectedIsolationOf(pod)
	host := sandbox.PodArg(pod, sandbox.GateHostFlag)
	if strings.HasPrefix(host, "$(") {
		host = pod.Status.HostIP
	}
	st := &attestation.Statement{V: attestation.Version, Key: testKey, Isolation: sandbox.IsolationFlag(iso), Kernel: "4.4.0",
		GateTarget: net.JoinHostPort(host, sandbox.PodArg(pod, sandbox.GatePortFlag)), Gate: "refused",
		ProxyTarget: sandbox.PodArg(pod, sandbox.ProxyTargetFlag)}
	switch iso {
	case airlockv1.IsolationGVisor:
		st.GVisorMarker, st.Method = true, string(airlockv1.MethodMarker)
	case airlockv1.IsolationKata:
		st.Kernel, st.Method = "6.12.0-kata", string(airlockv1.MethodKernel)
	}
	return st
}

// attestUnverified plays a PID 1 that was to prove gVisor and found neither its marker nor its kernel log, on
// a kernel: gVisor's own, or its node's.
func attestUnverified(st *attestation.Statement, kernel string) {
	st.Isolation, st.Method, st.GVisorMarker, st.Kernel = sandbox.AttestedUnverified, "", false, kernel
	st.Unverified = "gVisor's marker /proc/gvisor/kernel_is_gvisor is absent (runsc runs without --gvisor-marker-file) and the kernel log (syslog(2)) cannot be read (syslog(2): operation not permitted)"
}

// attestingLogs stands in for pods/log: each pod's log is the attestation of a PID 1 that did what its flags say,
// edited by edit (when set) to play a PID 1 that did otherwise.
type attestingLogs struct {
	c    client.Reader
	edit func(*corev1.Pod, *attestation.Statement)
}

func (l attestingLogs) LogHead(ctx context.Context, namespace, name, _ string, _ int64) ([]byte, error) {
	pod := &corev1.Pod{}
	if err := l.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return nil, fmt.Errorf("test logs: %w", err)
	}
	st := attestedAs(pod)
	if l.edit != nil {
		l.edit(pod, st)
	}
	line, err := attestation.Line(*st)
	if err != nil {
		return nil, err
	}
	return append([]byte("airlock-init: kernel 4.4.0, gVisor marker true\n"), line...), nil
}
