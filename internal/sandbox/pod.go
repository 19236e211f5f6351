package sandbox

import (
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/version"
)

// PodOptions are the operator's settings for every sandbox pod.
type PodOptions struct {
	// InitImage holds airlock-init at /usr/local/bin/airlock-init. A sandbox pod mounts it as an image volume
	// (Kubernetes 1.35+, a runtime with image volumes: containerd 2.1+) or copies it from there (CopyInit), and
	// runs it as PID 1, whatever the sandbox's image contains, unless its template says the image holds
	// airlock-init itself (init: Image).
	InitImage string
	// InitDelivery is the operator's choice of how (--init-delivery); ServerVersion, the API server's version
	// (discovery), which InitDeliveryAuto judges with the nodes'.
	InitDelivery  InitDelivery
	ServerVersion string
	// CopyInit: the pod gets airlock-init from an init container that copies it out of InitImage into an
	// emptyDir, instead of an image volume. The controller sets it for each pod from InitDelivery.
	CopyInit bool
	// GatePort is the port on the node's IP that the network gate expects to be blocked: the kubelet's, which
	// is known to listen. The controller sets it from the Nodes' status; this is the fallback.
	GatePort int32
	// GateTarget, when set (host:port), is probed instead of the node IP and GatePort: for clusters whose
	// kubelet is not on the node IP. It must listen and be denied by the sandbox's policy.
	GateTarget string
	// GateTimeout bounds how long the gate waits for isolation before failing the pod.
	GateTimeout metav1.Duration
	// ProcessLimit caps the sandbox user's processes (RLIMIT_NPROC, set on each command by the supervisor) under
	// the RuntimeClass handlers that ProcessLimitHandlers match (globs, as path.Match): the handler is what the
	// node runs, whatever the class is named. Under gVisor the pod's pids limit kills the whole sandbox instead
	// of failing fork, so a fork bomb must be stopped inside first. Under gVisor (systrap) each guest process
	// costs about two host tasks on top of ~60 for the sandbox itself: keep it below a quarter of the
	// kubelet's podPidsLimit (1024 on the local cluster).
	ProcessLimit         int
	ProcessLimitHandlers []string
	// MemoryGuard is PID 1's memory guard for every sandbox: a headroom in MiB below the memory limit, or
	// "off"; empty leaves PID 1's default (runwrap.DefaultMemoryHeadroom).
	MemoryGuard string
	// Isolation is what the pod's runtime must prove from inside before any command runs (the RuntimeClass
	// handler's expected isolation); for IsolationKata (a VM), HostKernels are the nodes' kernels, none of which
	// the pod's may be. The controller sets both for each pod.
	Isolation   airlockv1.Isolation
	HostKernels []string
}

// InitImagePath is where InitImage holds airlock-init; the pod mounts that directory at ToolsDir.
const InitImagePath = "usr/local/bin"

// Flags of airlock-init pid1 that the controller reads back from a pod to check its gate's evidence.
const (
	GateHostFlag        = "--gate-host="
	GatePortFlag        = "--gate-port="
	ExpectIsolationFlag = "--expect-isolation="
	HostKernelFlag      = "--host-kernel="
	ProtocolFlag        = "--protocol="
)

// InitMismatchPrefix starts the termination message of a pod whose airlock-init speaks another protocol than
// the manager (an image's own, of another release): the same as airlock-init's (internal/initproc).
const InitMismatchPrefix = "init mismatch: "

// RuntimeMismatchPrefix starts the termination message of a pod whose PID 1 found its runtime not the isolation
// it was told to prove: the same as airlock-init's (internal/initproc), which does not import this package.
const RuntimeMismatchPrefix = "runtime mismatch: "

// expectFlag is pid1's --expect-isolation for an isolation.
var expectFlag = map[airlockv1.Isolation]string{airlockv1.IsolationGVisor: "gvisor", airlockv1.IsolationKata: "vm", airlockv1.IsolationNone: "none"}

