package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/sandbox"
)

// Pool members here are small so that a 2-core node holds them all: the template asks for 10m CPU and 64Mi.
func poolTemplate(ns, name string) *airlockv1.SandboxTemplate {
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	lim := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	return &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: airlockv1.SandboxTemplateSpec{Image: sandboxImage, RuntimeClassName: "gvisor",
			Resources: &airlockv1.SizeResources{Small: &corev1.ResourceRequirements{Requests: req, Limits: lim}}}}
}

// newPool creates a template and a pool of it in ns and waits until the pool has replicas ready members.
func newPool(t testing.TB, ns, name string, replicas int32, mutate ...func(*airlockv1.SandboxPool)) *airlockv1.SandboxPool {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, poolTemplate(ns, name)); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating template: %v", err)
	}
	p := &airlockv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: airlockv1.SandboxPoolSpec{TemplateRef: airlockv1.TemplateReference{Name: name}, Replicas: replicas}}
	for _, m := range mutate {
		m(p)
	}
	// The suite waits for the Sandbox CRDs only; the pool CRD may need a moment more.
	eventually(t, 30*time.Second, "creating pool "+name, func() error { return k8s.Create(ctx, p) })
	waitPoolReady(t, ns, name, replicas)
	return p
}

func waitPoolReady(t testing.TB, ns, name string, n int32) *airlockv1.SandboxPool {
	t.Helper()
	p := &airlockv1.SandboxPool{}
	eventually(t, 3*readyTimeout, fmt.Sprintf("pool %s has %d ready members", name, n), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return err
		}
		if p.Status.ReadyMembers < n {
			return fmt.Errorf("%d ready, %d members, %d stale: %v; members: %s", p.Status.ReadyMembers, p.Status.Members, p.Status.StaleMembers,
				p.Status.Conditions, describeMembers(t, ns, name))
		}
		return nil
	})
	return p
}

// describeMembers says, for a failure message, how far each of the pool's members got.
func describeMembers(t testing.TB, ns, pool string) string {
	var b strings.Builder
	for _, m := range members(t, ns, pool) {
		fmt.Fprintf(&b, "\n  %s %s created %s:", m.Name, m.Status.Phase, m.CreationTimestamp.Format(time.TimeOnly))
		for _, c := range m.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				fmt.Fprintf(&b, " %s: %s;", c.Type, c.Message)
			}
		}
		for _, c := range m.Status.ContainerStatuses {
			switch st := c.State; {
			case st.Waiting != nil:
				fmt.Fprintf(&b, " %s waiting %s %s;", c.Name, st.Waiting.Reason, st.Waiting.Message)
			case st.Running != nil:
				fmt.Fprintf(&b, " %s running;", c.Name)
			case st.Terminated != nil:
				fmt.Fprintf(&b, " %s exited %d %s;", c.Name, st.Terminated.ExitCode, strings.TrimSpace(st.Terminated.Message))
			}
		}
	}
	return b.String()
}

func withPool(name string) func(*airlockv1.Sandbox) {
	return func(s *airlockv1.Sandbox) {
		s.Spec.PoolRef = &airlockv1.PoolReference{Name: name}
		s.Spec.TemplateRef.Name = name
	}
}

// shIn runs a command in the sandbox's pod, which for a warm claim is the member's, not named after it.
func shIn(t testing.TB, s *airlockv1.Sandbox, command string) *podexec.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := engine.Run(ctx, podexec.Request{Namespace: s.Namespace, Pod: s.Status.PodName, Container: sandbox.ContainerName,
		SupervisorKey: s.Status.SupervisorKey, Shell: command, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", command, s.Name, err)
	}
	return res
}

func members(t testing.TB, ns, pool string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{sandbox.LabelPool: pool}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		// A claimed pod keeps the pool's label; the members are the pods the pool controls.
		if ref := metav1.GetControllerOf(&p); p.DeletionTimestamp == nil && ref != nil && ref.Kind == "SandboxPool" {
			out = append(out, p)
		}
	}
	return out
}

