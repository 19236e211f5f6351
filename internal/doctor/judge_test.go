package doctor

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/sandbox"
)

func node(kubelet, runtime, kernel string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: kubelet, ContainerRuntimeVersion: runtime, KernelVersion: kernel}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	return n
}

func class(name, handler string) nodev1.RuntimeClass {
	return nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
}

func passed(isolation, method, kernel string) *ProbeResult {
	return &ProbeResult{Namespace: "airlock-doctor-x", Image: "registry.example/airlock/init:0.1.0", RuntimeClass: "gvisor",
		Attestation: &attestation.Statement{Isolation: isolation, Method: method, Kernel: kernel, GateTarget: "10.0.0.5:10250", Gate: "timeout"}}
}

// status finds a check's finding.
func status(t *testing.T, fs []Finding, check string) Finding {
	t.Helper()
	for _, f := range fs {
		if f.Check == check {
			return f
		}
	}
	t.Fatalf("no %q finding in %+v", check, fs)
	return Finding{}
}

// Each platform's facts come out as what it has and lacks, with what to set; the cases are the setups of
// docs/install.md.
func TestJudge(t *testing.T) {
	manager := &corev1.Container{Name: "manager", Image: "registry.example/airlock/manager:0.1.0",
		Args: []string{"--init-image=registry.example/airlock/init:0.1.0", "--default-runtime-class=gvisor"}}
	type want struct {
		check  string
		status Status
		says   string
	}
	for name, tc := range map[string]struct {
		facts Facts
		wants []want
	}{
		"GKE Sandbox on 1.33, before Airlock is installed": {
			facts: Facts{ServerVersion: "v1.33.5-gke.1080000", Nodes: []corev1.Node{node("v1.33.5-gke.1080000", "containerd://2.0.6", "6.6.87+")},
				RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "gvisor")}, Probe: passed("gvisor", initproc.MethodKernelLog, "4.4.0")},
			wants: []want{{"Kubernetes", OK, "v1.33.5"}, {"image volumes", Fallback, "copied in"}, {"admission policy", Fallback, "manager adds"},
				{"isolating runtimes", OK, "gvisor (handler gvisor): gvisor"}, {"default runtime", OK, "runtimeClasses.gvisor.enabled=false"},
				{"NetworkPolicy enforcer", OK, "blocked 10.0.0.5:10250"}, {"isolation proven", OK, "kernel log"},
				{"Airlock", Unknown, "not installed"}, {"images", Missing, "localhost/airlock/init"}},
		},
		"kind with gVisor and Calico, Airlock installed": {
			facts: Facts{ServerVersion: "v1.35.1", MutatingAdmissionPolicy: false, CRDs: true, Manager: manager, InstallNamespace: "airlock-system",
				Nodes:          []corev1.Node{node("v1.35.1", "containerd://2.2.0", "6.8.0")},
				RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "runsc")}, Probe: passed("gvisor", initproc.MethodMarker, "4.4.0")},
			wants: []want{{"image volumes", OK, "mounted"}, {"default runtime", OK, "handler runsc"}, {"isolation proven", OK, "marker file"},
				{"Airlock", OK, "manager registry.example/airlock/manager:0.1.0"}, {"images", OK, "from registry.example"}},
		},
		"EKS with Kata": {
			facts: Facts{ServerVersion: "v1.34.2-eks-b8ef1a2", Nodes: []corev1.Node{node("v1.34.2-eks-b8ef1a2", "containerd://1.7.27", "6.1.141-155.222.amzn2023.x86_64")},
				RuntimeClasses: []nodev1.RuntimeClass{class("kata-qemu", "kata-qemu")}, Probe: passed("vm", initproc.MethodKernel, "6.12.28")},
			wants: []want{{"isolating runtimes", OK, "kata-qemu (handler kata-qemu): kata"}, {"default runtime", OK, "does not exist: the chart creates it"},
				{"isolation proven", OK, "a VM (kernel 6.12.28"}},
		},
		"no enforcer": {
			facts: Facts{ServerVersion: "v1.37.2", Nodes: []corev1.Node{node("v1.37.2", "containerd://2.4.2", "6.1.0")},
				RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "runsc")},
				Probe:          &ProbeResult{Failure: "network isolation not in effect after 30s: 10.0.0.5:10250 is still reachable from the sandbox (is a NetworkPolicy enforcer running?)"}},
			wants: []want{{"NetworkPolicy enforcer", Missing, "had no effect"}, {"isolation proven", OK, "passed its runtime check"}},
		},
		"gVisor that nothing proves": {
			facts: Facts{ServerVersion: "v1.37.2", Nodes: []corev1.Node{node("v1.37.2", "containerd://2.4.2", "6.1.0")},
				RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "gvisor")}, Probe: passed(initproc.Unverified, "", "4.4.0")},
			wants: []want{{"isolation proven", Missing, "nothing proved"}},
		},
		"a gVisor handler that runs the node's kernel": {
			facts: Facts{ServerVersion: "v1.37.2", Nodes: []corev1.Node{node("v1.37.2", "containerd://2.4.2", "6.1.0")},
				RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "gvisor")}, Probe: passed(initproc.Unverified, "", "6.1.0")},
			wants: []want{{"isolation proven", Missing, "node's own kernel 6.1.0"}},
		},
		"a VM's handler on the node's kernel": {
			facts: Facts{ServerVersion: "v1.37.2", Nodes: []corev1.Node{node("v1.37.2", "containerd://2.4.2", "6.1.0")},
				RuntimeClasses: []nodev1.RuntimeClass{class("kata", "kata")},
				Probe:          &ProbeResult{RuntimeClass: "kata", Failure: initproc.RuntimeMismatchPrefix + "the RuntimeClass should give a VM, but ..."}},
			wants: []want{{"isolation proven", Missing, "should give a VM"}, {"NetworkPolicy enforcer", Unknown, "not reached"}},
		},
		"images nobody can pull, too old, no isolating class": {
			facts: Facts{ServerVersion: "v1.30.4", Manager: manager, CRDs: true, Nodes: []corev1.Node{node("v1.30.4", "containerd://1.7.0", "6.1.0")},
				RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "runc")},
				Probe:          &ProbeResult{Image: "registry.example/airlock/init:0.1.0", PullError: "ImagePullBackOff: Back-off pulling image"}},
			wants: []want{{"Kubernetes", Missing, "v1.30.4"}, {"isolating runtimes", Missing, "there are: gvisor (handler runc)"},
				{"default runtime", Missing, "not isolating"}, {"NetworkPolicy enforcer", Unknown, "cannot pull registry.example/airlock/init:0.1.0"}},
		},
		"no probe": {
			facts: Facts{ServerVersion: "v1.37.2", Nodes: []corev1.Node{node("v1.37.2", "containerd://2.4.2", "6.1.0")}, RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "runsc")}},
			wants: []want{{"NetworkPolicy enforcer", Unknown, "not probed"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := SettingsOf(&tc.facts, "localhost/airlock/init:0.1.0")
			fs := Judge(&tc.facts, s)
			for _, w := range tc.wants {
				f := status(t, fs, w.check)
				if f.Status != w.status || !strings.Contains(f.Detail+" "+f.Fix, w.says) {
					t.Errorf("%s: %s %q (fix %q), want %s saying %q", w.check, f.Status, f.Detail, f.Fix, w.status, w.says)
				}
				if f.Status == Missing && f.Fix == "" {
					t.Errorf("%s is missing with nothing to set", w.check)
				}
			}
			var out bytes.Buffer
			missing, err := Report(&out, "https://cluster", fs)
			if err != nil || strings.Count(out.String(), "\n") > 30 {
				t.Errorf("report: %v, %d lines (one screen):\n%s", err, strings.Count(out.String(), "\n"), out.String())
			}
			if want := countMissing(fs); missing != want {
				t.Errorf("report counts %d missing, the findings %d", missing, want)
			}
		})
	}
}

