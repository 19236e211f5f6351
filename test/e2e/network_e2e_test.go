package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// TestNetworkIsolation probes real traffic from inside sandboxes. Every destination has a positive control in
// the same run: it is reached from the node (it listens), and from a sandbox whose policy allows it (the path
// from a pod works), so a BLOCKED result is the policy's doing.
func TestNetworkIsolation(t *testing.T) {
	startTestHosts(t)
	ns := newTenant(t)
	targetIP := startTargetPod(t)

	type dest struct {
		name string
		host string
		port int
		// fromNode: the test, on the node, can connect (so something listens there).
		fromNode bool
	}
	dests := []dest{
		{"another pod", targetIP, 8080, true},
		{"the API server's service IP", "10.96.0.1", 443, true},
		{"the node's API server", nodeIP, 6443, true},
		{"the node's kubelet", nodeIP, 10250, true},
		{"the internet stand-in", internetIP, 80, false}, // routed only from the pod bridge
		{"the metadata stand-in", metadataIP, 80, false},
	}
	for _, d := range dests {
		if !d.fromNode {
			continue
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort(d.host, strconv.Itoa(d.port)), 2*time.Second)
		if err != nil {
			t.Fatalf("positive control: %s (%s:%d) is not reachable from the node: %v", d.name, d.host, d.port, err)
		}
		c.Close()
	}

	restricted := func(cidr string, ports ...int32) func(*airlockv1.Sandbox) {
		r := airlockv1.EgressRule{CIDR: cidr}
		for _, p := range ports {
			r.Ports = append(r.Ports, airlockv1.EgressPort{Port: p})
		}
		return withNetwork(airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Egress: []airlockv1.EgressRule{r}})
	}
	createSandbox(t, ns, "none")
	createSandbox(t, ns, "allow-inet", restricted(internetIP+"/32", 80))
	createSandbox(t, ns, "allow-meta", restricted(metadataIP+"/32"))
	createSandbox(t, ns, "allow-pods", restricted(targetIP+"/32", 8080))
	// The API server on the node, by its own port (the kubelet's stays closed, so the network gate still passes):
	// reached directly and through the service IP, which kube-proxy translates to it.
	createSandbox(t, ns, "allow-api", restricted(nodeIP+"/32", 6443))
	want := map[string]map[string]bool{ // sandbox -> destination -> open
		"none":       {},
		"allow-inet": {"the internet stand-in": true},
		"allow-meta": {"the metadata stand-in": true},
		"allow-pods": {"another pod": true},
		"allow-api":  {"the API server's service IP": true, "the node's API server": true},
	}
	for n := range want {
		waitReady(t, ns, n)
	}
	controlled := map[string]bool{}
	for sbx, open := range want {
		for _, d := range dests {
			got, detail := probe(t, ns, sbx, d.host, d.port)
			t.Logf("%-10s -> %-28s %s", sbx, d.name, detail)
			if got != open[d.name] {
				t.Errorf("sandbox %s to %s (%s:%d): open=%v, want %v (%s)", sbx, d.name, d.host, d.port, got, open[d.name], detail)
			}
			if got {
				controlled[d.name] = true
			}
		}
	}
	// The kubelet's port cannot be opened to a sandbox without defeating the gate: its control is the node's.
	controlled["the node's kubelet"] = true
	for _, d := range dests {
		if !controlled[d.name] {
			t.Errorf("no sandbox reached %s although its policy allowed it: the blocked results prove nothing", d.name)
		}
	}
}

// TestAnotherPolicyReopensEgress shows that NetworkIsolated tells the truth: policies are additive, and one that
// selects the sandbox's pod really lets traffic out.
func TestAnotherPolicyReopensEgress(t *testing.T) {
	startTestHosts(t)
	ns := newTenant(t)
	createSandbox(t, ns, "s")
	waitReady(t, ns, "s")
	if open, detail := probe(t, ns, "s", internetIP, 80); open {
		t.Fatalf("isolated sandbox reached the internet stand-in: %s", detail)
	}
	ctx := context.Background()
	reopen := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-all-egress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
		},
	}
	if err := k8s.Create(ctx, reopen); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "NetworkIsolated turns False", func() error {
		s, err := getSandbox(ns, "s")
		if err != nil {
			return err
		}
		if got := conditionStatus(s, airlockv1.ConditionNetworkIsolated); got != "False/OtherPolicySelects" {
			return fmt.Errorf("NetworkIsolated %s", got)
		}
		return nil
	})
	eventually(t, 20*time.Second, "the re-opened egress really flows", func() error {
		if open, detail := probe(t, ns, "s", internetIP, 80); !open {
			return fmt.Errorf("still blocked: %s", detail)
		}
		return nil
	})
	if err := k8s.Delete(ctx, reopen); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "isolated again", func() error {
		s, err := getSandbox(ns, "s")
		if err != nil {
			return err
		}
		if got := conditionStatus(s, airlockv1.ConditionNetworkIsolated); got != "True/Isolated" {
			return fmt.Errorf("NetworkIsolated %s", got)
		}
		if open, detail := probe(t, ns, "s", internetIP, 80); open {
			return fmt.Errorf("still open: %s", detail)
		}
		return nil
	})
}

