package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"airlock.dev/airlock/internal/gateway/admin"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/version"
)

// The chart keeps copies of generated files (Helm cannot read outside the chart); they must be current.
func TestChartCopiesOfGeneratedFilesAreCurrent(t *testing.T) {
	root := repoRoot(t)
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs under config/crd/bases (%v)", err)
	}
	copies, _ := filepath.Glob(filepath.Join(chartDir(t), "crds", "*.yaml"))
	pairs := map[string]string{filepath.Join(root, "config", "rbac", "role.yaml"): filepath.Join(chartDir(t), "files", "manager-role.yaml")}
	for _, b := range bases {
		pairs[b] = filepath.Join(chartDir(t), "crds", filepath.Base(b))
	}
	if len(copies) != len(bases) {
		t.Errorf("charts/airlock/crds has %d files, config/crd/bases %d: run `make chart-sync`", len(copies), len(bases))
	}
	for src, dst := range pairs {
		a, errA := os.ReadFile(src)
		b, errB := os.ReadFile(dst)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s (or is missing): run `make chart-sync`", dst, src)
		}
	}
}

// The manager's ClusterRoles are exactly what controller-gen generated from the +kubebuilder:rbac markers:
// airlock-manager (bound cluster-wide) and airlock-manager-tenant (bound in tenants).
func TestManagerRulesEqualGeneratedRole(t *testing.T) {
	generated := readYAML(t, "config/rbac/role.yaml")
	if n := len(generated.kind("ClusterRole")); n != 2 {
		t.Fatalf("config/rbac/role.yaml has %d ClusterRoles, want airlock-manager and airlock-manager-tenant", n)
	}
	for _, name := range []string{"airlock-manager", "airlock-manager-tenant"} {
		want := into[rbacv1.ClusterRole](t, generated.must(t, "ClusterRole", "", name)).Rules
		got := into[rbacv1.ClusterRole](t, render(t).must(t, "ClusterRole", "", name)).Rules
		if !reflect.DeepEqual(got, want) {
			t.Errorf("chart %s rules differ from config/rbac/role.yaml:\n got %v\nwant %v", name, got, want)
		}
	}
	wantLE := into[rbacv1.Role](t, readYAML(t, "config/rbac/leader_election_role.yaml")[0]).Rules
	gotLE := into[rbacv1.Role](t, render(t).must(t, "Role", releaseNamespace, "airlock-leader-election")).Rules
	if !reflect.DeepEqual(gotLE, wantLE) {
		t.Errorf("leader election rules differ from config/rbac/leader_election_role.yaml:\n got %v\nwant %v", gotLE, wantLE)
	}
}

// Switches that change which pods are rendered; every pod must pass the restricted Pod Security Standard.
var valueSets = map[string][]string{
	"defaults":          nil,
	"kata-only":         {"--set", "runtimeClasses.kata.enabled=true,runtimeClasses.gvisor.enabled=false"},
	"tenants":           {"--set", "tenants[0].name=team-a,tenants[1].name=team-b,tenants[1].maxSandboxes=50"},
	"gateway-3":         {"--set", "gateway.replicas=3"},
	"service-monitor":   {"--set", "serviceMonitor.enabled=true"},
	"no-network-policy": {"--set", "networkPolicy.enabled=false"},
	"no-gateway":        {"--set", "gateway.enabled=false"},
	"manager-2-no-le":   {"--set", "manager.replicas=2,manager.leaderElection=false"},
	"local-cluster":     {"-f", "../../charts/airlock/ci/local-cluster-values.yaml"},
}

func TestPodsPassRestrictedPodSecurity(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			deps := render(t, args...).kind("Deployment")
			if len(deps) == 0 {
				t.Fatal("no Deployment rendered")
			}
			for _, u := range deps {
				d := into[appsv1.Deployment](t, u)
				for _, res := range eval.EvaluatePod(lv, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
					if !res.Allowed {
						t.Errorf("%s: restricted PSS: %s: %s", d.Name, res.ForbiddenReason, res.ForbiddenDetail)
					}
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
						t.Errorf("%s/%s: root filesystem must be read-only", d.Name, c.Name)
					}
					if c.ReadinessProbe == nil || c.LivenessProbe == nil {
						t.Errorf("%s/%s: needs readiness and liveness probes", d.Name, c.Name)
					}
					if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
						t.Errorf("%s/%s: needs a memory limit and a CPU request", d.Name, c.Name)
					}
					if c.ImagePullPolicy != corev1.PullIfNotPresent {
						t.Errorf("%s/%s: pull policy %s; locally imported images need IfNotPresent", d.Name, c.Name, c.ImagePullPolicy)
					}
				}
			}
		})
	}
}

