package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/sandbox"
)

// readyTimeout bounds creation to Ready: a cold gVisor pod with the network gate takes a few seconds here.
const readyTimeout = 90 * time.Second

func createSandbox(t testing.TB, ns, name string, mutate ...func(*airlockv1.Sandbox)) *airlockv1.Sandbox {
	t.Helper()
	s := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "python-node"}}}
	for _, m := range mutate {
		m(s)
	}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatalf("creating sandbox %s: %v", name, err)
	}
	return s
}

func withTemplate(name string) func(*airlockv1.Sandbox) {
	return func(s *airlockv1.Sandbox) { s.Spec.TemplateRef.Name = name }
}

func withTimeout(d time.Duration) func(*airlockv1.Sandbox) {
	return func(s *airlockv1.Sandbox) { s.Spec.Timeout = &metav1.Duration{Duration: d} }
}

func withNetwork(n airlockv1.NetworkSpec) func(*airlockv1.Sandbox) {
	return func(s *airlockv1.Sandbox) { s.Spec.Network = &n }
}

func getSandbox(ns, name string) (*airlockv1.Sandbox, error) {
	s := &airlockv1.Sandbox{}
	return s, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s)
}

// waitReady polls until the sandbox is Ready, failing early with its conditions if it fails.
func waitReady(t testing.TB, ns, name string) *airlockv1.Sandbox {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	var last *airlockv1.Sandbox
	for time.Now().Before(deadline) {
		s, err := getSandbox(ns, name)
		if err == nil {
			last = s
			if s.Status.Phase == airlockv1.PhaseReady {
				return s
			}
			if s.Status.Phase == airlockv1.PhaseFailed {
				t.Fatalf("sandbox %s failed: %s", name, describe(s))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sandbox %s not Ready after %s: %s", name, readyTimeout, describe(last))
	return nil
}

func describe(s *airlockv1.Sandbox) string {
	if s == nil {
		return "<not found>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", s.Status.Phase)
	for _, c := range s.Status.Conditions {
		fmt.Fprintf(&b, "; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func conditionStatus(s *airlockv1.Sandbox, typ string) string {
	if c := meta.FindStatusCondition(s.Status.Conditions, typ); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return "<none>"
}

// target is the engine's address of a sandbox's supervisor, as the gateway makes it: its pod's container and
// the key PID 1 attested. Before the Sandbox records the key (a command raced ahead of Ready), the key comes from
// the attestation in the pod's log, as the controller reads it.
func target(ctx context.Context, ns, name string) (podexec.Request, error) {
	r := podexec.Request{Namespace: ns, Pod: name, Container: sandbox.ContainerName}
	var s airlockv1.Sandbox
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err == nil {
		if s.Status.PodName != "" {
			r.Pod = s.Status.PodName
		}
		if r.SupervisorKey = s.Status.SupervisorKey; r.SupervisorKey != "" {
			return r, nil
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	log, err := cs.CoreV1().Pods(ns).GetLogs(r.Pod, &corev1.PodLogOptions{Container: sandbox.ContainerName, LimitBytes: ptr.To(int64(64 << 10))}).DoRaw(ctx)
	if err != nil {
		return r, fmt.Errorf("reading the attestation of %s/%s: %w", ns, r.Pod, err)
	}
	st, err := attestation.Find(log)
	if err != nil {
		return r, fmt.Errorf("the attestation of %s/%s: %w", ns, r.Pod, err)
	}
	r.SupervisorKey = st.Key
	return r, nil
}

// sh runs a shell command in the sandbox through the exec engine and fails the test if it could not run.
func sh(t testing.TB, ns, name, command string, timeout time.Duration) *podexec.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	req, err := target(ctx, ns, name)
	if err != nil {
		t.Fatalf("exec %q in %s/%s: %v", command, ns, name, err)
	}
	req.Shell, req.Timeout = command, timeout
	res, err := engine.Run(ctx, req)
	if err != nil {
		t.Fatalf("exec %q in %s/%s: %v", command, ns, name, err)
	}
	return res
}

// probeScript tries one TCP connection from inside the sandbox and prints OPEN or BLOCKED with the error and
// how long it took. A two-second timeout keeps a dropped connection from looking like a hang.
const probeScript = `import socket, sys, time
t = time.monotonic()
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(2)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("OPEN %.3f" % (time.monotonic() - t))
except Exception as e:
    print("BLOCKED %.3f %s" % (time.monotonic() - t, e))
`

// probe reports whether a TCP connection from inside the sandbox to host:port succeeds.
func probe(t testing.TB, ns, name, host string, port int) (open bool, detail string) {
	t.Helper()
	res := sh(t, ns, name, fmt.Sprintf("python3 -c '%s' %s %d", probeScript, host, port), 20*time.Second)
	out := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || (!strings.HasPrefix(out, "OPEN") && !strings.HasPrefix(out, "BLOCKED")) {
		t.Fatalf("probe of %s:%d did not run: exit %d outcome %s stdout %q stderr %q", host, port, res.ExitCode, res.Outcome, res.Stdout, res.Stderr)
	}
	return strings.HasPrefix(out, "OPEN"), out
}

// eventually polls f until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s: %v", what, timeout, err)
}
