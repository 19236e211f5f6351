package chart

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"airlock.dev/airlock/internal/webhook/execguard"
)

// The exec guard's objects agree with each other and with the manager's flags: the configuration calls the
// Service that reaches the manager's webhook port, guards exactly the gateway's service account, fails closed,
// and the manager may touch only its own Secret and configuration.
func TestExecGuardWebhook(t *testing.T) {
	const name = "airlock-exec-guard"
	for _, set := range [][]string{nil, {"--set", "manager.replicas=2,manager.leaderElection=false"}, valueSets["local-cluster"]} {
		objs := render(t, set...)
		vwc := into[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs.must(t, "ValidatingWebhookConfiguration", "", name))
		if len(vwc.Webhooks) != 1 {
			t.Fatalf("%v: %d webhooks", set, len(vwc.Webhooks))
		}
		w := vwc.Webhooks[0]
		gatewaySA, _, _ := unstructuredString(objs.must(t, "Deployment", releaseNamespace, "airlock-gateway"), "spec", "template", "spec", "serviceAccountName")
		wantUser := fmt.Sprintf("request.userInfo.username == 'system:serviceaccount:%s:%s'", releaseNamespace, gatewaySA)
		if len(w.MatchConditions) != 1 || w.MatchConditions[0].Expression != wantUser {
			t.Errorf("matchConditions %+v, want only %s", w.MatchConditions, wantUser)
		}
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail || w.SideEffects == nil ||
			*w.SideEffects != admissionregistrationv1.SideEffectClassNone || !reflect.DeepEqual(w.AdmissionReviewVersions, []string{"v1"}) ||
			w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 || len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("webhook settings %+v", w)
		}
		wantRules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
				Resources: []string{"pods/exec", "pods/attach", "pods/portforward", "pods/proxy"}, Scope: ptrTo(admissionregistrationv1.NamespacedScope)}}}
		if !reflect.DeepEqual(w.Rules, wantRules) {
			t.Errorf("rules %+v", w.Rules)
		}
		svcRef := w.ClientConfig.Service
		if svcRef == nil || svcRef.Path == nil || *svcRef.Path != execguard.Path || svcRef.Namespace != releaseNamespace || svcRef.Port == nil {
			t.Fatalf("clientConfig %+v", w.ClientConfig)
		}
		svc := into[corev1.Service](t, objs.must(t, "Service", releaseNamespace, svcRef.Name))
		mgr := into[appsv1.Deployment](t, objs.must(t, "Deployment", releaseNamespace, "airlock-manager"))
		port := -1
		for _, p := range svc.Spec.Ports {
			if p.Port == *svcRef.Port {
				for _, cp := range mgr.Spec.Template.Spec.Containers[0].Ports {
					if cp.Name == p.TargetPort.String() {
						port = int(cp.ContainerPort)
					}
				}
			}
		}
		secret := objs.must(t, "Secret", releaseNamespace, "airlock-manager-webhook-cert")
		if _, hasData := secret.Object["data"]; hasData {
			t.Error("the chart must not render the certificate Secret's data: an upgrade would wipe the manager's certificate")
		}
		a := mgr.Spec.Template.Spec.Containers[0].Args
		for _, want := range []string{"--exec-webhook=true", fmt.Sprintf("--webhook-bind-address=:%d", port),
			"--webhook-cert-secret=" + releaseNamespace + "/" + secret.GetName(), "--webhook-config-name=" + name,
			"--webhook-cert-hosts=" + svc.Name + "." + releaseNamespace + ".svc"} {
			if !slices.Contains(a, want) {
				t.Errorf("%v: manager args %v lack %s", set, a, want)
			}
		}
	}

	objs := render(t)
	role := into[rbacv1.Role](t, objs.must(t, "Role", releaseNamespace, "airlock-manager-webhook"))
	wantRole := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"airlock-manager-webhook-cert"}, Verbs: []string{"get", "update"}}}
	if !reflect.DeepEqual(role.Rules, wantRole) {
		t.Errorf("certificate Role rules %v", role.Rules)
	}
	cr := into[rbacv1.ClusterRole](t, objs.must(t, "ClusterRole", "", "airlock-manager-webhook"))
	wantCR := []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, ResourceNames: []string{name}, Verbs: []string{"get", "patch"}}}
	if !reflect.DeepEqual(cr.Rules, wantCR) {
		t.Errorf("webhook ClusterRole rules %v", cr.Rules)
	}

	for _, off := range []string{"manager.execWebhook.enabled=false", "gateway.enabled=false"} {
		objs := render(t, "--set", off)
		for _, u := range objs {
			if u.GetKind() == "ValidatingWebhookConfiguration" || strings.Contains(u.GetName(), "webhook") {
				t.Errorf("%s still renders %s %s", off, u.GetKind(), u.GetName())
			}
		}
		for _, a := range args(t, objs, "airlock-manager") {
			if strings.Contains(a, "webhook") {
				t.Errorf("%s: manager still has %s", off, a)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
