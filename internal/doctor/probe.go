package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/sandbox"
)

// ProbeOptions say where and how the probe pod runs.
type ProbeOptions struct {
	// Namespace is an existing namespace to probe in; empty: a new one (airlock-doctor-*), deleted afterwards.
	Namespace string
	// Image holds airlock-init at /usr/local/bin/airlock-init: the manager's init image.
	Image string
	// RuntimeClass runs the pod under it (empty: the cluster's default runtime); Expect is the isolation its
	// handler promises (initproc's --expect-isolation: gvisor, vm or none) and HostKernels the nodes' kernels,
	// for vm.
	RuntimeClass string
	Expect       string
	HostKernels  []string
	// GatePort is the kubelet port the nodes report, which the gate dials on the pod's node IP.
	GatePort int32
	// Timeout bounds the whole probe, the image pull included.
	Timeout time.Duration
}

// ProbeResult is what the probe pod showed.
type ProbeResult struct {
	Namespace, Image, RuntimeClass string
	// Attestation is PID 1's statement once its gate passed: the isolation it proved and how, and the target
	// it saw blocked.
	Attestation *attestation.Statement
	// Failure is PID 1's termination message when its gate failed (the runtime or the network policy).
	Failure string
	// PullError is the kubelet's reason when the nodes could not pull Image.
	PullError string
	// NotRun says why the probe did not get as far as its gate (not scheduled, timed out, refused).
	NotRun string
}

// probeLabel selects the probe pod for its deny-all policy.
const probeLabel = "airlock.dev/doctor-probe"

// Probe runs airlock-init's gate in a pod behind a deny-all NetworkPolicy, as every sandbox does: its PID 1
// proves the runtime's isolation, then dials the node's kubelet port, which listens, until a policy blocks it.
// The gate passes only where a NetworkPolicy enforcer acts. Everything it creates is deleted before it returns.
func Probe(ctx context.Context, c client.Client, cs kubernetes.Interface, o ProbeOptions) (res *ProbeResult, err error) {
	res = &ProbeResult{Image: o.Image, RuntimeClass: o.RuntimeClass}
	var created []client.Object
	defer func() {
		// Newest first: the pod, its policy, then a namespace made for it.
		for i := len(created) - 1; i >= 0; i-- {
			if derr := deleteNow(c, created[i]); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	ns := o.Namespace
	if ns == "" {
		n := probeNamespace()
		if err := c.Create(ctx, n); err != nil {
			return nil, fmt.Errorf("creating a namespace for the probe (or name one with --namespace): %w", err)
		}
		created, ns = append(created, n), n.Name
	}
	res.Namespace = ns
	name := "airlock-doctor-probe-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	policy := probePolicy(ns, name)
	if err := c.Create(ctx, policy); err != nil {
		return nil, fmt.Errorf("creating the probe's NetworkPolicy in %s: %w", ns, err)
	}
	created = append(created, policy)
	pod := probePod(ns, name, o)
	if err := c.Create(ctx, pod); err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			res.NotRun = "the API server refused the probe pod: " + err.Error()
			return res, nil
		}
		return nil, fmt.Errorf("creating the probe pod in %s: %w", ns, err)
	}
	created = append(created, pod)
	if err := waitProbe(ctx, c, pod, o.Timeout, res); err != nil || res.Failure != "" || res.PullError != "" || res.NotRun != "" {
		return res, err
	}
	log, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: probeContainer, LimitBytes: ptr.To(int64(64 << 10))}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the probe pod's log: %w", err)
	}
	if res.Attestation, err = attestation.Find(log); err != nil {
		return nil, fmt.Errorf("the probe pod's gate passed, but its log: %w", err)
	}
	return res, nil
}

// waitProbe polls the probe pod until its gate passed or failed, its image cannot be pulled, or timeout.
func waitProbe(ctx context.Context, c client.Client, pod *corev1.Pod, timeout time.Duration, res *ProbeResult) error {
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := c.Get(wait, client.ObjectKeyFromObject(pod), pod)
		if err != nil && wait.Err() == nil {
			return fmt.Errorf("reading the probe pod: %w", err)
		}
		if readProbe(pod, res) {
			return nil
		}
		if wait.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.NotRun = fmt.Sprintf("the probe pod did not finish its gate within %s: %s", timeout, podState(pod))
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

const probeContainer = "probe"

// readProbe records what pod shows so far and tells whether the probe is over: the gate passed (ready), PID 1
// ended (its reason), or the image cannot be pulled.
func readProbe(pod *corev1.Pod, res *ProbeResult) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != probeContainer {
			continue
		}
		switch {
		case s.Ready:
			return true
		case s.State.Terminated != nil:
			res.Failure = strings.TrimSpace(s.State.Terminated.Message)
			if res.Failure == "" {
				res.Failure = fmt.Sprintf("PID 1 ended (exit %d, %s)", s.State.Terminated.ExitCode, s.State.Terminated.Reason)
			}
			return true
		case s.State.Waiting != nil && pullFailure(s.State.Waiting.Reason):
			res.PullError = s.State.Waiting.Reason + ": " + s.State.Waiting.Message
			return true
		}
	}
	return false
}