// TestPoolRacingClaims: more sandboxes than ready members race for them on a real cluster; each member is
// claimed once, the rest are created cold, and every one of them runs commands in its own, isolated pod.
func TestPoolRacingClaims(t *testing.T) {
	ns := newTenant(t)
	newPool(t, ns, "race", 3)
	var wg sync.WaitGroup
	for i := range 7 {
		wg.Add(1)
		go func() { defer wg.Done(); createSandbox(t, ns, fmt.Sprintf("race-%d", i), withPool("race")) }()
	}
	wg.Wait()
	pods := map[string]string{}
	var warm, cold int
	for i := range 7 {
		s := waitReady(t, ns, fmt.Sprintf("race-%d", i))
		if s.Status.Pool == nil {
			t.Fatalf("%s: no claim recorded: %s", s.Name, describe(s))
		}
		switch s.Status.Pool.Result {
		case airlockv1.ClaimWarm:
			warm++
		case airlockv1.ClaimCold:
			cold++
			if s.Status.PodName != s.Name {
				t.Errorf("%s: cold, but its pod is %s", s.Name, s.Status.PodName)
			}
		}
		if other, dup := pods[s.Status.PodName]; dup {
			t.Fatalf("pod %s claimed by both %s and %s", s.Status.PodName, other, s.Name)
		}
		pods[s.Status.PodName] = s.Name
		if got := strings.TrimSpace(shIn(t, s, "hostname; id -u").Stdout); got != "sandbox\n1000" {
			t.Errorf("%s: %q", s.Name, got)
		}
		if open, detail := probe(t, ns, s.Status.PodName, internetIP, 80); open {
			t.Errorf("%s: reached the internet stand-in: %s", s.Name, detail)
		}
	}
	if warm != 3 || cold != 4 {
		t.Fatalf("%d warm and %d cold claims, want exactly 3 and 4", warm, cold)
	}
}

// TestPoolDeletionLeavesClaimsIsolated: a claim leaves the member's policy as it is, so that policy must not
// go with the pool. Deleting the pool (the garbage collector removes its unclaimed members and their policies)
// leaves a claimed sandbox its policy and its isolation; deleting the sandbox then removes both.
func TestPoolDeletionLeavesClaimsIsolated(t *testing.T) {
	ns := newTenant(t)
	pool := newPool(t, ns, "gone", 2)
	createSandbox(t, ns, "kept", withPool("gone"))
	s := waitReady(t, ns, "kept")
	if s.Status.Pool == nil || s.Status.Pool.Result != airlockv1.ClaimWarm {
		t.Fatalf("claim %+v, want warm", s.Status.Pool)
	}
	unclaimed := members(t, ns, "gone")
	ctx := context.Background()
	np := &networkingv1.NetworkPolicy{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Status.PodName}, np); err != nil {
		t.Fatal(err)
	}
	uid := np.UID
	if err := k8s.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the pool's unclaimed members and their policies are gone", func() error {
		for _, m := range unclaimed {
			for _, o := range []client.Object{&corev1.Pod{}, &networkingv1.NetworkPolicy{}} {
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(&m), o); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%T %s: %v", o, m.Name, err)
				}
			}
		}
		return nil
	})
	// The same object: one deleted with the pool and made again by the Sandbox's reconciler would have left
	// the pod without a policy for a moment, and connections opened then survive a new one.
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Status.PodName}, np); err != nil || np.UID != uid {
		t.Fatalf("the claimed sandbox's policy went with the pool: %v (uid %s, was %s)", err, np.UID, uid)
	}
	if open, detail := probe(t, ns, s.Status.PodName, internetIP, 80); open {
		t.Errorf("after the pool's deletion, the claimed sandbox reached the internet stand-in: %s", detail)
	}
	if got := strings.TrimSpace(shIn(t, s, "echo still-here").Stdout); got != "still-here" {
		t.Errorf("exec after the pool's deletion: %q", got)
	}
	if got := waitReady(t, ns, "kept"); !meta.IsStatusConditionTrue(got.Status.Conditions, airlockv1.ConditionNetworkIsolated) {
		t.Errorf("after the pool's deletion: %v", got.Status.Conditions)
	}
	if err := k8s.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the sandbox's pod, then its policy, are gone", func() error {
		for _, o := range []client.Object{&corev1.Pod{}, np} {
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Status.PodName}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T: %v", o, err)
			}
		}
		return nil
	})
}