// AttestedUnverified is what PID 1 attests when it was to prove gVisor and nothing it saw does: the same as
// airlock-init's (internal/initproc.Unverified).
const AttestedUnverified = "unverified"

// IsolationFlag names an isolation as PID 1 does (its --expect-isolation, and its attestation).
func IsolationFlag(iso airlockv1.Isolation) string { return expectFlag[iso] }

// ExpectedIsolationOf reads back the isolation a pod's PID 1 was told to prove ("" if none is named).
func ExpectedIsolationOf(pod *corev1.Pod) (airlockv1.Isolation, []string) {
	var kernels []string
	var iso airlockv1.Isolation
	for _, a := range sandboxArgs(pod) {
		if v, ok := strings.CutPrefix(a, ExpectIsolationFlag); ok {
			for k, f := range expectFlag {
				if f == v {
					iso = k
				}
			}
		}
		if v, ok := strings.CutPrefix(a, HostKernelFlag); ok {
			kernels = append(kernels, v)
		}
	}
	return iso, kernels
}

// PodArg returns the value of the sandbox container's flag (a prefix such as GatePortFlag), "" if absent.
func PodArg(pod *corev1.Pod, flag string) string {
	for _, a := range sandboxArgs(pod) {
		if v, ok := strings.CutPrefix(a, flag); ok {
			return v
		}
	}
	return ""
}

func sandboxArgs(pod *corev1.Pod) []string {
	for _, c := range pod.Spec.Containers {
		if c.Name == ContainerName {
			return c.Command
		}
	}
	return nil
}

// DefaultPodOptions are the defaults of PodOptions except the image, which depends on the release.
func DefaultPodOptions(initImage string) PodOptions {
	return PodOptions{InitImage: initImage, InitDelivery: InitDeliveryAuto, GatePort: 10250, GateTimeout: metav1.Duration{Duration: 30e9},
		ProcessLimit: 256, ProcessLimitHandlers: slices.Clone(GVisorHandlers)}
}

// GVisorOverlayAnnotation sets runsc's --overlay2 for one pod. containerd passes it to runsc only when the
// runsc runtime lists it in pod_annotations (docs/runtimes.md).
const GVisorOverlayAnnotation = "dev.gvisor.flag.overlay2"

const (
	toolsVolume   = "airlock-tools"
	workdirVolume = "workdir"
	// nodeIPEnv carries the node's IP (the gate's target) into PID 1's arguments.
	nodeIPEnv = "AIRLOCK_NODE_IP"
	// MemoryGuardEnv carries PodOptions.MemoryGuard to PID 1 (runwrap.MemoryGuardEnv).
	MemoryGuardEnv = "AIRLOCK_MEMORY_GUARD"
	// ReadyPort is where PID 1 answers the pod's readiness probe, an httpGet from the kubelet (Kubernetes lets
	// a pod's own node reach it whatever its policies say): 200 once its gate passed, and until then it holds
	// the request, so that the kubelet's first probe, made as soon as it sees the container run, returns the
	// moment the gate passes. An HTTP probe costs the node next to nothing, so it can run every second (an exec
	// probe costs ~45 ms of CPU under gVisor), which also bounds the kubelet's occasional missed first probe.
	ReadyPort = 31415
	// terminationGrace is short: a sandbox holds no state worth a graceful shutdown once it is being deleted.
	terminationGrace int64 = 2
)