// Every Service selects the pods of a rendered Deployment and targets a port those pods declare.
func TestServicesSelectPodsAndNamedPorts(t *testing.T) {
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs := render(t, args...)
			for _, u := range objs.kind("Service") {
				svc := into[corev1.Service](t, u)
				found := false
				for _, du := range objs.kind("Deployment") {
					d := into[appsv1.Deployment](t, du)
					if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
						continue
					}
					found = true
					for _, p := range svc.Spec.Ports {
						if !hasPort(d.Spec.Template.Spec.Containers, p.TargetPort.String()) {
							t.Errorf("service %s targets port %s, which deployment %s does not declare", svc.Name, p.TargetPort.String(), d.Name)
						}
					}
				}
				if !found {
					t.Errorf("service %s selects no rendered pods", svc.Name)
				}
			}
		})
	}
}

func hasPort(cs []corev1.Container, port string) bool {
	for _, c := range cs {
		for _, p := range c.Ports {
			if p.Name == port || fmt.Sprint(p.ContainerPort) == port {
				return true
			}
		}
	}
	return false
}

func args(t *testing.T, objs objects, deployment string) []string {
	t.Helper()
	return into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, deployment)).Spec.Template.Spec.Containers[0].Args
}

func TestManagerDeployment(t *testing.T) {
	objs := render(t)
	d := into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, "airlock-manager"))
	if d.Spec.Template.Spec.ServiceAccountName != "airlock-manager" {
		t.Errorf("service account %q", d.Spec.Template.Spec.ServiceAccountName)
	}
	want := []string{"--leader-elect=true", "--init-image=localhost/airlock/init:" + version.Version,
		"--default-runtime-class=gvisor", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081",
		"--isolating-handlers=runsc,runsc-*,gvisor,kata*", "--allow-unisolated-runtimes=false", "--allow-unverified-isolation=false",
		"--init-delivery=auto"}
	for _, w := range want {
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, w) {
			t.Errorf("manager args %v lack %s", d.Spec.Template.Spec.Containers[0].Args, w)
		}
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "localhost/airlock/manager:"+version.Version {
		t.Errorf("manager image %s", img)
	}
	// Kata only: the default runtime follows the one runtime class the chart installs.
	if a := args(t, render(t, valueSets["kata-only"]...), "airlock-manager"); !slices.Contains(a, "--default-runtime-class=kata") {
		t.Errorf("with only kata enabled the manager's default runtime class should be kata: %v", a)
	}
	// Isolation: the handler allowlist, the opt-in for runc and the gate target reach the manager.
	iso := args(t, render(t, "--set", "manager.isolatingHandlers={runsc,kata-qemu}", "--set", "manager.allowUnisolatedRuntimes=true",
		"--set", "manager.allowUnverifiedIsolation=true", "--set", "manager.networkGateTarget=10.0.0.1:10250"), "airlock-manager")
	for _, w := range []string{"--isolating-handlers=runsc,kata-qemu", "--allow-unisolated-runtimes=true", "--allow-unverified-isolation=true",
		"--gate-target=10.0.0.1:10250"} {
		if !slices.Contains(iso, w) {
			t.Errorf("manager args %v lack %s", iso, w)
		}
	}
	if slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--gate-target") }) {
		t.Error("an empty networkGateTarget must not pass --gate-target")
	}
	// Without leader election two managers would reconcile at once during a rolling update.
	noLE := into[appsv1.Deployment](t, render(t, valueSets["manager-2-no-le"]...).must(t, "Deployment", releaseNamespace, "airlock-manager"))
	if noLE.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || !slices.Contains(noLE.Spec.Template.Spec.Containers[0].Args, "--leader-elect=false") {
		t.Errorf("leaderElection=false: strategy %s, args %v", noLE.Spec.Strategy.Type, noLE.Spec.Template.Spec.Containers[0].Args)
	}
	if render(t, valueSets["manager-2-no-le"]...).get("Role", releaseNamespace, "airlock-leader-election") != nil {
		t.Error("leaderElection=false still renders the leader election Role")
	}
}