// pullFailure tells the kubelet's reasons for an image it cannot pull.
func pullFailure(reason string) bool {
	switch reason {
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable":
		return true
	}
	return false
}

// podState says where a pod got to, for a probe that timed out.
func podState(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "not scheduled: " + c.Message
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			return fmt.Sprintf("waiting: %s %s", w.Reason, w.Message)
		}
		if s.State.Running != nil {
			return "running, its gate not passed yet"
		}
	}
	if pod.Spec.NodeName == "" {
		return "not scheduled yet"
	}
	return "phase " + string(pod.Status.Phase) + " on node " + pod.Spec.NodeName
}

// probeNamespace is a namespace made for the probe, restricted as a tenant's.
func probeNamespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "airlock-doctor-", Labels: map[string]string{
		"app.kubernetes.io/managed-by": "airlock-doctor", "pod-security.kubernetes.io/enforce": "restricted"}}}
}

// deleteNow deletes obj at once, even after the caller's context ended: the probe leaves nothing behind.
func deleteNow(c client.Client, obj client.Object) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Delete(ctx, obj, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the probe's %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// probePolicy denies the probe pod everything, both ways, as a sandbox's own policy does.
func probePolicy(ns, name string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{probeLabel: name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
}

// probePod runs airlock-init pid1 as a sandbox does, restricted, with no service account token.
func probePod(ns, name string, o ProbeOptions) *corev1.Pod {
	cmd := []string{"/" + sandbox.InitImagePath + "/airlock-init", "pid1", "--gate-host=$(NODE_IP)",
		"--gate-port=" + strconv.Itoa(int(o.GatePort)), "--gate-timeout=30s", "--expect-isolation=" + o.Expect,
		"--ready-port=" + strconv.Itoa(sandbox.ReadyPort)}
	for _, k := range o.HostKernels {
		cmd = append(cmd, sandbox.HostKernelFlag+k)
	}
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{probeLabel: name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(sandbox.SandboxUID),
				RunAsGroup: ptr.To(sandbox.SandboxUID), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: probeContainer, Image: o.Image, Command: cmd,
				Env: []corev1.EnvVar{{Name: "NODE_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				Resources: corev1.ResourceRequirements{Requests: small, Limits: small},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(sandbox.ReadyPort), Path: "/"}},
					TimeoutSeconds: 2, PeriodSeconds: 1},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		}}
	if o.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr.To(o.RuntimeClass)
	}
	return pod
}

// PlanProbe fills in what the probe pod runs under: class (or, when empty, the default RuntimeClass if it
// exists, else the first isolating one, else the cluster's default runtime), the isolation its handler
// promises with the nodes' kernels for a VM, and the kubelet port the nodes report.
func PlanProbe(f *Facts, s Settings, class string, o ProbeOptions) ProbeOptions {
	d := sandbox.Defaults{IsolatingHandlers: s.IsolatingHandlers}
	find := func(match func(nodev1.RuntimeClass) bool) (string, string) {
		for _, rc := range f.RuntimeClasses {
			if match(rc) {
				return rc.Name, rc.Handler
			}
		}
		return "", ""
	}
	var handler string
	switch {
	case class != "":
		_, handler = find(func(rc nodev1.RuntimeClass) bool { return rc.Name == class })
	default:
		if class, handler = find(func(rc nodev1.RuntimeClass) bool { return rc.Name == s.DefaultRuntimeClass }); class == "" {
			class, handler = find(func(rc nodev1.RuntimeClass) bool { return d.IsolatingHandler(rc.Handler) })
		}
	}
	o.RuntimeClass = class
	iso := d.ExpectedIsolation(handler)
	o.Expect = sandbox.IsolationFlag(iso)
	ports := map[int32]int{}
	for _, n := range f.Nodes {
		if iso == airlockv1.IsolationKata && !slices.Contains(o.HostKernels, n.Status.NodeInfo.KernelVersion) {
			o.HostKernels = append(o.HostKernels, n.Status.NodeInfo.KernelVersion)
		}
		if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != 0 {
			ports[p]++
		}
	}
	o.GatePort = 10250
	for p, n := range ports {
		if n > ports[o.GatePort] {
			o.GatePort = p
		}
	}
	return o
}
