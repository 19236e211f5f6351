package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// k8sBinDir is where hack/build-k8s.sh put kubectl, kube-apiserver and etcd (make envtest-assets).
func k8sBinDir(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	home, _ := os.UserHomeDir()
	cache := os.Getenv("AIRLOCK_CACHE")
	if cache == "" {
		cache = filepath.Join(home, ".cache", "airlock")
	}
	return filepath.Join(cache, "k8s", readVar(t, filepath.Join(repoRoot(t), "hack", "versions.env"), "K8S_VERSION="))
}

// kustomizeInstall renders what `make deploy` applies, config/default and config/keys, with the project-built
// kubectl (fails if it is not built).
func kustomizeInstall(t testing.TB) objects {
	t.Helper()
	return parse(t, kustomize(t, filepath.Join(repoRoot(t), "config", "default"))+"\n---\n"+kustomize(t, filepath.Join(repoRoot(t), "config", "keys")))
}

// kustomizeInto renders config/default under an overlay that sets `namespace: ns`, as a user installing
// elsewhere would write it.
func kustomizeInto(t testing.TB, ns string) (objects, string) {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes only relative paths to a base: link the repository's config/ into the overlay.
	if err := os.Symlink(filepath.Join(repoRoot(t), "config"), filepath.Join(dir, "config")); err != nil {
		t.Fatal(err)
	}
	k := "namespace: " + ns + "\nresources:\n- config/default\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out := kustomize(t, dir)
	return parse(t, out), out
}

// kustomize renders the kustomization in dir with the project-built kubectl.
func kustomize(t testing.TB, dir string) string {
	t.Helper()
	kubectl := os.Getenv("AIRLOCK_KUBECTL")
	if kubectl == "" {
		kubectl = filepath.Join(k8sBinDir(t), "kubectl")
	}
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl not built (%s): run `make envtest-assets` (make test-chart does)", kubectl)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	return string(out)
}

// `make deploy` (kustomize) and `helm install airlock` with default values install the same objects, with the
// same RBAC; only Helm's own labels differ.
func TestKustomizeDeploysWhatTheChartDeploys(t *testing.T) {
	kz := kustomizeInstall(t)
	out, stderr, err := helmTemplate(t, chartDir(t), "airlock", "--include-crds")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	chart := parse(t, out)
	for _, u := range chart {
		key := u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
		if kz.get(u.GetKind(), u.GetNamespace(), u.GetName()) == nil {
			if why, ok := chartOnly[key]; ok {
				t.Logf("chart only: %s (%s)", key, why)
				continue
			}
			t.Errorf("the chart renders %s but config/default does not", key)
		}
	}
	for _, u := range kz {
		if chart.get(u.GetKind(), u.GetNamespace(), u.GetName()) == nil && u.GetKind() != "Namespace" {
			t.Errorf("config/default has %s %s/%s but the chart does not render it", u.GetKind(), u.GetNamespace(), u.GetName())
		}
	}
	// Manager: the same generated rules. Gateway: whatever the chart grants (cluster-wide or per tenant),
	// config/gateway grants too, so the gateway never needs more under Helm than under kustomize.
	for _, sa := range []string{"airlock-manager", "airlock-gateway"} {
		kzp, chp := grants(t, kz, sa), grants(t, chart, sa)
		if sa == "airlock-manager" && !reflect.DeepEqual(kzp, chp) {
			t.Errorf("manager permissions differ:\n kustomize %v\n chart     %v", keys(kzp), keys(chp))
		}
		for p := range chp {
			if !kzp[p] && !kzp[clusterWide(p)] {
				t.Errorf("%s: the chart grants %s, config/default does not", sa, p)
			}
		}
	}
	// pods/exec: neither path binds it cluster-wide; the chart binds it in its tenants, `airlock tenant create`
	// in the others (kustomize has none).
	for path, objs := range map[string]objects{"config/default": kz, "chart": chart} {
		if wide, nss := execBindings(t, objs); len(wide)+len(nss) > 0 {
			t.Errorf("%s binds pods/exec without a tenant: cluster-wide %v, in %v", path, wide, nss)
		}
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	for _, u := range kz.kind("Deployment") {
		d := into[appsv1.Deployment](t, u)
		for _, res := range eval.EvaluatePod(lv, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
			if !res.Allowed {
				t.Errorf("config/default %s: restricted PSS: %s: %s", d.Name, res.ForbiddenReason, res.ForbiddenDetail)
			}
		}
		c := into[appsv1.Deployment](t, chart.must(t, "Deployment", d.Namespace, d.Name))
		kc, hc := d.Spec.Template.Spec.Containers[0], c.Spec.Template.Spec.Containers[0]
		if kc.Image != hc.Image {
			t.Errorf("%s image: kustomize %s, chart %s", d.Name, kc.Image, hc.Image)
		}
		// Every flag kustomize sets, the chart sets to the same value (the chart spells out more defaults).
		// kustomize writes the namespace as $(POD_NAMESPACE), which the kubelet expands.
		for _, a := range kc.Args {
			if !strings.HasPrefix(a, "--") {
				continue
			}
			a = strings.ReplaceAll(a, "$(POD_NAMESPACE)", d.Namespace)
			name, _, _ := strings.Cut(a, "=")
			found := false
			for _, b := range hc.Args {
				if b == a || (name == "--leader-elect" && b == "--leader-elect=true") {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: kustomize sets %s, the chart's args are %v", d.Name, a, hc.Args)
			}
		}
	}
}

// Objects only the chart renders, and why; anything else missing from config/default and config/keys fails
// the test.
var chartOnly = map[string]string{
	"SandboxTemplate airlock-system/python-node":         "default templates; kustomize users apply config/samples",
	"SandboxTemplate airlock-system/python-3.11":         "the default template under its Python's name (docs/sandbox-images.md)",
	"NetworkPolicy airlock-system/airlock-gateway":       "chart value networkPolicy.enabled",
	"PodDisruptionBudget airlock-system/airlock-gateway": "chart renders it for replicas > 1",
}

// grants lists what service account sa (in airlock-system) may do, one "scope|group|resource|verb" per entry;
// scope is "*" for a ClusterRoleBinding and the namespace for a RoleBinding.
func grants(t *testing.T, objs objects, sa string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	rules := func(kind, ns, name string) []rbacv1.PolicyRule {
		u := objs.get(kind, ns, name)
		if u == nil {
			t.Errorf("binding for %s refers to missing %s %s/%s", sa, kind, ns, name)
			return nil
		}
		return into[rbacv1.ClusterRole](t, u).Rules
	}
	add := func(scope string, rs []rbacv1.PolicyRule) {
		for _, r := range rs {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out[scope+"|"+g+"|"+res+"|"+v] = true
					}
				}
			}
		}
	}
	bound := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == releaseNamespace {
				return true
			}
		}
		return false
	}
	for _, u := range objs.kind("ClusterRoleBinding") {
		if b := into[rbacv1.ClusterRoleBinding](t, u); bound(b.Subjects) {
			add("*", rules("ClusterRole", "", b.RoleRef.Name))
		}
	}
	for _, u := range objs.kind("RoleBinding") {
		if b := into[rbacv1.RoleBinding](t, u); bound(b.Subjects) {
			ns := ""
			if b.RoleRef.Kind == "Role" {
				ns = b.Namespace
			}
			add(b.Namespace, rules(b.RoleRef.Kind, ns, b.RoleRef.Name))
		}
	}
	return out
}

