package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
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

// TestNoNetworkBeforeIsolation runs a command the moment the sandbox container starts, before the Sandbox is
// even Ready: the network gate must already have closed the window in which a new pod can connect out.
func TestNoNetworkBeforeIsolation(t *testing.T) {
	startTestHosts(t)
	ns := newTenant(t)
	ctx := context.Background()
	for i := range 3 {
		name := fmt.Sprintf("early-%d", i)
		createSandbox(t, ns, name)
		eventually(t, readyTimeout, "sandbox container running", func() error {
			pod := &corev1.Pod{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
				return err
			}
			for _, s := range pod.Status.ContainerStatuses {
				if s.Name == "sandbox" && s.State.Running != nil {
					return nil
				}
			}
			return fmt.Errorf("not running yet")
		})
		if open, detail := probe(t, ns, name, internetIP, 80); open {
			t.Fatalf("%s: the first command reached the network: %s", name, detail)
		} else {
			t.Logf("%s: first command: %s", name, detail)
		}
	}
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