// TestPoolTemplateChangeReplacesMembers: after a template change every unclaimed member is replaced by one of
// the new generation, and a claim gets only the new one.
func TestPoolTemplateChangeReplacesMembers(t *testing.T) {
	ns := newTenant(t)
	newPool(t, ns, "roll", 2)
	ctx := context.Background()
	tmpl := &airlockv1.SandboxTemplate{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "roll"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Env = []airlockv1.EnvVar{{Name: "TEMPLATE_GEN", Value: "two"}}
	start := time.Now()
	if err := k8s.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*readyTimeout, "every unclaimed member is of the new generation", func() error {
		p := &airlockv1.SandboxPool{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "roll"}, p); err != nil {
			return err
		}
		ms := members(t, ns, "roll")
		for _, m := range ms {
			if m.Annotations[sandbox.AnnotationTemplateGeneration] != fmt.Sprint(tmpl.Generation) {
				return fmt.Errorf("member %s is of generation %s", m.Name, m.Annotations[sandbox.AnnotationTemplateGeneration])
			}
		}
		if p.Status.TemplateGeneration != tmpl.Generation || p.Status.ReadyMembers < 2 || len(ms) != 2 {
			return fmt.Errorf("status %+v, %d members", p.Status, len(ms))
		}
		return nil
	})
	t.Logf("template change to every unclaimed member of the new generation and ready: %s", time.Since(start).Round(time.Millisecond))
	createSandbox(t, ns, "new-gen", withPool("roll"))
	s := waitReady(t, ns, "new-gen")
	if s.Status.Pool.Result != airlockv1.ClaimWarm || s.Status.Pool.TemplateGeneration != tmpl.Generation {
		t.Fatalf("claim %+v, want warm of generation %d", s.Status.Pool, tmpl.Generation)
	}
	if got := strings.TrimSpace(shIn(t, s, "echo $TEMPLATE_GEN").Stdout); got != "two" {
		t.Fatalf("TEMPLATE_GEN=%q: the member was not made from the new template", got)
	}
}

// TestPoolDrainedFallsBackCold: a claim on a drained pool creates its pod cold and says so; the pool reports
// Drained until it refills.
func TestPoolDrainedFallsBackCold(t *testing.T) {
	ns := newTenant(t)
	newPool(t, ns, "drain", 1)
	createSandbox(t, ns, "first", withPool("drain"))
	createSandbox(t, ns, "second", withPool("drain"))
	first, second := waitReady(t, ns, "first"), waitReady(t, ns, "second")
	results := map[airlockv1.PoolClaimResult]*airlockv1.Sandbox{first.Status.Pool.Result: first, second.Status.Pool.Result: second}
	cold, warm := results[airlockv1.ClaimCold], results[airlockv1.ClaimWarm]
	if cold == nil || warm == nil {
		t.Fatalf("claims %+v and %+v, want one warm and one cold", first.Status.Pool, second.Status.Pool)
	}
	if !strings.Contains(cold.Status.Pool.Message, "no ready member") {
		t.Errorf("cold claim says %q", cold.Status.Pool.Message)
	}
	var events corev1.EventList
	eventually(t, 30*time.Second, "the pool's Drained event", func() error {
		if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "Drained" && e.InvolvedObject.Name == "drain" {
				return nil
			}
		}
		return fmt.Errorf("no Drained event among %d", len(events.Items))
	})
	p := waitPoolReady(t, ns, "drain", 1)
	if meta.IsStatusConditionTrue(p.Status.Conditions, airlockv1.PoolConditionDrained) {
		t.Errorf("refilled pool still Drained: %v", p.Status.Conditions)
	}
}

// TestPoolReplacesDeadAndExposedMembers: a member that dies, or that another policy selects, is replaced and
// never handed out.
func TestPoolReplacesDeadAndExposedMembers(t *testing.T) {
	ns := newTenant(t)
	newPool(t, ns, "heal", 2)
	ctx := context.Background()
	ms := members(t, ns, "heal")
	dead, exposed := ms[0], ms[1]
	// The member's sandbox container dies (its PID 1 is killed from outside the sandbox, as an OOM would).
	if err := k8s.Delete(ctx, &dead, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	open := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-egress"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{sandbox.LabelPod: exposed.Name}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if err := k8s.Create(ctx, open); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the exposed member is replaced", func() error {
		p := &corev1.Pod{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(&exposed), p)
		if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	p := waitPoolReady(t, ns, "heal", 2)
	for _, m := range members(t, ns, "heal") {
		if m.Name == dead.Name || m.Name == exposed.Name {
			t.Fatalf("member %s is still in the pool: %+v", m.Name, p.Status)
		}
	}
	createSandbox(t, ns, "after", withPool("heal"))
	s := waitReady(t, ns, "after")
	if s.Status.PodName == dead.Name || s.Status.PodName == exposed.Name || s.Status.Pool.Result != airlockv1.ClaimWarm {
		t.Fatalf("claim %+v into %s", s.Status.Pool, s.Status.PodName)
	}
}

// TestPoolGatewayLateEnv: a gateway create with env on a template that has a pool is warm, and every command
// sees the env, which the member's pod was made without.
func TestPoolGatewayLateEnv(t *testing.T) {
	g := gateway(t)
	ns, key := gatewayTenant(t, 5)
	ctx := context.Background()
	if err := k8s.Delete(ctx, &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "python-node"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "replacing the tenant's template", func() error { return k8s.Create(ctx, poolTemplate(ns, "python-node")) })
	p := &airlockv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "python-node"},
		Spec: airlockv1.SandboxPoolSpec{TemplateRef: airlockv1.TemplateReference{Name: "python-node"}, Replicas: 1}}
	eventually(t, 30*time.Second, "creating pool", func() error { return k8s.Create(ctx, p) })
	waitPoolReady(t, ns, "python-node", 1)
	time.Sleep(time.Second) // the gateway's pool cache

	start := time.Now()
	code, body := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"env": map[string]string{"TASK_ID": "t-42"}})
	took := time.Since(start)
	if code != 201 || body["status"] != "ready" || body["start"] != "warm" {
		t.Fatalf("create: %d %v", code, body)
	}
	t.Logf("warm create through the gateway: 201 Ready in %s", took.Round(time.Millisecond))
	id := str(t, body, "id")
	res := g.execCmd(t, key, id, "echo $TASK_ID; env | grep -c TASK_ID", 10000)
	if got := strings.TrimSpace(fmt.Sprint(res["stdout"])); got != "t-42\n1" {
		t.Fatalf("stdout %q, want the claim's env", got)
	}
	s, err := getSandbox(ns, id)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Status.PodName}, pod); err != nil {
		t.Fatal(err)
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "TASK_ID" {
			t.Fatalf("the claim's env is in the pod spec")
		}
	}
}