func TestRuntimeClasses(t *testing.T) {
	names := func(o objects) []string {
		var n []string
		for _, x := range o.kind("RuntimeClass") {
			n = append(n, x.GetName()+"="+fmt.Sprint(x.Object["handler"]))
		}
		sort.Strings(n)
		return n
	}
	if got := names(render(t)); !reflect.DeepEqual(got, []string{"gvisor=runsc"}) {
		t.Errorf("default runtime classes %v, want gvisor only", got)
	}
	kata := render(t, valueSets["kata-only"]...)
	if got := names(kata); !reflect.DeepEqual(got, []string{"kata=kata"}) {
		t.Errorf("kata-only runtime classes %v", got)
	}
	if oh, _, _ := unstructuredString(kata.must(t, "RuntimeClass", "", "kata"), "overhead", "podFixed", "memory"); oh != "160Mi" {
		t.Errorf("kata overhead memory %q, want 160Mi", oh)
	}
	// The local cluster creates gvisor itself: its values install no RuntimeClass yet default to gvisor.
	local := render(t, valueSets["local-cluster"]...)
	if got := names(local); len(got) != 0 || !slices.Contains(args(t, local, "airlock-manager"), "--default-runtime-class=gvisor") {
		t.Errorf("local-cluster values: runtime classes %v, manager args %v", got, args(t, local, "airlock-manager"))
	}
	_, stderr, err := helmTemplate(t, chartDir(t), "airlock", "--set", "runtimeClasses.gvisor.enabled=false")
	if err == nil || !strings.Contains(stderr, "manager.defaultRuntimeClass must be set") {
		t.Errorf("no runtime class and no default should fail clearly; err %v, stderr %s", err, stderr)
	}
}

func unstructuredString(u interface{ UnstructuredContent() map[string]any }, path ...string) (string, bool, error) {
	m := u.UnstructuredContent()
	for i, p := range path {
		v, ok := m[p]
		if !ok {
			return "", false, nil
		}
		if i == len(path)-1 {
			return fmt.Sprint(v), true, nil
		}
		if m, ok = v.(map[string]any); !ok {
			return "", false, fmt.Errorf("%s is not a map", p)
		}
	}
	return "", false, nil
}

func TestGatewayReplicasAndDisruptionBudget(t *testing.T) {
	for _, c := range []struct {
		replicas string
		pdb      bool
	}{{"1", false}, {"2", true}, {"3", true}} {
		objs := render(t, "--set", "gateway.replicas="+c.replicas)
		d := into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, "airlock-gateway"))
		if fmt.Sprint(*d.Spec.Replicas) != c.replicas {
			t.Errorf("replicas=%s rendered %d", c.replicas, *d.Spec.Replicas)
		}
		if got := objs.get("PodDisruptionBudget", releaseNamespace, "airlock-gateway") != nil; got != c.pdb {
			t.Errorf("replicas=%s: PodDisruptionBudget rendered=%v, want %v", c.replicas, got, c.pdb)
		}
		a := d.Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(a, "--key-namespace="+keyNamespace) || !slices.Contains(a, "--listen=:8080") {
			t.Errorf("gateway args %v", a)
		}
	}
}