func clusterWide(p string) string { _, rest, _ := strings.Cut(p, "|"); return "*|" + rest }

func keys(m map[string]bool) []string {
	var k []string
	for p := range m {
		k = append(k, p)
	}
	sort.Strings(k)
	return k
}

// The admission policy that adds the Sandbox finalizer is the same under Helm as under kustomize, and Helm
// leaves it out on a cluster without MutatingAdmissionPolicy v1 (before Kubernetes 1.36), where the manager
// adds the finalizer itself.
func TestFinalizerPolicyMatchesKustomize(t *testing.T) {
	kz := kustomizeInstall(t)
	chart := render(t)
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		k, c := kz.get(kind, "", "airlock-sandbox-finalizer"), chart.get(kind, "", "airlock-sandbox-finalizer")
		if k == nil || c == nil {
			t.Fatalf("%s: kustomize %v, chart %v", kind, k != nil, c != nil)
		}
		if !reflect.DeepEqual(k.Object["spec"], c.Object["spec"]) {
			t.Errorf("%s spec differs:\n kustomize %v\n chart     %v", kind, k.Object["spec"], c.Object["spec"])
		}
	}
	out, err := exec.Command(helmBinary(t), "template", "airlock", chartDir(t), "--namespace", releaseNamespace).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(string(out), "kind: MutatingAdmissionPolicy") {
		t.Error("rendered for a cluster without MutatingAdmissionPolicy v1")
	}
}

// config/default rendered into another namespace by an overlay (`namespace: elsewhere`) still guards the
// gateway: the exec guard is called for the moved gateway's exec and for no other identity, the webhook calls
// the moved Service, and nothing in the render still names airlock-system (a flag or a subject left behind).
// With the condition naming airlock-system, as it did, the moved gateway is not guarded: checked.
func TestKustomizeIntoAnotherNamespaceGuardsTheGateway(t *testing.T) {
	const ns = "elsewhere"
	objs, out := kustomizeInto(t, ns)
	if strings.Contains(out, releaseNamespace) {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, releaseNamespace) {
				t.Errorf("the render into %s still names %s: %s", ns, releaseNamespace, strings.TrimSpace(l))
			}
		}
	}
	gw := into[appsv1.Deployment](t, objs.must(t, "Deployment", ns, "airlock-gateway"))
	gatewayUser := "system:serviceaccount:" + ns + ":" + gw.Spec.Template.Spec.ServiceAccountName
	for _, kz := range []objects{objs, kustomizeInstall(t)} {
		vwc := into[admissionregistrationv1.ValidatingWebhookConfiguration](t, kz.must(t, "ValidatingWebhookConfiguration", "", "airlock-exec-guard"))
		svc := vwc.Webhooks[0].ClientConfig.Service
		if svc == nil || kz.get("Service", svc.Namespace, svc.Name) == nil {
			t.Errorf("the exec guard calls Service %+v, which the render does not have", svc)
		}
		gwNS := into[appsv1.Deployment](t, kz.kind("Deployment")[0]).Namespace
		user := "system:serviceaccount:" + gwNS + ":airlock-gateway"
		if !guardCalledFor(t, vwc, user) {
			t.Errorf("the exec guard is not called for the gateway %s", user)
		}
		for _, other := range []string{"system:serviceaccount:" + gwNS + ":airlock-manager", "system:serviceaccount:" + gwNS + ":airlock-gateway-x",
			"system:serviceaccount:" + gwNS + ":x-airlock-gateway", "kubernetes-admin", "airlock-gateway"} {
			if guardCalledFor(t, vwc, other) {
				t.Errorf("the exec guard is called for %s", other)
			}
		}
	}
	if !guardCalledFor(t, into[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs.must(t, "ValidatingWebhookConfiguration", "", "airlock-exec-guard")), gatewayUser) {
		t.Errorf("moved gateway %s unguarded", gatewayUser)
	}
}