// TestPoolGatewayScopedSecret: a create with a secret is still warm; the command sees the secret, the output
// shows it masked, it is in neither the pod nor the Sandbox, and its Secret is gone once the sandbox expired.
func TestPoolGatewayScopedSecret(t *testing.T) {
	g := gateway(t)
	ns, key := gatewayTenant(t, 5)
	ctx := context.Background()
	if err := k8s.Delete(ctx, &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "python-node"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "replacing the tenant's template", func() error { return k8s.Create(ctx, poolTemplate(ns, "python-node")) })
	p := &airlockv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "python-node"},
		Spec: airlockv1.SandboxPoolSpec{TemplateRef: airlockv1.TemplateReference{Name: "python-node"}, Replicas: 1}}
	eventually(t, 30*time.Second, "creating pool", func() error { return k8s.Create(ctx, p) })
	waitPoolReady(t, ns, "python-node", 1)
	time.Sleep(time.Second) // the gateway's pool cache

	const token = "ghp_e2eS3cretT0ken"
	code, body := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"timeout_minutes": 1, "secrets": map[string]string{"GIT_TOKEN": token}})
	if code != 201 || body["status"] != "ready" || body["start"] != "warm" {
		t.Fatalf("create: %d %v", code, body)
	}
	id := str(t, body, "id")
	res := g.execCmd(t, key, id, `echo "token=$GIT_TOKEN"; printf %s "$GIT_TOKEN" | sha256sum | cut -c1-16`, 10000)
	if got := fmt.Sprint(res["stdout"]); !strings.HasPrefix(got, "token=[masked:GIT_TOKEN]\n") || strings.Contains(got, token) {
		t.Fatalf("stdout %q: want the secret masked", got)
	}
	s, err := getSandbox(ns, id)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Status.PodName}, pod); err != nil {
		t.Fatal(err)
	}
	for _, o := range []any{s, pod} {
		if strings.Contains(fmt.Sprintf("%+v", o), token) {
			t.Fatalf("the secret is in %T", o)
		}
	}
	// The command saw the real value: its hash, not the mask's, is what came back.
	if got := strings.TrimSpace(strings.TrimPrefix(fmt.Sprint(res["stdout"]), "token=[masked:GIT_TOKEN]\n")); got != sha16(token) {
		t.Fatalf("hash %q, want %q: the command did not see the secret", got, sha16(token))
	}
	secret := client.ObjectKey{Namespace: ns, Name: id + "-secrets"}
	if err := k8s.Get(ctx, secret, &corev1.Secret{}); err != nil {
		t.Fatalf("the sandbox's Secret: %v", err)
	}
	eventually(t, 2*time.Minute+readyTimeout, "the expired sandbox's Secret is deleted", func() error {
		if _, err := getSandbox(ns, id); !apierrors.IsNotFound(err) {
			return fmt.Errorf("sandbox still there: %v", err)
		}
		if err := k8s.Get(ctx, secret, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("secret still there: %v", err)
		}
		return nil
	})
}

func sha16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}
