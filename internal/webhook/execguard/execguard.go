// Package execguard is a validating admission webhook for CONNECT to pods, as defense in depth behind the
// gateway's RBAC: the webhook configuration sends it only the gateway's own requests (matchConditions on its
// service account), and it admits a command only in the sandbox container of a pod that a live Sandbox
// controls and records as its pod. A ValidatingAdmissionPolicy cannot do this: for CONNECT it sees only the
// PodExecOptions, never the pod.
package execguard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// Path is where the manager serves the guard; webhook configurations name it.
const Path = "/exec-guard"

// DenialPrefix starts every message of the guard's own: callers (and tests) tell its denials from RBAC's or
// the kubelet's by it.
const DenialPrefix = "airlock exec guard: "

// Guard is the admission handler. Reader should be a live reader (the manager's API reader): the manager's
// pod cache holds only pods labelled as sandboxes, and a guard should not trust a label to find a pod.
type Guard struct {
	Reader client.Reader
}

// Handle admits a CONNECT to pods/exec into the sandbox container of a pod Check accepts; every other CONNECT,
// and every error, is a denial.
func (g *Guard) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx)
	resp := g.decide(ctx, req)
	if !resp.Allowed {
		log.Info("denied", "subresource", req.SubResource, "reason", resp.Result.Message) // the logger names user and pod
	}
	return resp
}

func (g *Guard) decide(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Connect || req.Resource.Group != "" || req.Resource.Resource != "pods" {
		return deny("it handles only CONNECT to pods, not %s %s", req.Operation, req.Resource.Resource)
	}
	if req.SubResource != "exec" {
		// The gateway never attaches, port-forwards or proxies: those would reach past the sandbox's command API.
		return deny("pods/%s is not allowed for this identity: it may only run commands (pods/exec) in sandbox pods", req.SubResource)
	}
	pod := &corev1.Pod{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return deny("pod %s/%s does not exist", req.Namespace, req.Name)
		}
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("%sreading pod %s/%s: %w", DenialPrefix, req.Namespace, req.Name, err))
	}
	owner, err := SandboxOwner(pod)
	if err != nil {
		return deny("%v", err)
	}
	sbx := &airlockv1.Sandbox{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, sbx); err != nil {
		if !apierrors.IsNotFound(err) {
			return admission.Errored(http.StatusInternalServerError, fmt.Errorf("%sreading Sandbox %s/%s: %w", DenialPrefix, pod.Namespace, owner.Name, err))
		}
		sbx = nil
	}
	if err := Check(pod, sbx); err != nil {
		return deny("%v", err)
	}
	var opts corev1.PodExecOptions
	if err := json.Unmarshal(req.Object.Raw, &opts); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("%sdecoding PodExecOptions: %w", DenialPrefix, err))
	}
	if opts.Container != sandbox.ContainerName {
		return deny("exec into container %q of pod %s/%s: only the %q container may be used", opts.Container, req.Namespace, req.Name, sandbox.ContainerName)
	}
	return admission.Allowed("")
}

func deny(format string, args ...any) admission.Response {
	return admission.Denied(DenialPrefix + fmt.Sprintf(format, args...))
}

// SandboxOwner returns pod's controller reference if it names a Sandbox. (Labels prove nothing: a claimed pool
// member keeps its own. Check's status.podName does.)
func SandboxOwner(pod *corev1.Pod) (*metav1.OwnerReference, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return nil, fmt.Errorf("pod %s/%s is not a sandbox pod: no controller owns it", pod.Namespace, pod.Name)
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != airlockv1.GroupVersion.Group || ref.Kind != "Sandbox" {
		return nil, fmt.Errorf("pod %s/%s is not a sandbox pod: it is controlled by %s %s (%s)", pod.Namespace, pod.Name, ref.Kind, ref.Name, ref.APIVersion)
	}
	return ref, nil
}

// Check is the decision: pod is a sandbox's pod if SandboxOwner accepts it, sbx (nil: not found) is the very
// Sandbox its reference names (same UID, not a later one of the same name), and sbx records pod as its pod.
// The last check defeats a pod that copies a live Sandbox's ownerReference: the controller records one pod
// name per Sandbox, and names are unique in a namespace.
func Check(pod *corev1.Pod, sbx *airlockv1.Sandbox) error {
	ref, err := SandboxOwner(pod)
	if err != nil {
		return err
	}
	switch {
	case sbx == nil:
		return fmt.Errorf("pod %s/%s belongs to Sandbox %s, which does not exist", pod.Namespace, pod.Name, ref.Name)
	case sbx.UID != ref.UID:
		return fmt.Errorf("pod %s/%s belongs to an earlier Sandbox named %s (uid %s, the current one is %s)", pod.Namespace, pod.Name, ref.Name, ref.UID, sbx.UID)
	case sbx.Status.PodName != pod.Name:
		return fmt.Errorf("pod %s/%s is not the pod Sandbox %s records (%q)", pod.Namespace, pod.Name, sbx.Name, sbx.Status.PodName)
	}
	return nil
}
