package controller

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// TestIntegrationAPIRefusesReservedEnv: the API server refuses, by the CRDs' CEL rule, a Sandbox or
// SandboxTemplate whose env sets one of Airlock's own variables (AIRLOCK_NODE_IP="" once skipped PID 1's network
// gate, AIRLOCK_MEMORY_GUARD=off its memory guard) or a Go runtime variable, which would reach PID 1, with a
// message naming the variable. A SandboxPool takes no env: its members' is its template's. Without the rule on
// EnvVar.name the creates succeed: checked.
func TestIntegrationAPIRefusesReservedEnv(t *testing.T) {
	_, c := startEnv(t)
	ctx := context.Background()
	ns := newNamespace(t, c)
	for i, e := range []airlockv1.EnvVar{{Name: "AIRLOCK_NODE_IP"}, {Name: "AIRLOCK_MEMORY_GUARD", Value: "off"},
		{Name: "AIRLOCK_PROCESS_LIMIT", Value: "100000"}, {Name: "GODEBUG", Value: "x509sha1=1"}} {
		ok := airlockv1.EnvVar{Name: "TASK", Value: "1"}
		for kind, obj := range map[string]client.Object{
			"Sandbox":         makeSandbox(ns, "s"+strings.Repeat("x", i)).image("img").env(ok, e).obj(),
			"SandboxTemplate": makeTemplate(ns, "t"+strings.Repeat("x", i), "img").env(ok, e).obj(),
		} {
			err := c.Create(ctx, obj)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.env[1].name") || !strings.Contains(err.Error(), e.Name+" is reserved") {
				t.Errorf("%s with env %s: got %v, want Invalid naming spec.env[1].name and the variable", kind, e.Name, err)
			}
		}
	}
	allowed := []airlockv1.EnvVar{{Name: "GOPATH", Value: "/go"}, {Name: "airlock_node_ip"}, {Name: "HTTP_PROXY", Value: "http://p:3128"}}
	if err := c.Create(ctx, makeSandbox(ns, "allowed").image("img").env(allowed...).obj()); err != nil {
		t.Errorf("a Sandbox with ordinary env: %v", err)
	}
	if err := c.Create(ctx, makeTemplate(ns, "allowed", "img").env(allowed...).obj()); err != nil {
		t.Errorf("a SandboxTemplate with ordinary env: %v", err)
	}

	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": airlockv1.GroupVersion.String(), "kind": "SandboxPool",
		"metadata": map[string]any{"name": "p", "namespace": ns},
		"spec": map[string]any{"templateRef": map[string]any{"name": "allowed"}, "replicas": int64(0),
			"env": []any{map[string]any{"name": "AIRLOCK_NODE_IP", "value": ""}}},
	}}
	if err := c.Create(ctx, pool, client.FieldValidation("Strict")); err == nil || !strings.Contains(err.Error(), `unknown field "spec.env"`) {
		t.Errorf("a SandboxPool with env: got %v, want the unknown field spec.env refused", err)
	}
}