// BuildPod returns the sandbox's pod. Its PID 1 is airlock-init, which keeps the container alive between
// commands and reaps the orphans that exec'd commands leave, whatever the image contains. The pod passes the
// restricted Pod Security Standard unless the template asked for root under an isolating runtime.
func BuildPod(sbx *airlockv1.Sandbox, r Resolved, o PodOptions) *corev1.Pod {
	labels := map[string]string{}
	for k, v := range r.Labels {
		labels[k] = v
	}
	labels[LabelName] = sbx.Name
	labels[LabelManagedBy] = ManagedByValue

	uid := SandboxUID
	nonRoot := true
	if r.RunAsRoot {
		uid, nonRoot = 0, false
	}

	env := []corev1.EnvVar{{Name: "HOME", Value: r.WorkingDir}, {Name: "USER", Value: "sandbox"}}
	// The network's settings for tools come before the template's and the sandbox's env, which win on a name.
	env = append(env, NetworkEnv(r.Network, r.EgressProxy)...)
	for _, e := range r.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	env = append(env, airlockEnv(r, o)...)

	volumes, mounts, annotations := workdirStorage(r)
	var initContainers []corev1.Container
	switch {
	case r.InitFromImage:
	case o.CopyInit:
		volumes = append([]corev1.Volume{{Name: toolsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse(initCopyLimit))}}}}, volumes...)
		mounts = append([]corev1.VolumeMount{{Name: toolsVolume, MountPath: ToolsDir, ReadOnly: true}}, mounts...)
		initContainers = []corev1.Container{initCopyContainer(o.InitImage, uid, nonRoot)}
	default:
		volumes = append([]corev1.Volume{{Name: toolsVolume,
			VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: o.InitImage}}}}, volumes...)
		mounts = append([]corev1.VolumeMount{{Name: toolsVolume, MountPath: ToolsDir, SubPath: InitImagePath, ReadOnly: true}}, mounts...)
	}

	gateHost, gatePort := "$("+nodeIPEnv+")", strconv.Itoa(int(o.GatePort))
	if h, p, err := net.SplitHostPort(o.GateTarget); err == nil {
		gateHost, gatePort = h, p
	}
	command := []string{InitBinary, "pid1",
		GateHostFlag + gateHost,
		GatePortFlag + gatePort,
		"--gate-timeout=" + o.GateTimeout.Duration.String(),
		ExpectIsolationFlag + expectFlag[o.Isolation],
		"--ready-port=" + strconv.Itoa(ReadyPort),
		ProtocolFlag + strconv.Itoa(version.InitProtocol),
	}
	if o.Isolation == airlockv1.IsolationKata {
		for _, k := range o.HostKernels {
			command = append(command, HostKernelFlag+k)
		}
	}
	if NeedsProxy(r.Network) && r.EgressProxy != nil {
		// The positive control: after the kubelet is seen blocked, the proxy must be reached.
		command = append(command, ProxyTargetFlag+r.EgressProxy.Address)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        sbx.Name,
			Namespace:   sbx.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RuntimeClassName:              ptr.To(r.RuntimeClassName),
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(terminationGrace),
			Hostname:                      "sandbox",
			// No resolver: a sandbox's policy allows no DNS (the egress proxy resolves names), and a lookup
			// refused at once on loopback fails fast instead of retrying against servers it cannot reach.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"},
				Options: []corev1.PodDNSConfigOption{{Name: "attempts", Value: ptr.To("1")}, {Name: "timeout", Value: ptr.To("1")}}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(nonRoot),
				RunAsUser:      ptr.To(uid),
				RunAsGroup:     ptr.To(uid),
				FSGroup:        ptr.To(uid),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: initContainers,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           r.Image,
				Command:         command,
				WorkingDir:      r.WorkingDir,
				Env:             env,
				SecurityContext: restrictedContainer(uid, nonRoot),
				Resources:       r.Resources,
				VolumeMounts:    mounts,
				// An airlock-init that cannot start or parse its flags (an image's own, of another release)
				// writes no termination message: its stderr then says why.
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				// The gate, as the controller reads it. Once passed it stays passed in the Sandbox's status.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(ReadyPort), Path: "/"}},
					// More than PID 1 holds a request (initproc.readyHold). Short, because a probe whose
					// connection is lost costs all of it: with 10 s, 3 of 60 cold starts took 10 s more.
					TimeoutSeconds:   2,
					PeriodSeconds:    1,
					SuccessThreshold: 1,
					// Readiness only carries the gate: once passed, the Sandbox keeps it. But an unclaimed pool
					// member must stay ready to be claimed (and is replaced if it stays unready), so a node too
					// busy to answer a few probes in time must not unready it: ~20 s of failures, as 3 of the
					// earlier 10 s timeouts took.
					FailureThreshold: 10,
				},
			}},
			Volumes: volumes,
		},
	}
}