// The gateway may exec only in tenant namespaces, reads Secrets only in its own, and nothing is granted "*".
func TestGatewayRBACIsLeastPrivilege(t *testing.T) {
	objs := render(t, valueSets["tenants"]...)
	cr := into[rbacv1.ClusterRole](t, objs.must(t, "ClusterRole", "", "airlock-gateway"))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"sandbox.airlock.dev"}, Resources: []string{"sandboxes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{"sandbox.airlock.dev"}, Resources: []string{"sandboxes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"sandbox.airlock.dev"}, Resources: []string{"sandboxtemplates"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"sandbox.airlock.dev"}, Resources: []string{"sandboxpools"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(cr.Rules, want) {
		t.Errorf("gateway cluster rules:\n got %v\nwant %v", cr.Rules, want)
	}
	for _, k := range []string{"ClusterRole", "Role"} {
		for _, u := range objs.kind(k) {
			for _, r := range into[rbacv1.ClusterRole](t, u).Rules {
				if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
					t.Errorf("%s %s grants a wildcard: %v", k, u.GetName(), r)
				}
				if k == "ClusterRole" && slices.Contains(r.Resources, "secrets") {
					t.Errorf("ClusterRole %s grants secrets cluster-wide", u.GetName())
				}
			}
		}
	}
	for _, u := range objs.kind("ClusterRoleBinding") {
		if into[rbacv1.ClusterRoleBinding](t, u).RoleRef.Name == "airlock-gateway-exec" {
			t.Error("pods/exec is bound cluster-wide although gateway.rbac.clusterWideExec is false")
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		rb := into[rbacv1.RoleBinding](t, objs.must(t, "RoleBinding", ns, "airlock-gateway-exec"))
		if rb.RoleRef.Name != "airlock-gateway-exec" || rb.Subjects[0].Name != "airlock-gateway" || rb.Subjects[0].Namespace != releaseNamespace {
			t.Errorf("exec binding in %s: %+v", ns, rb)
		}
	}
	// The gateway reads no Secret of the release namespace: the exec guard's CA and serving key, the metrics
	// scraper's token live there. Putting the key Role back there fails this (checked).
	for p := range grants(t, objs, "airlock-gateway") {
		if strings.HasPrefix(p, releaseNamespace+"|") && strings.Contains(p, "|secrets|") {
			t.Errorf("the gateway may %s: Secrets of the release namespace", p)
		}
	}
	keys := into[rbacv1.Role](t, objs.must(t, "Role", keyNamespace, "airlock-gateway-keys"))
	if len(keys.Rules) != 1 || !reflect.DeepEqual(keys.Rules[0].Resources, []string{"secrets"}) || slices.Contains(keys.Rules[0].Verbs, "create") {
		t.Errorf("key Role rules %v", keys.Rules)
	}
	wide := render(t, "--set", "gateway.rbac.clusterWideExec=true")
	if crb := wide.get("ClusterRoleBinding", "", "airlock-gateway-exec"); crb == nil {
		t.Error("clusterWideExec=true renders no ClusterRoleBinding for exec")
	}
}

func TestTenants(t *testing.T) {
	objs := render(t, "--set", "tenants[0].name=team-a,tenants[1].name=team-b,tenants[1].maxSandboxes=50,tenants[2].name=frozen,tenants[2].maxSandboxes=0,tenants[2].podSecurity=baseline")
	sandboxImage := defaultSandboxImage(t)
	for ns, want := range map[string]struct{ quota, pss string }{"team-a": {"20", "restricted"}, "team-b": {"50", "restricted"}, "frozen": {"0", "baseline"}} {
		n := objs.must(t, "Namespace", "", ns)
		for _, mode := range []string{"enforce", "audit", "warn"} {
			if got := n.GetLabels()["pod-security.kubernetes.io/"+mode]; got != want.pss {
				t.Errorf("namespace %s: %s=%q, want %s", ns, mode, got, want.pss)
			}
		}
		if n.GetLabels()["sandbox.airlock.dev/tenant"] != "true" || n.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("namespace %s: labels %v annotations %v", ns, n.GetLabels(), n.GetAnnotations())
		}
		q := into[corev1.ResourceQuota](t, objs.must(t, "ResourceQuota", ns, "airlock-sandboxes"))
		if got := q.Spec.Hard["count/sandboxes.sandbox.airlock.dev"]; got.String() != want.quota {
			t.Errorf("quota in %s = %s, want %s", ns, got.String(), want.quota)
		}
		tpl := objs.must(t, "SandboxTemplate", ns, "python-node")
		if img, _, _ := unstructuredString(tpl, "spec", "image"); img != sandboxImage {
			t.Errorf("template image in %s = %s, want %s (hack/images.sh ref sandbox)", ns, img, sandboxImage)
		}
		// That image carries airlock-init: the template runs it and mounts no init volume.
		if init, _, _ := unstructuredString(tpl, "spec", "init"); init != "Image" {
			t.Errorf("template init in %s = %q, want Image", ns, init)
		}
	}
	if objs := render(t, "--set", "tenants[0].name=a,tenantDefaults.keepOnUninstall=false"); len(objs.must(t, "Namespace", "", "a").GetAnnotations()) != 0 {
		t.Error("keepOnUninstall=false still keeps the namespace")
	}
	if _, stderr, err := helmTemplate(t, chartDir(t), "airlock", "--set", "tenants[0].name=a,tenants[1].name=a"); err == nil || !strings.Contains(stderr, "a is listed twice") {
		t.Errorf("duplicate tenant should fail; stderr %s", stderr)
	}
	// Each tenant lets the manager write sandbox pods and policies there, by the RoleBinding the CLI makes.
	for _, ns := range []string{"team-a", "team-b", "frozen"} {
		rb := into[rbacv1.RoleBinding](t, objs.must(t, "RoleBinding", ns, admin.ManagerBindingName))
		want := rbacv1.Subject{Kind: "ServiceAccount", Name: admin.DefaultManagerServiceAccount, Namespace: releaseNamespace}
		if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != admin.DefaultManagerClusterRole || len(rb.Subjects) != 1 || rb.Subjects[0] != want {
			t.Errorf("manager binding in %s: %+v %+v", ns, rb.RoleRef, rb.Subjects)
		}
	}
}

