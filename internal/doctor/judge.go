package doctor

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/util/version"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/sandbox"
)

// MinKubernetes is the oldest Kubernetes Airlock supports: the chart's kubeVersion, tested by make test-compat.
const MinKubernetes = "v1.33.0"

// Status is how a check came out.
type Status string

const (
	// OK: the cluster has it.
	OK Status = "ok"
	// Fallback: the cluster lacks it and Airlock does without, another way; nothing needs setting.
	Fallback Status = "fallback"
	// Missing: Airlock will not work (or not safely) until it is fixed: Fix says how.
	Missing Status = "missing"
	// Unknown: not checked (e.g. no probe).
	Unknown Status = "unknown"
)

// Finding is one line of the report.
type Finding struct {
	Check  string
	Status Status
	Detail string
	// Fix says what to set or do, when there is something to.
	Fix string
}

// Settings are what the doctor judges against: the manager's, as installed, else the chart's defaults.
type Settings struct {
	IsolatingHandlers   []string
	DefaultRuntimeClass string
	InitImage           string
}

// SettingsOf reads the installed manager's settings, the defaults where it has none (or is not installed).
func SettingsOf(f *Facts, defaultInitImage string) Settings {
	d := sandbox.DefaultDefaults()
	s := Settings{IsolatingHandlers: d.IsolatingHandlers, DefaultRuntimeClass: d.RuntimeClassName, InitImage: defaultInitImage}
	if v := managerArg(f.Manager, "isolating-handlers"); v != "" {
		s.IsolatingHandlers = strings.Split(v, ",")
	}
	if v := managerArg(f.Manager, "default-runtime-class"); v != "" {
		s.DefaultRuntimeClass = v
	}
	if v := managerArg(f.Manager, "init-image"); v != "" {
		s.InitImage = v
	}
	return s
}

// Judge turns the facts into findings, in the order the report prints them.
func Judge(f *Facts, s Settings) []Finding {
	out := []Finding{judgeVersion(f), judgeImageVolumes(f), judgeFinalizerPolicy(f), judgeNodes(f)}
	out = append(out, judgeRuntimeClasses(f, s)...)
	out = append(out, judgeProbe(f, s)...)
	return append(out, judgeInstall(f, s)...)
}

func judgeVersion(f *Facts) Finding {
	fd := Finding{Check: "Kubernetes", Detail: f.ServerVersion}
	v, err := version.ParseGeneric(f.ServerVersion)
	switch {
	case err != nil:
		fd.Status, fd.Detail = Unknown, fmt.Sprintf("version %q cannot be read", f.ServerVersion)
	case v.AtLeast(version.MustParseGeneric(MinKubernetes)):
		fd.Status = OK
		fd.Detail += " (Airlock supports " + strings.TrimSuffix(MinKubernetes, ".0") + "+)"
	default:
		fd.Status = Missing
		fd.Fix = "upgrade to Kubernetes " + strings.TrimSuffix(MinKubernetes, ".0") + " or later (the chart refuses older ones; its CRDs need 1.31's CEL)"
	}
	return fd
}

func judgeImageVolumes(f *Facts) Finding {
	if why := sandbox.ImageVolumesUnavailable(f.ServerVersion, f.Nodes); why != "" {
		return Finding{Check: "image volumes", Status: Fallback, Detail: why + ": sandbox pods get airlock-init copied in by an init container " +
			"(manager.initDelivery auto; a template's init: Image needs neither)"}
	}
	return Finding{Check: "image volumes", Status: OK, Detail: "the API server and every node serve them: airlock-init is mounted from the init image"}
}

func judgeFinalizerPolicy(f *Facts) Finding {
	if f.MutatingAdmissionPolicy {
		return Finding{Check: "admission policy", Status: OK, Detail: "MutatingAdmissionPolicy v1 is served: Sandboxes get their finalizer as they are created"}
	}
	return Finding{Check: "admission policy", Status: Fallback, Detail: "no MutatingAdmissionPolicy v1 (Kubernetes 1.36+): the chart renders none, and the manager adds each Sandbox's finalizer itself"}
}

