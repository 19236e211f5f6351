package chart

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"airlock.dev/airlock/internal/gateway/admin"
)

// grantsExec reports whether rules allow pods/exec.
func grantsExec(rules []rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, "pods/exec") || slices.Contains(r.Resources, "*")) {
			return true
		}
	}
	return false
}

// execBindings lists the ClusterRoleBindings that grant pods/exec, and the namespaces where RoleBindings do.
func execBindings(t *testing.T, objs objects) (clusterWide []string, namespaces []string) {
	t.Helper()
	clusterRoleExec := func(name string) bool {
		u := objs.get("ClusterRole", "", name)
		return u != nil && grantsExec(into[rbacv1.ClusterRole](t, u).Rules)
	}
	for _, u := range objs.kind("ClusterRoleBinding") {
		if b := into[rbacv1.ClusterRoleBinding](t, u); clusterRoleExec(b.RoleRef.Name) {
			clusterWide = append(clusterWide, b.Name)
		}
	}
	for _, u := range objs.kind("RoleBinding") {
		b := into[rbacv1.RoleBinding](t, u)
		exec := b.RoleRef.Kind == "ClusterRole" && clusterRoleExec(b.RoleRef.Name)
		if r := objs.get("Role", b.Namespace, b.RoleRef.Name); b.RoleRef.Kind == "Role" && r != nil {
			exec = grantsExec(into[rbacv1.Role](t, r).Rules)
		}
		if exec {
			namespaces = append(namespaces, b.Namespace)
		}
	}
	slices.Sort(namespaces)
	return clusterWide, namespaces
}

// pods/exec is bound only in tenant namespaces, whatever the values, unless gateway.rbac.clusterWideExec opts
// in. Binding the exec ClusterRole cluster-wide again (chart or config/gateway) fails this test.
func TestExecIsBoundOnlyInTenants(t *testing.T) {
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			wide, nss := execBindings(t, render(t, args...))
			if len(wide) > 0 {
				t.Errorf("pods/exec bound cluster-wide by %v", wide)
			}
			var want []string
			switch name {
			case "tenants":
				want = []string{"team-a", "team-b"}
			case "local-cluster":
				want = []string{"team-a"}
			}
			if !reflect.DeepEqual(nss, want) {
				t.Errorf("pods/exec bound in %v, want the tenants %v", nss, want)
			}
		})
	}
	// The explicit opt-in, and only it, binds exec cluster-wide.
	if wide, _ := execBindings(t, render(t, "--set", "gateway.rbac.clusterWideExec=true")); len(wide) != 1 {
		t.Errorf("clusterWideExec=true: cluster-wide exec bindings %v, want one", wide)
	}
	// kustomize has no tenants: config/gateway grants exec nowhere; `airlock tenant create` binds it per tenant.
	var kz objects
	for _, f := range []string{"config/gateway/rbac.yaml", "config/rbac/role.yaml", "config/rbac/role_binding.yaml"} {
		kz = append(kz, readYAML(t, f)...)
	}
	if wide, nss := execBindings(t, kz); len(wide)+len(nss) > 0 {
		t.Errorf("config/ binds pods/exec: cluster-wide %v, in %v", wide, nss)
	}
}

// `airlock tenant create` makes the very RoleBinding the chart makes for its tenants, to the ClusterRole that
// both install paths define with the same rules, for the gateway's ServiceAccount as both name it.
func TestCLIExecBindingMatchesTheInstall(t *testing.T) {
	objs := render(t, valueSets["tenants"]...)
	rb := into[rbacv1.RoleBinding](t, objs.must(t, "RoleBinding", "team-a", admin.ExecBindingName))
	want := rbacv1.Subject{Kind: "ServiceAccount", Name: admin.DefaultGatewayServiceAccount, Namespace: admin.DefaultGatewayNamespace}
	if rb.RoleRef.Name != admin.DefaultExecClusterRole || len(rb.Subjects) != 1 || rb.Subjects[0] != want {
		t.Errorf("chart exec binding %+v %+v; the CLI makes %s -> %s for %+v", rb.RoleRef, rb.Subjects, admin.ExecBindingName, admin.DefaultExecClusterRole, want)
	}
	chartRole := into[rbacv1.ClusterRole](t, objs.must(t, "ClusterRole", "", admin.DefaultExecClusterRole)).Rules
	kzRole := into[rbacv1.ClusterRole](t, readYAML(t, "config/gateway/rbac.yaml").must(t, "ClusterRole", "", admin.DefaultExecClusterRole)).Rules
	if !reflect.DeepEqual(chartRole, kzRole) || !grantsExec(chartRole) {
		t.Errorf("exec ClusterRole: chart %v, config/gateway %v", chartRole, kzRole)
	}
	for _, r := range chartRole {
		if !reflect.DeepEqual(r.Resources, []string{"pods"}) && !reflect.DeepEqual(r.Resources, []string{"pods/exec"}) {
			t.Errorf("exec ClusterRole grants more than pods and pods/exec: %v", r)
		}
	}
}