// Kubernetes' and Airlock's own namespaces can never be tenants: the schema refuses default and kube-* by the
// field's path, and the template refuses them too (with the schema skipped) and the release's and the keys'
// namespaces, with a message saying why. Without airlock.checkTenantName the template renders them: checked.
func TestSystemNamespacesAreNeverTenants(t *testing.T) {
	for _, name := range []string{"kube-system", "kube-public", "kube-node-lease", "default", releaseNamespace, keyNamespace} {
		for _, skipSchema := range []bool{false, true} {
			args := []string{"--set", "tenants[0].name=team-a,tenants[1].name=" + name}
			if skipSchema {
				args = append(args, "--skip-schema-validation")
			}
			_, stderr, err := helmTemplate(t, chartDir(t), "airlock", args...)
			byTemplate := strings.Contains(stderr, "tenants: "+name+" cannot be a tenant")
			bySchema := strings.Contains(stderr, "/tenants/1/name")
			switch {
			case err == nil:
				t.Errorf("tenant %s (schema skipped: %v) rendered", name, skipSchema)
			case skipSchema && !byTemplate, !skipSchema && !byTemplate && !bySchema:
				t.Errorf("tenant %s (schema skipped: %v): unclear refusal:\n%s", name, skipSchema, stderr)
			}
		}
	}
	for _, ns := range []string{"default", "kube-system"} {
		if _, stderr, err := helmTemplate(t, chartDir(t), "airlock", "--set", "gateway.keyNamespace="+ns, "--skip-schema-validation"); err == nil || !strings.Contains(stderr, "gateway.keyNamespace "+ns) {
			t.Errorf("keyNamespace %s: %v %s", ns, err, stderr)
		}
	}
	if _, stderr, err := helmTemplate(t, chartDir(t), "airlock", "--set", "gateway.keyNamespace="+releaseNamespace); err == nil || !strings.Contains(stderr, "must not be the release namespace") {
		t.Errorf("keyNamespace = release namespace: %v %s", err, stderr)
	}
}

// defaultSandboxImage is the image `hack/images.sh sandbox` builds: its ref_of line with the pinned version.
func defaultSandboxImage(t *testing.T) string {
	root := repoRoot(t)
	line := readVar(t, filepath.Join(root, "hack", "images.sh"), "\t\tsandbox) echo ")
	ref := strings.Trim(strings.TrimSuffix(strings.TrimSpace(line), ";;"), ` "`)
	return strings.ReplaceAll(ref, "${SANDBOX_IMAGE_VERSION}", readVar(t, filepath.Join(root, "hack", "versions.env"), "SANDBOX_IMAGE_VERSION="))
}

