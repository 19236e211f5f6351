package helm

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// allowed asks the cluster's authorizer whether ServiceAccount namespace/sa may do attrs.
func allowed(t *testing.T, c client.Client, sa string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + namespace + ":" + sa,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		ResourceAttributes: &attrs,
	}}
	if err := c.Create(context.Background(), sar); err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return sar.Status.Allowed
}

// checkInstalledRBAC asks the cluster what the installed ServiceAccounts may do: the manager writes pods only in
// tenants (a stolen manager token cannot start a pod in kube-system), the gateway reads the API keys but not
// the exec guard's certificate.
func checkInstalledRBAC(t *testing.T, c client.Client) {
	t.Helper()
	for _, ns := range []string{"kube-system", "default", namespace} {
		for _, verb := range []string{"create", "delete", "patch"} {
			if allowed(t, c, release+"-manager", authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "pods"}) {
				t.Errorf("the manager may %s pods in %s", verb, ns)
			}
		}
	}
	if !allowed(t, c, release+"-manager", authorizationv1.ResourceAttributes{Namespace: tenant, Verb: "create", Resource: "pods"}) {
		t.Errorf("the manager may not create pods in the tenant %s", tenant)
	}
	if allowed(t, c, release+"-gateway", authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: "secrets", Name: release + "-manager-webhook-cert"}) {
		t.Error("the gateway may read the exec guard's certificate Secret")
	}
	if !allowed(t, c, release+"-gateway", authorizationv1.ResourceAttributes{Namespace: keyNamespace, Verb: "watch", Resource: "secrets"}) {
		t.Errorf("the gateway may not watch the key Secrets in %s", keyNamespace)
	}
}

// checkSandboxOutsideATenant creates a Sandbox in a namespace that is not a tenant: the in-cluster manager
// creates nothing there and says why on Ready.
func checkSandboxOutsideATenant(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "helm-not-tenant-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// Removed before the test uninstalls the manager, which must release the Sandbox's finalizer.
	defer func() {
		_ = c.Delete(ctx, &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "s1"}})
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "s1"}, &airlockv1.Sandbox{}); apierrors.IsNotFound(err) {
				_ = c.Delete(ctx, ns)
				return
			}
		}
		t.Errorf("the sandbox in %s was not removed within a minute", ns.Name)
	}()
	sbx := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "s1"},
		Spec: airlockv1.SandboxSpec{Image: "localhost/airlock/sandbox-python:0.1.0"}}
	if err := c.Create(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	var ready *metav1.Condition
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(sbx), sbx); err != nil {
			t.Fatal(err)
		}
		if ready = meta.FindStatusCondition(sbx.Status.Conditions, airlockv1.ConditionReady); ready != nil && ready.Reason == "NamespaceNotTenant" {
			break
		}
	}
	if ready == nil || ready.Reason != "NamespaceNotTenant" || !strings.Contains(ready.Message, "airlock tenant create "+ns.Name) {
		t.Fatalf("sandbox outside a tenant: Ready %+v", ready)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns.Name)); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods in a namespace that is not a tenant: %d (%v)", len(pods.Items), err)
	}
}

// checkGatewayMetricsNeedAToken scrapes the in-cluster gateway's /metrics without a token: HTTPS, 401.
func checkGatewayMetricsNeedAToken(t *testing.T, kubectl, kubeconfig string) {
	t.Helper()
	base := portForward(t, kubectl, kubeconfig, "app.kubernetes.io/component=gateway-metrics")
	url := strings.Replace(base, "http://", "https://", 1) + "/metrics"
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed, as Prometheus is configured
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous GET /metrics from the in-cluster gateway: %d, want 401", resp.StatusCode)
	}
}