// /metrics is never on the gateway's API port nor readable anonymously from the manager or the gateway; the
// ServiceMonitors still reach both, with the scraper's token.
func TestMetricsAreServedApart(t *testing.T) {
	objs := render(t, append(valueSets["service-monitor"], "--set", "gateway.service.type=LoadBalancer")...)
	gw := into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, "airlock-gateway")).Spec.Template.Spec.Containers[0]
	if !slices.Contains(gw.Args, "--metrics-listen=:9090") || !hasPort([]corev1.Container{gw}, "metrics") {
		t.Errorf("gateway args %v ports %v: want --metrics-listen=:9090 and a metrics port", gw.Args, gw.Ports)
	}
	api := into[corev1.Service](t, objs.must(t, "Service", releaseNamespace, "airlock-gateway"))
	for _, p := range api.Spec.Ports {
		if p.TargetPort.String() != "http" {
			t.Errorf("the API Service (type %s) exposes port %v", api.Spec.Type, p)
		}
	}
	gwm := into[corev1.Service](t, objs.must(t, "Service", releaseNamespace, "airlock-gateway-metrics"))
	if gwm.Spec.Type != corev1.ServiceTypeClusterIP || len(gwm.Spec.Ports) != 1 || gwm.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("gateway metrics Service %+v", gwm.Spec)
	}
	np := into[networkingv1.NetworkPolicy](t, objs.must(t, "NetworkPolicy", releaseNamespace, "airlock-gateway"))
	var ports []string
	for _, p := range np.Spec.Ingress[0].Ports {
		ports = append(ports, p.Port.String())
	}
	if !slices.Contains(ports, "9090") || !slices.Contains(ports, "8080") {
		t.Errorf("gateway NetworkPolicy admits ports %v, want the API's and /metrics'", ports)
	}

	mgr := into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, "airlock-manager")).Spec.Template.Spec.Containers[0]
	if !slices.Contains(mgr.Args, "--metrics-bind-address=:8443") {
		t.Errorf("manager args %v", mgr.Args)
	}
	// The manager and the gateway ask the API server about each scraper's token.
	for _, role := range []string{"airlock-manager", "airlock-gateway"} {
		var canReview []string
		for _, r := range into[rbacv1.ClusterRole](t, objs.must(t, "ClusterRole", "", role)).Rules {
			if slices.Contains(r.Verbs, "create") {
				canReview = append(canReview, r.Resources...)
			}
		}
		if !slices.Contains(canReview, "tokenreviews") || !slices.Contains(canReview, "subjectaccessreviews") {
			t.Errorf("%s may create %v: it needs tokenreviews and subjectaccessreviews for /metrics", role, canReview)
		}
	}
	reader := into[rbacv1.ClusterRole](t, objs.must(t, "ClusterRole", "", "airlock-metrics-reader")).Rules
	wantReader := into[rbacv1.ClusterRole](t, readYAML(t, "config/rbac/metrics_reader_role.yaml")[0]).Rules
	if !reflect.DeepEqual(reader, wantReader) || len(reader) != 1 || !reflect.DeepEqual(reader[0].NonResourceURLs, []string{"/metrics"}) || !reflect.DeepEqual(reader[0].Verbs, []string{"get"}) {
		t.Errorf("metrics-reader rules %v (config/rbac: %v), want GET /metrics only", reader, wantReader)
	}

	// ServiceMonitors: each selects exactly its metrics Service, on a port it has; the manager's with a token
	// the chart's scraper ServiceAccount gets from the metrics-reader binding.
	sms := map[string]*unstructured.Unstructured{}
	for _, u := range objs.kind("ServiceMonitor") {
		sms[u.GetName()] = u
	}
	for sm, svc := range map[string]string{"airlock-manager-metrics": "airlock-manager-metrics", "airlock-gateway-metrics": "airlock-gateway-metrics"} {
		u := sms[sm]
		if u == nil {
			t.Errorf("no ServiceMonitor %s; have %v", sm, sms)
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
		var matched []string
		for _, su := range objs.kind("Service") {
			if labels.SelectorFromSet(sel).Matches(labels.Set(su.GetLabels())) {
				matched = append(matched, su.GetName())
			}
		}
		if !reflect.DeepEqual(matched, []string{svc}) {
			t.Errorf("ServiceMonitor %s selects Services %v, want [%s]", sm, matched, svc)
		}
		eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
		ep := eps[0].(map[string]any)
		if ep["port"] != "metrics" || !slices.ContainsFunc(into[corev1.Service](t, objs.must(t, "Service", releaseNamespace, svc)).Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
			t.Errorf("ServiceMonitor %s scrapes port %v, which Service %s lacks", sm, ep["port"], svc)
		}
	}
	// Both are scraped as the manager's always was: HTTPS and the scraper's token. A gateway ServiceMonitor
	// without them would get 401 from the gateway's authorized /metrics.
	var secretName string
	for _, sm := range []string{"airlock-manager-metrics", "airlock-gateway-metrics"} {
		eps, _, _ := unstructured.NestedSlice(sms[sm].Object, "spec", "endpoints")
		ep := eps[0].(map[string]any)
		name, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
		skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify")
		if ep["scheme"] != "https" || name == "" || !skip || (secretName != "" && name != secretName) {
			t.Fatalf("%s ServiceMonitor endpoint %v: want https, the scraper's token Secret, and the self-signed certificate accepted", sm, ep)
		}
		secretName = name
	}
	sec := into[corev1.Secret](t, objs.must(t, "Secret", releaseNamespace, secretName))
	sa := sec.Annotations[corev1.ServiceAccountNameKey]
	if sec.Type != corev1.SecretTypeServiceAccountToken || objs.get("ServiceAccount", releaseNamespace, sa) == nil {
		t.Fatalf("token Secret %s: type %s for ServiceAccount %q", secretName, sec.Type, sa)
	}
	bound := false
	for _, u := range objs.kind("ClusterRoleBinding") {
		b := into[rbacv1.ClusterRoleBinding](t, u)
		if b.RoleRef.Name == "airlock-metrics-reader" && slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: releaseNamespace}) {
			bound = true
		}
	}
	if !bound {
		t.Errorf("ServiceAccount %s is not bound to airlock-metrics-reader: Prometheus would get 403", sa)
	}
	if render(t).get("ServiceAccount", releaseNamespace, sa) != nil {
		t.Errorf("the scraper ServiceAccount %s is rendered without serviceMonitor.enabled", sa)
	}
}