func judgeNodes(f *Facts) Finding {
	if len(f.Nodes) == 0 {
		return Finding{Check: "nodes", Status: Missing, Detail: "no nodes", Fix: "add nodes: sandboxes are pods"}
	}
	var runtimes, kernels []string
	for _, n := range f.Nodes {
		if r := n.Status.NodeInfo.ContainerRuntimeVersion; !slices.Contains(runtimes, r) {
			runtimes = append(runtimes, r)
		}
		if k := n.Status.NodeInfo.KernelVersion; !slices.Contains(kernels, k) {
			kernels = append(kernels, k)
		}
	}
	return Finding{Check: "nodes", Status: OK, Detail: fmt.Sprintf("%d (runtime %s; kernel %s)", len(f.Nodes), strings.Join(runtimes, ", "), strings.Join(kernels, ", "))}
}

// judgeRuntimeClasses says which RuntimeClasses isolate (by handler, as the manager judges them) and whether
// the default one exists and does.
func judgeRuntimeClasses(f *Facts, s Settings) []Finding {
	d := sandbox.Defaults{IsolatingHandlers: s.IsolatingHandlers}
	var isolating, others []string
	for _, rc := range f.RuntimeClasses {
		desc := fmt.Sprintf("%s (handler %s)", rc.Name, rc.Handler)
		if d.IsolatingHandler(rc.Handler) {
			isolating = append(isolating, fmt.Sprintf("%s: %s", desc, d.ExpectedIsolation(rc.Handler)))
		} else {
			others = append(others, desc)
		}
	}
	classes := Finding{Check: "isolating runtimes", Status: OK, Detail: strings.Join(isolating, "; ")}
	if len(others) > 0 {
		classes.Detail += "; not isolating: " + strings.Join(others, ", ")
	}
	if len(isolating) == 0 {
		classes.Status = Missing
		classes.Detail = "no RuntimeClass has an isolating handler (" + strings.Join(s.IsolatingHandlers, ",") + ")"
		if len(others) > 0 {
			classes.Detail += "; there are: " + strings.Join(others, ", ")
		}
		classes.Fix = "install gVisor (runsc) or Kata Containers on the nodes with a RuntimeClass for it (docs/install.md: kind with gVisor, GKE Sandbox, EKS with Kata), or list its handler in manager.isolatingHandlers"
	}
	return []Finding{classes, judgeDefaultClass(f, s, d)}
}

func judgeDefaultClass(f *Facts, s Settings, d sandbox.Defaults) Finding {
	fd := Finding{Check: "default runtime"}
	i := slices.IndexFunc(f.RuntimeClasses, func(rc nodev1.RuntimeClass) bool { return rc.Name == s.DefaultRuntimeClass })
	switch {
	case i < 0 && f.Manager == nil:
		fd.Status, fd.Detail = OK, fmt.Sprintf("RuntimeClass %s does not exist: the chart creates it (runtimeClasses.gvisor, handler runsc)", s.DefaultRuntimeClass)
		fd.Fix = "if the nodes' gVisor is another handler, set runtimeClasses.gvisor.handler to it"
	case i < 0:
		fd.Status, fd.Detail = Missing, fmt.Sprintf("the manager's default RuntimeClass %s does not exist: sandboxes that name none fail (RuntimeClassNotFound)", s.DefaultRuntimeClass)
		fd.Fix = "set manager.defaultRuntimeClass to an isolating RuntimeClass"
	case !d.IsolatingHandler(f.RuntimeClasses[i].Handler):
		fd.Status = Missing
		fd.Detail = fmt.Sprintf("the default RuntimeClass %s has handler %s, which is not isolating: sandboxes that name none are refused (RuntimeNotIsolating)", s.DefaultRuntimeClass, f.RuntimeClasses[i].Handler)
		fd.Fix = "set manager.defaultRuntimeClass to an isolating RuntimeClass, or add its handler to manager.isolatingHandlers if it does isolate"
	default:
		rc := f.RuntimeClasses[i]
		fd.Status, fd.Detail = OK, fmt.Sprintf("RuntimeClass %s (handler %s)", rc.Name, rc.Handler)
		if f.Manager == nil && rc.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			// Helm refuses to take over an object it did not create.
			fd.Fix = fmt.Sprintf("install with runtimeClasses.gvisor.enabled=false: the platform's RuntimeClass %s is used as it is", rc.Name)
		}
	}
	return fd
}

