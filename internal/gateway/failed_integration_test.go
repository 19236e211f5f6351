package gateway

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// A command to a sandbox whose pod was evicted is refused with the pod's own reason, as the controller wrote it
// into the Ready condition: the agent learns why its files are gone.
func TestIntegrationExecOnEvictedSandboxSaysWhy(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	id := g.readySandbox(t, ns, t.TempDir())
	var sb airlockv1.Sandbox
	if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: id}, &sb); err != nil {
		t.Fatal(err)
	}
	evicted := `the sandbox's pod stopped: Evicted: Usage of EmptyDir volume "workdir" exceeds the limit "1Gi".`
	sb.Status.Phase = airlockv1.PhaseFailed
	sb.Status.Conditions = []metav1.Condition{{Type: airlockv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: "PodFailed", Message: evicted, LastTransitionTime: metav1.Now()}}
	if err := g.c.Status().Update(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	code, body := g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", `{"command": "true"}`)
	e, _ := body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if code != 409 || errPhase(body) != "failed" || e["reason"] != "PodFailed" || !strings.HasSuffix(msg, ": "+evicted) {
		t.Fatalf("want 409 failed carrying the eviction, got %d %v", code, body)
	}
}