func TestGatewayNetworkPolicy(t *testing.T) {
	objs := render(t)
	np := into[networkingv1.NetworkPolicy](t, objs.must(t, "NetworkPolicy", releaseNamespace, "airlock-gateway"))
	d := into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, "airlock-gateway"))
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) || sel.Empty() {
		t.Fatalf("policy selector %v does not select (only) the gateway pods %v", np.Spec.PodSelector, d.Spec.Template.Labels)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 {
		t.Fatalf("ingress %+v", np.Spec.Ingress)
	}
	peer := np.Spec.Ingress[0].From[0]
	if peer.IPBlock != nil || peer.NamespaceSelector == nil || peer.PodSelector != nil {
		t.Fatalf("peer %+v should be a namespace selector only (in-cluster pods, no IP blocks)", peer)
	}
	nsSel, _ := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
	if nsSel.Matches(labels.Set{"sandbox.airlock.dev/tenant": "true"}) || !nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": "agents"}) {
		t.Errorf("namespace selector %s: tenant namespaces must be refused, others allowed", nsSel)
	}
	if objs := render(t, valueSets["no-network-policy"]...); len(objs.kind("NetworkPolicy")) != 0 {
		t.Error("networkPolicy.enabled=false still renders a NetworkPolicy")
	}
	if objs := render(t, "--set", "networkPolicy.allowFromTenantNamespaces=true"); len(into[networkingv1.NetworkPolicy](t, objs.must(t, "NetworkPolicy", releaseNamespace, "airlock-gateway")).Spec.Ingress[0].From[0].NamespaceSelector.MatchExpressions) != 0 {
		t.Error("allowFromTenantNamespaces=true still excludes tenant namespaces")
	}
}

func TestOptionalObjects(t *testing.T) {
	if n := len(render(t).kind("ServiceMonitor")); n != 0 {
		t.Errorf("ServiceMonitor rendered by default (%d)", n)
	}
	sm := render(t, valueSets["service-monitor"]...).kind("ServiceMonitor")
	if len(sm) != 2 {
		t.Errorf("serviceMonitor.enabled renders %d ServiceMonitors, want manager + gateway", len(sm))
	}
	for _, u := range render(t, valueSets["no-gateway"]...) {
		if strings.Contains(u.GetName(), "gateway") || u.GetLabels()["app.kubernetes.io/component"] == "gateway" {
			t.Errorf("gateway.enabled=false still renders %s %s", u.GetKind(), u.GetName())
		}
	}
}

// Bad values fail at install with the path of the bad value, before anything reaches the cluster.
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"gateway.replicas=0", "/gateway/replicas"},
		{"gateway.replicas=two", "/gateway/replicas"},
		{"gatway.replicas=2", "'gatway' not allowed"},
		{"tenants[0].name=Team_A", "/tenants/0/name"},
		{"tenants[0].name=" + strings.Repeat("a", 64), "/tenants/0/name"},
		{"tenants[0].maxSandboxes=-1", "/tenants/0"},
		{"tenantDefaults.podSecurity=strict", "/tenantDefaults/podSecurity"},
		{"manager.defaultTimeout=30 minutes", "/manager/defaultTimeout"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"runtimeClasses.kata.handler=", "/runtimeClasses/kata/handler"},
		{"sandboxTemplates.broken.size=small", "/sandboxTemplates/broken"},
		{"manager.maxTimeout=48h", "at most 24h"},
		{"tenants[0].name=kube-system", "/tenants/0/name"},
		{"tenants[0].name=default", "/tenants/0/name"},
		{"gateway.keyNamespace=kube-system", "/gateway/keyNamespace"},
	} {
		_, stderr, err := helmTemplate(t, chartDir(t), "airlock", "--set", c.set)
		if err == nil {
			t.Errorf("--set %s: rendered without error", c.set)
			continue
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("--set %s: error does not mention %q:\n%s", c.set, c.want, stderr)
		}
	}
}

// Names and label values stop at 63 characters, and truncation never makes two objects share a name.
func TestLongNamesAreTruncatedAndDistinct(t *testing.T) {
	for _, c := range []struct{ release string }{
		{strings.Repeat("r", 53)}, // helm's own limit on release names
		{"my-" + strings.Repeat("airlock", 7)},
	} {
		for _, extra := range [][]string{nil, {"--set", "fullnameOverride=" + strings.Repeat("f", 63)}, {"--set", "nameOverride=" + strings.Repeat("n", 63)}} {
			out, stderr, err := helmTemplate(t, chartDir(t), c.release, append(extra, "--set", "tenants[0].name=t", "--set", "serviceMonitor.enabled=true")...)
			if err != nil {
				t.Fatalf("release %s %v: %v\n%s", c.release, extra, err, stderr)
			}
			seen := map[string]bool{}
			for _, u := range parse(t, out) {
				key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
				if seen[key] {
					t.Errorf("release %s %v: two objects named %s", c.release, extra, key)
				}
				seen[key] = true
				if errs := validation.IsDNS1123Subdomain(u.GetName()); len(errs) > 0 || len(u.GetName()) > 63 {
					t.Errorf("release %s %v: name %q (%d chars): %v", c.release, extra, u.GetName(), len(u.GetName()), errs)
				}
				for k, v := range u.GetLabels() {
					if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
						t.Errorf("release %s %v: %s label %s=%q: %v", c.release, extra, key, k, v, errs)
					}
				}
			}
		}
	}
}