// judgeProbe reads what the probe pod proved: the network policy enforced (its gate passed), the runtime's
// isolation and by what evidence, or why not.
func judgeProbe(f *Facts, s Settings) []Finding {
	p := f.Probe
	enforcer := Finding{Check: "NetworkPolicy enforcer"}
	isolation := Finding{Check: "isolation proven"}
	switch {
	case p == nil:
		enforcer.Status, enforcer.Detail = Unknown, "not probed (--probe=false): Kubernetes accepts NetworkPolicies whether or not anything enforces them"
		isolation.Status, isolation.Detail = Unknown, "not probed"
		return []Finding{enforcer, isolation}
	case p.PullError != "":
		enforcer.Status, enforcer.Detail = Unknown, fmt.Sprintf("the probe could not run: the node cannot pull %s (%s)", p.Image, p.PullError)
		enforcer.Fix = "push Airlock's images to a registry the nodes can pull from (make push REGISTRY=...) and set image.repository (or --init-image here)"
		isolation.Status, isolation.Detail = Unknown, "not probed"
		return []Finding{enforcer, isolation}
	case p.NotRun != "":
		enforcer.Status, enforcer.Detail = Unknown, p.NotRun
		isolation.Status, isolation.Detail = Unknown, "not probed"
		return []Finding{enforcer, isolation}
	case p.Failure != "":
		return judgeProbeFailure(p, enforcer, isolation)
	}
	a := p.Attestation
	enforcer.Status = OK
	enforcer.Detail = fmt.Sprintf("a deny-all policy blocked %s (%s) from the probe pod in %s", a.GateTarget, a.Gate, p.Namespace)
	isolation = judgeAttestedIsolation(a, p.RuntimeClass, f)
	return []Finding{enforcer, isolation}
}

func judgeProbeFailure(p *ProbeResult, enforcer, isolation Finding) []Finding {
	switch {
	case strings.HasPrefix(p.Failure, initproc.RuntimeMismatchPrefix):
		enforcer.Status, enforcer.Detail = Unknown, "not reached: the runtime check came first"
		isolation.Status, isolation.Detail = Missing, fmt.Sprintf("RuntimeClass %s: %s", p.RuntimeClass, p.Failure)
		isolation.Fix = "the class's handler does not run what it promises: fix the nodes' runtime configuration, or take the handler out of manager.isolatingHandlers"
	case strings.Contains(p.Failure, "still reachable"):
		enforcer.Status, enforcer.Detail = Missing, "a deny-all NetworkPolicy had no effect: "+p.Failure
		enforcer.Fix = "enable a NetworkPolicy enforcer (GKE: Dataplane V2 or network policy enforcement; EKS: the VPC CNI's network policy agent; kind: Calico or Cilium)"
		isolation.Status, isolation.Detail = OK, fmt.Sprintf("RuntimeClass %s passed its runtime check before the network gate", p.RuntimeClass)
	default:
		enforcer.Status, enforcer.Detail = Missing, "the probe's gate failed: "+p.Failure
		enforcer.Fix = "see docs/troubleshooting.md (GateFailed)"
		isolation.Status, isolation.Detail = Unknown, "not reached"
	}
	return []Finding{enforcer, isolation}
}