// TestNoNetworkBeforeIsolation shows that no command runs before the sandbox's policy is in effect, even when
// the policy enforcer is slow. It pauses the cluster's enforcer (kube-router, SIGSTOP by the PID its pidfile
// records) for a few seconds while sandboxes are created, so that their pods get IPs that no rule covers yet,
// and execs a connection attempt into each as early as the API server lets a command in (retried every few
// milliseconds from the start), repeated for a second. The network gate holds each sandbox container back
// until the enforcer has caught up: not one attempt may get through. Run once with the gate removed from the
// pod (the manager built without --gate-host): every sandbox's first command reached the internet stand-in,
// and the test failed.
func TestNoNetworkBeforeIsolation(t *testing.T) {
	startTestHosts(t)
	ns := newTenant(t)
	const n = 3
	type outcome struct {
		name, detail string
		open         bool
		err          error
	}
	results := make(chan outcome, n)
	resume := pauseEnforcer(t)
	for i := range n {
		createSandbox(t, ns, fmt.Sprintf("early-%d", i))
	}
	for i := range n {
		name := fmt.Sprintf("early-%d", i)
		go func() {
			open, detail, err := earliestProbe(ns, name, internetIP, 80)
			results <- outcome{name, detail, open, err}
		}()
	}
	time.Sleep(5 * time.Second)
	resume()
	for range n {
		r := <-results
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", r.name, r.err)
		case r.open:
			t.Errorf("%s: a command reached the network before isolation: %s", r.name, r.detail)
		default:
			t.Logf("%s: earliest commands: %s", r.name, r.detail)
		}
	}
}

// pauseEnforcer stops the local cluster's kube-router (found by its pidfile, checked against its binary) and
// returns the function that resumes it; cleanup resumes it in any case.
func pauseEnforcer(t *testing.T) (resume func()) {
	t.Helper()
	dir, bin := os.Getenv("AIRLOCK_E2E_PIDS_DIR"), os.Getenv("AIRLOCK_E2E_KUBE_ROUTER_BIN")
	if dir == "" || bin == "" {
		t.Fatal("AIRLOCK_E2E_PIDS_DIR and AIRLOCK_E2E_KUBE_ROUTER_BIN must be set: run 'make test-e2e'")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kube-router.pid"))
	if err != nil {
		t.Fatalf("kube-router's pidfile: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("kube-router's pidfile %q: %v", raw, err)
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != bin {
		t.Fatalf("pid %d from kube-router's pidfile is not %s (%q, %v)", pid, bin, exe, err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("pausing kube-router: %v", err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// earlyProbeScript tries a TCP connection every 20 ms for one second and prints OPEN at the first success,
// else BLOCKED with the number of attempts and the last error.
const earlyProbeScript = `import socket, sys, time
end, tries, last = time.monotonic() + 1, 0, None
while time.monotonic() < end:
    tries += 1
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(0.2)
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
        print("OPEN after %d tries" % tries)
        sys.exit(0)
    except Exception as e:
        last = e
    finally:
        s.close()
    time.sleep(0.02)
print("BLOCKED %d tries, last: %s" % (tries, last))
`

// earliestProbe execs the probe in the sandbox's container as soon as exec succeeds at all (it fails while
// the container does not run yet). Safe to call from any goroutine: it reports errors instead of failing.
func earliestProbe(ns, name, host string, port int) (open bool, detail string, err error) {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, err := target(ctx, ns, name) // from PID 1's attestation in its log, before the Sandbox records it
		var res *podexec.Result
		if err == nil {
			req.Argv, req.Timeout = []string{"python3", "-c", earlyProbeScript, host, strconv.Itoa(port)}, 20*time.Second
			res, err = engine.Run(ctx, req)
		}
		cancel()
		if err != nil || res.Outcome == podexec.OutcomeSandboxLost {
			time.Sleep(5 * time.Millisecond) // not started yet: the pod or its container does not exist yet
			continue
		}
		out := strings.TrimSpace(res.Stdout)
		if res.ExitCode != 0 || (!strings.HasPrefix(out, "OPEN") && !strings.HasPrefix(out, "BLOCKED")) {
			return false, "", fmt.Errorf("probe did not run: %s exit %d stdout %q stderr %q", res.Outcome, res.ExitCode, res.Stdout, res.Stderr)
		}
		return strings.HasPrefix(out, "OPEN"), out, nil
	}
	return false, "", fmt.Errorf("no command could run in %s within %s", name, readyTimeout)
}

// startTargetPod runs a plain HTTP server pod (runc, restricted) in its own namespace and returns its IP.
func startTargetPod(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-target-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(t, ns.Name) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "target"},
		Spec: corev1.PodSpec{
			RuntimeClassName:             ptr.To("runc"),
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(1000)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "http", Image: sandboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"python3", "-m", "http.server", "8080"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, readyTimeout, "target pod running", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort(pod.Status.PodIP, "8080"), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return pod.Status.PodIP
}