// One version everywhere: Makefile VERSION, internal/version, Chart appVersion, the kustomize images.
func TestVersionsAgree(t *testing.T) {
	root := repoRoot(t)
	mk := readVar(t, filepath.Join(root, "Makefile"), "VERSION ?= ")
	app := readVar(t, filepath.Join(chartDir(t), "Chart.yaml"), "appVersion: ")
	if mk != version.Version || app != version.Version {
		t.Errorf("Makefile VERSION %s, internal/version %s, Chart appVersion %s must agree", mk, version.Version, app)
	}
	for _, f := range []string{"config/manager/manager.yaml", "config/gateway/deployment.yaml"} {
		for _, u := range readYAML(t, f).kind("Deployment") {
			d := into[appsv1.Deployment](t, u)
			img := d.Spec.Template.Spec.Containers[0].Image
			if !strings.HasPrefix(img, version.ImageRepository+"/") || !strings.HasSuffix(img, ":"+version.Version) {
				t.Errorf("%s: image %s is not %s/...:%s", f, img, version.ImageRepository, version.Version)
			}
		}
	}
}

// NOTES.txt tells the user how to make a key and run a first command. Helm renders NOTES only on install, so
// a copy of the chart renders it into a ConfigMap instead.
func TestNotes(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "files", "NOTES.txt")); err != nil {
		t.Fatal(err)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: |\n    {{- tpl (.Files.Get \"files/NOTES.txt\") . | nindent 4 }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-test.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := helmTemplate(t, dir, "airlock", "--set", "tenants[0].name=team-a", "--show-only", "templates/notes-test.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	notes, _, _ := unstructuredString(parse(t, out)[0], "data", "notes")
	for _, want := range []string{
		"airlock keys create --tenant team-a --key-namespace airlock-keys",
		"kubectl -n airlock-keys create secret generic",
		"sandbox.airlock.dev/api-key=true sandbox.airlock.dev/tenant=team-a",
		"port-forward svc/airlock-gateway 8080:80",
		"http://localhost:8080/v1/sandboxes/$SBX/exec",
		"http://airlock-gateway.airlock-system.svc:80",
		// Tenants outside the chart get the same per-tenant RoleBindings as the chart's, named for this release.
		"airlock tenant create NAME --gateway-namespace airlock-system --key-namespace airlock-keys",
		"--gateway-service-account airlock-gateway --exec-cluster-role airlock-gateway-exec",
		"--manager-service-account airlock-manager --manager-cluster-role airlock-manager-tenant",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	// Cluster-wide exec is never suggested, only warned about when chosen.
	if strings.Contains(notes, "clusterWideExec") {
		t.Errorf("NOTES mention clusterWideExec although it is off:\n%s", notes)
	}
	// The kubectl-only recipe must make keys the gateway accepts: run its ID= and KEY= lines and its hash.
	var script []string
	for _, l := range strings.Split(notes, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "ID=") || strings.HasPrefix(l, "KEY=\"alk_") {
			script = append(script, l)
		}
	}
	if len(script) != 2 {
		t.Fatalf("NOTES should have one ID= and one KEY= line, found %q", script)
	}
	for i := 0; i < 20; i++ {
		out, err := exec.Command("bash", "-c", strings.Join(script, "\n")+"\n"+`printf '%s %s %s' "$ID" "$KEY" "$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)"`).Output()
		if err != nil {
			t.Fatalf("running the NOTES key recipe: %v", err)
		}
		f := strings.Fields(string(out))
		if len(f) != 3 {
			t.Fatalf("recipe output %q", out)
		}
		id, err := auth.ParseKey(f[1])
		if err != nil || id != f[0] || auth.HashKey(f[1]) != f[2] {
			t.Fatalf("NOTES recipe made key %q id %q hash %q: ParseKey id %q err %v, HashKey %q", f[1], f[0], f[2], id, err, auth.HashKey(f[1]))
		}
	}
}