// The manager writes pods and NetworkPolicies only in tenants: no cluster-wide grant of any write to them,
// one RoleBinding per tenant, while it still reads them cluster-wide for its caches. Adding a write verb back to
// the cluster-wide ClusterRole (a marker without roleName) fails this: checked.
func TestManagerWritesOnlyInTenants(t *testing.T) {
	writes := []string{"create", "update", "patch", "delete", "deletecollection", "*"}
	for name, objs := range map[string]objects{"chart": render(t, valueSets["tenants"]...), "config/default": kustomizeInstall(t)} {
		g := grants(t, objs, "airlock-manager")
		for _, res := range []string{"pods", "pods/exec", "pods/log"} {
			for _, v := range writes {
				if g["*||"+res+"|"+v] {
					t.Errorf("%s: the manager may %s %s cluster-wide", name, v, res)
				}
			}
		}
		for _, v := range writes {
			if g["*|networking.k8s.io|networkpolicies|"+v] {
				t.Errorf("%s: the manager may %s NetworkPolicies cluster-wide", name, v)
			}
		}
		for _, read := range []string{"*||pods|list", "*||pods|watch", "*|networking.k8s.io|networkpolicies|watch"} {
			if !g[read] {
				t.Errorf("%s: the manager lacks %s, which its caches need", name, read)
			}
		}
		var nss []string
		for p := range g {
			if strings.HasSuffix(p, "||pods|create") {
				ns, _, _ := strings.Cut(p, "|")
				nss = append(nss, ns)
			}
		}
		slices.Sort(nss)
		want := []string{"team-a", "team-b"}
		if name == "config/default" {
			want = nil // `airlock tenant create` binds it per tenant
		}
		if !reflect.DeepEqual(nss, want) {
			t.Errorf("%s: the manager may create pods in %v, want the tenants %v", name, nss, want)
		}
	}
}

// `airlock tenant create` makes the manager's RoleBinding the chart makes for its tenants, to the ClusterRole
// both install paths define, for the manager's ServiceAccount as both name it.
func TestCLIManagerBindingMatchesTheInstall(t *testing.T) {
	objs := render(t, valueSets["tenants"]...)
	rb := into[rbacv1.RoleBinding](t, objs.must(t, "RoleBinding", "team-a", admin.ManagerBindingName))
	want := rbacv1.Subject{Kind: "ServiceAccount", Name: admin.DefaultManagerServiceAccount, Namespace: admin.DefaultGatewayNamespace}
	if rb.RoleRef.Name != admin.DefaultManagerClusterRole || len(rb.Subjects) != 1 || rb.Subjects[0] != want {
		t.Errorf("chart manager binding %+v %+v; the CLI makes %s -> %s for %+v", rb.RoleRef, rb.Subjects, admin.ManagerBindingName, admin.DefaultManagerClusterRole, want)
	}
	for name, objs := range map[string]objects{"chart": objs, "config/rbac": readYAML(t, "config/rbac/role.yaml")} {
		if objs.get("ClusterRole", "", admin.DefaultManagerClusterRole) == nil {
			t.Errorf("%s has no ClusterRole %s for the CLI to bind", name, admin.DefaultManagerClusterRole)
		}
	}
}
