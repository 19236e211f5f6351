package execguard

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

const ns = "team-a"

func ownedPair() (*corev1.Pod, *airlockv1.Sandbox) {
	sbx := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "conv-1", UID: "uid-1"},
		Status: airlockv1.SandboxStatus{PodName: "conv-1"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "conv-1",
		Labels: map[string]string{sandbox.LabelName: "conv-1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: airlockv1.GroupVersion.String(), Kind: "Sandbox",
			Name: "conv-1", UID: "uid-1", Controller: ptr.To(true)}}}}
	return pod, sbx
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*corev1.Pod, **airlockv1.Sandbox)
		want   string // "" admits
	}{
		{"sandbox pod", func(*corev1.Pod, **airlockv1.Sandbox) {}, ""},
		{"no owner", func(p *corev1.Pod, _ **airlockv1.Sandbox) { p.OwnerReferences = nil }, "no controller owns it"},
		{"owner is not the controller", func(p *corev1.Pod, _ **airlockv1.Sandbox) { p.OwnerReferences[0].Controller = nil }, "no controller owns it"},
		{"owned by a ReplicaSet", func(p *corev1.Pod, _ **airlockv1.Sandbox) {
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind = "apps/v1", "ReplicaSet"
		}, "controlled by ReplicaSet"},
		{"Sandbox kind of another group", func(p *corev1.Pod, _ **airlockv1.Sandbox) {
			p.OwnerReferences[0].APIVersion = "agents.x-k8s.io/v1alpha1"
		}, "controlled by Sandbox conv-1 (agents.x-k8s.io/v1alpha1)"},
		{"unparsable apiVersion", func(p *corev1.Pod, _ **airlockv1.Sandbox) { p.OwnerReferences[0].APIVersion = "a/b/c" }, "not a sandbox pod"},
		// A claimed pool member keeps the labels it was made with: its owner and the Sandbox's status decide.
		{"claimed pool member, labelled as made", func(p *corev1.Pod, _ **airlockv1.Sandbox) {
			p.Labels = map[string]string{sandbox.LabelName: "pool-abcde", sandbox.LabelPool: "pool"}
		}, ""},
		{"Sandbox gone", func(_ *corev1.Pod, s **airlockv1.Sandbox) { *s = nil }, "which does not exist"},
		{"Sandbox recreated under the same name", func(_ *corev1.Pod, s **airlockv1.Sandbox) { (*s).UID = "uid-2" }, "earlier Sandbox"},
		{"copied ownerReference on another pod", func(p *corev1.Pod, _ **airlockv1.Sandbox) { p.Name = "impostor" }, "not the pod Sandbox conv-1 records"},
		{"Sandbox has no pod yet", func(_ *corev1.Pod, s **airlockv1.Sandbox) { (*s).Status.PodName = "" }, "records"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod, sbx := ownedPair()
			c.mutate(pod, &sbx)
			err := Check(pod, sbx)
			if c.want == "" {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func request(t *testing.T, sub, pod, container string) admission.Request {
	t.Helper()
	raw, err := json.Marshal(&corev1.PodExecOptions{Container: container, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: types.UID("req"), Operation: admissionv1.Connect, Namespace: ns, Name: pod, SubResource: sub,
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object:   runtime.RawExtension{Raw: raw},
	}}
}

func TestHandle(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pod, sbx := ownedPair()
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	g := &Guard{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod, sbx, plain).Build()}
	ctx := context.Background()

	for _, c := range []struct {
		name string
		req  admission.Request
		want string // "" admits
	}{
		{"exec into the sandbox container", request(t, "exec", "conv-1", "sandbox"), ""},
		{"exec into a plain pod", request(t, "exec", "plain", "sandbox"), "no controller owns it"},
		{"exec into a missing pod", request(t, "exec", "gone", "sandbox"), "does not exist"},
		{"exec into another container", request(t, "exec", "conv-1", "debugger"), "only the \"sandbox\" container"},
		{"exec without a container", request(t, "exec", "conv-1", ""), "only the \"sandbox\" container"},
		{"attach", request(t, "attach", "conv-1", "sandbox"), "pods/attach is not allowed"},
		{"portforward", request(t, "portforward", "conv-1", ""), "pods/portforward is not allowed"},
		{"not CONNECT", func() admission.Request {
			r := request(t, "exec", "conv-1", "sandbox")
			r.Operation = admissionv1.Create
			return r
		}(), "only CONNECT"},
		{"garbled options", func() admission.Request {
			r := request(t, "exec", "conv-1", "sandbox")
			r.Object.Raw = []byte("{")
			return r
		}(), "decoding PodExecOptions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := g.Handle(ctx, c.req)
			if c.want == "" {
				if !resp.Allowed {
					t.Fatalf("denied: %v", resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result == nil || !strings.HasPrefix(resp.Result.Message, DenialPrefix) || !strings.Contains(resp.Result.Message, c.want) {
				t.Fatalf("got allowed=%v %v, want a denial containing %q", resp.Allowed, resp.Result, c.want)
			}
		})
	}
}