// judgeAttestedIsolation says what the probe's PID 1 proved under the class.
func judgeAttestedIsolation(a *attestation.Statement, class string, f *Facts) Finding {
	fd := Finding{Check: "isolation proven", Status: OK}
	onClass := "RuntimeClass " + class
	if class == "" {
		onClass = "the default runtime"
	}
	switch a.Isolation {
	case initproc.ExpectGVisor:
		fd.Detail = fmt.Sprintf("%s: gVisor, by its %s", onClass, map[string]string{initproc.MethodMarker: "marker file", initproc.MethodKernelLog: "boot lines in the kernel log (no marker file)"}[a.Method])
	case initproc.ExpectVM:
		fd.Detail = fmt.Sprintf("%s: a VM (kernel %s, no node's)", onClass, a.Kernel)
	case initproc.Unverified:
		fd.Status = Missing
		fd.Detail = fmt.Sprintf("%s: nothing proved its isolation (%s); its kernel is %s", onClass, a.Unverified, a.Kernel)
		fd.Fix = "enable gvisor-marker-file in the nodes' runsc config, or accept it: manager.allowUnverifiedIsolation=true (status.isolation: " + string(airlockv1.IsolationUnverified) + ")"
		if nodeKernel(f.Nodes, a.Kernel) {
			fd.Detail = fmt.Sprintf("%s runs the node's own kernel %s: it does not isolate", onClass, a.Kernel)
			fd.Fix = "the class's handler runs the node's kernel: fix the nodes' runtime, or take the handler out of manager.isolatingHandlers"
		}
	default:
		fd.Status = Missing
		fd.Detail = onClass + ": no isolation of its own (the node's kernel)"
		fd.Fix = "probe an isolating class: --runtime-class"
	}
	return fd
}

func nodeKernel(nodes []corev1.Node, kernel string) bool {
	return slices.ContainsFunc(nodes, func(n corev1.Node) bool { return n.Status.NodeInfo.KernelVersion == kernel })
}

// judgeInstall says whether Airlock is installed and where its images come from.
func judgeInstall(f *Facts, s Settings) []Finding {
	install := Finding{Check: "Airlock", Status: OK}
	switch {
	case f.Manager == nil && !f.CRDs:
		install.Status, install.Detail = Unknown, "not installed (no Sandbox API, no manager in "+f.InstallNamespace+")"
	case f.Manager == nil:
		install.Status, install.Detail = Missing, "the Sandbox API is installed but no manager runs in "+f.InstallNamespace
		install.Fix = "name the install's namespace with --install-namespace, or install the chart"
	default:
		install.Detail = "manager " + f.Manager.Image + " in " + f.InstallNamespace
	}
	registry := Finding{Check: "images", Status: OK, Detail: "from " + registryOf(s.InitImage) + " (" + s.InitImage + ")"}
	ran := f.Probe != nil && f.Probe.Image == s.InitImage && f.Probe.PullError == "" && f.Probe.NotRun == ""
	switch {
	case strings.HasPrefix(s.InitImage, "localhost/") && ran:
		registry.Status = Fallback
		registry.Detail = s.InitImage + " is on no registry, but the probe's node had it imported: every node that runs sandboxes needs it"
	case strings.HasPrefix(s.InitImage, "localhost/"):
		registry.Status = Missing
		registry.Detail = s.InitImage + " is on no registry: only nodes that imported it have it (the local cluster)"
		registry.Fix = "push the images (make push REGISTRY=host/path) and set image.repository to host/path (image.digests pins them)"
	case ran:
		registry.Detail += ": the probe's node pulled it"
	}
	return []Finding{install, registry}
}

// registryOf names the registry an image reference pulls from: its first part when that is a host (a dot, a
// port or localhost), else Docker Hub.
func registryOf(ref string) string {
	host, _, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		return host
	}
	return "docker.io"
}