// airlockEnv are Airlock's own variables, which PID 1 reads. They come last in the container's env: the kubelet
// takes the last of duplicate names (for the env and for $(VAR) in the command), so they win over any entry of
// the same name that reached the template's or sandbox's env (CheckPodEnvName refuses them, but an object made
// before that check existed may hold one).
func airlockEnv(r Resolved, o PodOptions) []corev1.EnvVar {
	// The gate's target. Commands inherit it too: the node's IP is no secret to a pod, it is its way out.
	env := []corev1.EnvVar{{Name: nodeIPEnv,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		networkModeEnv(r.Network)}
	if o.ProcessLimit > 0 && matchesHandler(o.ProcessLimitHandlers, r.RuntimeHandler) {
		env = append(env, corev1.EnvVar{Name: ProcessLimitEnv, Value: strconv.Itoa(o.ProcessLimit)})
	}
	if o.MemoryGuard != "" {
		env = append(env, corev1.EnvVar{Name: MemoryGuardEnv, Value: o.MemoryGuard})
	}
	return env
}

// workdirStorage returns where the working directory's files live. An emptyDir's sizeLimit only makes the kubelet
// evict the pod, files and all, some time after the limit was passed. Under gVisor the working directory (and
// /tmp: the image ships it non-empty so runsc does not mount its own, memory-backed tmpfs there) stay in the
// container's root filesystem instead, whose overlay upper layer runsc keeps in a file on the node, sized here:
// a write past the limit fails with ENOSPC and the sandbox lives on.
func workdirStorage(r Resolved) ([]corev1.Volume, []corev1.VolumeMount, map[string]string) {
	if GVisorHandler(r.RuntimeHandler) {
		return nil, nil, map[string]string{GVisorOverlayAnnotation: "root:self,size=" + strconv.FormatInt(r.WorkdirLimit.Value(), 10)}
	}
	return []corev1.Volume{{Name: workdirVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		SizeLimit: ptr.To(r.WorkdirLimit),
	}}}}, []corev1.VolumeMount{{Name: workdirVolume, MountPath: r.WorkingDir}}, nil
}

// InitCopyContainer is the init container that copies airlock-init into the pod where image volumes are not
// available (PodOptions.CopyInit).
const InitCopyContainer = "airlock-init"

// initCopyLimit bounds the emptyDir the copy lands in: airlock-init is a static binary of ~20 MB.
const initCopyLimit = "64Mi"

// initCopyContainer copies airlock-init from the init image into the tools volume, which the sandbox container
// mounts read-only: the init image's own binary does it (airlock-init install), since the image holds nothing
// else. It runs as the sandbox's user under the same restrictions, with small resources of its own so that a
// namespace's LimitRange or quota has what it asks for.
func initCopyContainer(image string, uid int64, nonRoot bool) corev1.Container {
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	return corev1.Container{
		Name:                     InitCopyContainer,
		Image:                    image,
		Command:                  []string{"/" + InitImagePath + "/airlock-init", "install", InitBinary},
		SecurityContext:          restrictedContainer(uid, nonRoot),
		Resources:                corev1.ResourceRequirements{Requests: small, Limits: small},
		VolumeMounts:             []corev1.VolumeMount{{Name: toolsVolume, MountPath: ToolsDir}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func restrictedContainer(uid int64, nonRoot bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(nonRoot),
		RunAsUser:                ptr.To(uid),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
