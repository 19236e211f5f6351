package chart

import (
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// The gateway's short API requests get a priority level of their own on both install paths, with the same
// spec; the exec subresource is not among them (APF does not limit long-running requests anyway).
func TestGatewayFlowControl(t *testing.T) {
	for release, gwName := range map[string]string{"airlock": "airlock-gateway", "other": "other-airlock-gateway"} {
		out, stderr, err := helmTemplate(t, chartDir(t), release)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		objs := parse(t, out)
		fs := into[flowcontrolv1.FlowSchema](t, objs.must(t, "FlowSchema", "", gwName))
		if fs.Spec.PriorityLevelConfiguration.Name != gwName || objs.get("PriorityLevelConfiguration", "", gwName) == nil {
			t.Errorf("%s: FlowSchema refers to PriorityLevelConfiguration %q", release, fs.Spec.PriorityLevelConfiguration.Name)
		}
		want := flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindServiceAccount,
			ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: gwName, Namespace: releaseNamespace}}
		if objs.get("ServiceAccount", releaseNamespace, gwName) == nil {
			t.Errorf("%s: no ServiceAccount %s", release, gwName)
		}
		for _, r := range fs.Spec.Rules {
			if len(r.Subjects) != 1 || !reflect.DeepEqual(r.Subjects[0], want) {
				t.Errorf("%s: FlowSchema subjects %+v, want only the gateway's ServiceAccount", release, r.Subjects)
			}
			for _, rr := range r.ResourceRules {
				for _, res := range rr.Resources {
					if res == "*" || res == "pods/exec" {
						t.Errorf("%s: FlowSchema covers %q: only short requests belong to it", release, res)
					}
				}
			}
		}
		// The replicas count the ready endpoints of the Service they serve behind.
		args := into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, gwName)).Spec.Template.Spec.Containers[0].Args
		if into[corev1.Service](t, objs.must(t, "Service", releaseNamespace, gwName)) == nil || !slices.Contains(args, "--service-name="+gwName) {
			t.Errorf("%s: gateway args %v, want --service-name=%s", release, args, gwName)
		}
	}

	chart, kz := render(t), readYAML(t, "config/gateway/flowcontrol.yaml")
	for _, kind := range []string{"FlowSchema", "PriorityLevelConfiguration"} {
		c, k := chart.must(t, kind, "", "airlock-gateway"), kz.must(t, kind, "", "airlock-gateway")
		if !reflect.DeepEqual(c.Object["spec"], k.Object["spec"]) {
			t.Errorf("%s spec: chart %v, config/gateway %v", kind, c.Object["spec"], k.Object["spec"])
		}
	}
	off := render(t, "--set", "gateway.flowControl.enabled=false")
	if len(off.kind("FlowSchema"))+len(off.kind("PriorityLevelConfiguration")) > 0 {
		t.Error("gateway.flowControl.enabled=false still renders flow control objects")
	}
}

// Replicas may read the EndpointSlices of their own namespace, nothing else and nowhere else.
func TestGatewayPeersRole(t *testing.T) {
	objs := render(t)
	role := into[rbacv1.Role](t, objs.must(t, "Role", releaseNamespace, "airlock-gateway-peers"))
	want := []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("peers Role rules %v, want %v", role.Rules, want)
	}
	rb := into[rbacv1.RoleBinding](t, objs.must(t, "RoleBinding", releaseNamespace, "airlock-gateway-peers"))
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != "airlock-gateway" {
		t.Errorf("peers RoleBinding %+v %+v", rb.RoleRef, rb.Subjects)
	}
	for _, u := range objs.kind("ClusterRole") {
		for _, r := range into[rbacv1.ClusterRole](t, u).Rules {
			if slices.Contains(r.Resources, "endpointslices") {
				t.Errorf("ClusterRole %s grants endpointslices cluster-wide", u.GetName())
			}
		}
	}
}