func countMissing(fs []Finding) int {
	n := 0
	for _, f := range fs {
		if f.Status == Missing {
			n++
		}
	}
	return n
}

// The probe runs under the class the manager would use, promising what the manager would make PID 1 prove.
func TestPlanProbe(t *testing.T) {
	facts := &Facts{Nodes: []corev1.Node{node("v1.37.2", "containerd://2.4.2", "6.1.0")},
		RuntimeClasses: []nodev1.RuntimeClass{class("gvisor", "gvisor"), class("kata", "kata-qemu"), class("runc", "runc")}}
	s := Settings{IsolatingHandlers: sandbox.DefaultDefaults().IsolatingHandlers, DefaultRuntimeClass: "gvisor"}
	for _, tc := range []struct {
		class, defaultClass, wantClass, wantExpect string
		kernels                                    int
	}{
		{"", "gvisor", "gvisor", "gvisor", 0},
		{"kata", "gvisor", "kata", "vm", 1},
		{"runc", "gvisor", "runc", "none", 0},
		{"", "missing", "gvisor", "gvisor", 0}, // the first isolating class
	} {
		s.DefaultRuntimeClass = tc.defaultClass
		o := PlanProbe(facts, s, tc.class, ProbeOptions{})
		if o.RuntimeClass != tc.wantClass || o.Expect != tc.wantExpect || len(o.HostKernels) != tc.kernels || o.GatePort != 10250 {
			t.Errorf("class %q default %q: %+v", tc.class, tc.defaultClass, o)
		}
	}
}

func TestRegistryOf(t *testing.T) {
	for ref, want := range map[string]string{"localhost/airlock/init:1": "localhost", "registry.example/a/init:1": "registry.example",
		"127.0.0.1:5000/airlock/init@sha256:ab": "127.0.0.1:5000", "airlock/init:1": "docker.io", "init": "docker.io"} {
		if got := registryOf(ref); got != want {
			t.Errorf("%s: %s, want %s", ref, got, want)
		}
	}
}

// readProbe reads each way a probe pod ends.
func TestReadProbe(t *testing.T) {
	pod := func(s corev1.ContainerStatus) *corev1.Pod {
		s.Name = probeContainer
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{s}}}
	}
	var res ProbeResult
	if !readProbe(pod(corev1.ContainerStatus{Ready: true}), &res) || res.Failure != "" {
		t.Errorf("ready: %+v", res)
	}
	res = ProbeResult{}
	if !readProbe(pod(corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "network isolation not in effect"}}}), &res) ||
		res.Failure != "network isolation not in effect" {
		t.Errorf("gate failed: %+v", res)
	}
	res = ProbeResult{}
	if !readProbe(pod(corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"}}}), &res) ||
		res.PullError != "ImagePullBackOff: not found" {
		t.Errorf("pull: %+v", res)
	}
	res = ProbeResult{}
	if readProbe(pod(corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}), &res) {
		t.Errorf("running, not ready yet: over")
	}
}
