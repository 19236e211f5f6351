package sandbox

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/version"
)

func sbx(mut ...func(*airlockv1.Sandbox)) *airlockv1.Sandbox {
	s := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Spec: airlockv1.SandboxSpec{Image: "img"}}
	for _, m := range mut {
		m(s)
	}
	return s
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestSizesHaveRequestsBelowLimits(t *testing.T) {
	for _, size := range []airlockv1.Size{airlockv1.SizeSmall, airlockv1.SizeMedium, airlockv1.SizeLarge} {
		res, err := Resources(size, nil)
		if err != nil {
			t.Fatalf("%s: %v", size, err)
		}
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
			req, lim := res.Requests[name], res.Limits[name]
			if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
				t.Errorf("%s %s: request %s, limit %s: want 0 < request <= limit", size, name, req.String(), lim.String())
			}
		}
		if wl, disk := WorkdirLimit(size), res.Limits[corev1.ResourceEphemeralStorage]; wl.Cmp(disk) > 0 {
			t.Errorf("%s: workdir limit %s exceeds the ephemeral-storage limit %s", size, wl.String(), disk.String())
		}
	}
	if _, err := Resources("huge", nil); err == nil {
		t.Error("unknown size: want an error")
	}
	custom := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}}
	got, _ := Resources(airlockv1.SizeMedium, &airlockv1.SizeResources{Medium: &custom})
	if q := got.Limits[corev1.ResourceMemory]; q.String() != "3Gi" {
		t.Errorf("template override for medium: got memory limit %s, want 3Gi", q.String())
	}
}

func TestResolvePrecedence(t *testing.T) {
	d := DefaultDefaults()
	tmpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: airlockv1.SandboxTemplateSpec{
		Image: "tmpl-img", RuntimeClassName: "runc", Size: airlockv1.SizeMedium,
		DefaultTimeout: dur(time.Hour), MaxTimeout: dur(2 * time.Hour),
		Network: &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted},
		Env:     []airlockv1.EnvVar{{Name: "A", Value: "tmpl"}, {Name: "B", Value: "tmpl"}},
	}}
	tests := map[string]struct {
		sbx   *airlockv1.Sandbox
		tmpl  *airlockv1.SandboxTemplate
		check func(t *testing.T, r Resolved)
	}{
		"defaults without a template": {sbx(), nil, func(t *testing.T, r Resolved) {
			expect(t, r.RuntimeClassName, "gvisor")
			expect(t, r.Size, airlockv1.SizeSmall)
			expect(t, r.Timeout, 30*time.Minute)
			expect(t, r.MaxTimeout, 24*time.Hour)
			expect(t, r.Network.Mode, airlockv1.NetworkNone)
			expect(t, r.WorkingDir, "/home/sandbox")
		}},
		"template supplies defaults": {sbx(func(s *airlockv1.Sandbox) { s.Spec.Image = "" }), tmpl, func(t *testing.T, r Resolved) {
			expect(t, r.Image, "tmpl-img")
			expect(t, r.RuntimeClassName, "runc")
			expect(t, r.Size, airlockv1.SizeMedium)
			expect(t, r.Timeout, time.Hour)
			expect(t, r.MaxTimeout, 2*time.Hour)
			expect(t, r.Network.Mode, airlockv1.NetworkRestricted)
		}},
		"sandbox wins over template": {sbx(func(s *airlockv1.Sandbox) {
			s.Spec.Image = ""
			rc := "gvisor"
			s.Spec.RuntimeClassName = &rc
			s.Spec.Size = airlockv1.SizeLarge
			s.Spec.Timeout = dur(90 * time.Minute)
			s.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone}
			s.Spec.Env = []airlockv1.EnvVar{{Name: "B", Value: "sbx"}, {Name: "C", Value: "sbx"}}
		}), tmpl, func(t *testing.T, r Resolved) {
			expect(t, r.RuntimeClassName, "gvisor")
			expect(t, r.Size, airlockv1.SizeLarge)
			expect(t, r.Timeout, 90*time.Minute)
			expect(t, r.Network.Mode, airlockv1.NetworkNone)
			expect(t, len(r.Env), 3)
			expect(t, r.Env[0], airlockv1.EnvVar{Name: "A", Value: "tmpl"})
			expect(t, r.Env[1], airlockv1.EnvVar{Name: "B", Value: "sbx"})
			expect(t, r.Env[2], airlockv1.EnvVar{Name: "C", Value: "sbx"})
		}},
		"timeout capped by template maxTimeout": {sbx(func(s *airlockv1.Sandbox) { s.Spec.Image = ""; s.Spec.Timeout = dur(5 * time.Hour) }), tmpl,
			func(t *testing.T, r Resolved) { expect(t, r.Timeout, 2*time.Hour) }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := Resolve(tc.sbx, tc.tmpl, d)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

// The handler, not the class name, decides: a class named "gvisor" whose handler is runc is not isolating.
// Removing the check in CheckRuntime makes the "not isolating" cases fail.
func TestCheckRuntimeByHandler(t *testing.T) {
	strict := DefaultDefaults()
	allowing := DefaultDefaults()
	allowing.AllowUnisolated = true
	user := Resolved{RuntimeClassName: "gvisor"}
	root := Resolved{RuntimeClassName: "gvisor", RunAsRoot: true}
	tests := map[string]struct {
		d       Defaults
		r       Resolved
		handler string
		want    error
	}{
		"runsc":                          {strict, user, "runsc", nil},
		"kata glob":                      {strict, user, "kata-qemu", nil},
		"kata exact":                     {strict, user, "kata", nil},
		"runc refused":                   {strict, user, "runc", ErrNotIsolating},
		"GKE Sandbox's gvisor":           {strict, user, "gvisor", nil},
		"a runsc platform variant":       {strict, user, "runsc-kvm", nil},
		"runsc-like prefix is not runsc": {strict, user, "runscx", ErrNotIsolating},
		"runc allowed":                   {allowing, user, "runc", nil},
		"root under runsc":               {strict, root, "runsc", nil},
		"root under runc, even allowed":  {allowing, root, "runc", ErrRootNotIsolated},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.d.CheckRuntime(tc.r, tc.handler)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && (!strings.Contains(err.Error(), tc.handler) || !strings.Contains(err.Error(), "--isolating-handlers=runsc,runsc-*,gvisor,kata*")) {
				t.Errorf("message must name the handler and the allowlist: %v", err)
			}
		})
	}
}

func TestExpectedIsolation(t *testing.T) {
	d := DefaultDefaults()
	d.IsolatingHandlers = []string{"runsc", "kata*"}
	for handler, want := range map[string]airlockv1.Isolation{"runsc": airlockv1.IsolationGVisor, "runsc-kvm": airlockv1.IsolationNone,
		"gvisor": airlockv1.IsolationNone, "kata-fc": airlockv1.IsolationKata, "runc": airlockv1.IsolationNone, "": airlockv1.IsolationNone} {
		if handler == "runsc-kvm" || handler == "gvisor" {
			// Isolating only when the operator lists it; then gVisor, as the handler says (GKE's is "gvisor").
			if got := d.ExpectedIsolation(handler); got != want {
				t.Errorf("unlisted handler %q: %s, want %s", handler, got, want)
			}
			d.IsolatingHandlers = append(d.IsolatingHandlers, handler)
			want = airlockv1.IsolationGVisor
		}
		if got := d.ExpectedIsolation(handler); got != want {
			t.Errorf("expected isolation of handler %q: %s, want %s", handler, got, want)
		}
	}
	if err := ValidateHandlerGlobs([]string{"runsc", "kata*"}); err != nil {
		t.Error(err)
	}
	if err := ValidateHandlerGlobs([]string{"kata["}); err == nil {
		t.Error("a malformed glob must be rejected")
	}
}

func TestGateTargetInPod(t *testing.T) {
	r, err := Resolve(sbx(), nil, DefaultDefaults())
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultPodOptions("init")
	o.GatePort = 10255
	o.Isolation = airlockv1.IsolationGVisor
	pod := BuildPod(sbx(), r, o)
	args := pod.Spec.Containers[0].Command
	if !slices.Contains(args, "--gate-host=$(AIRLOCK_NODE_IP)") || !slices.Contains(args, "--gate-port=10255") || PodArg(pod, GatePortFlag) != "10255" {
		t.Errorf("default gate: node IP and the kubelet port, got %v", args)
	}
	if iso, kernels := ExpectedIsolationOf(pod); iso != airlockv1.IsolationGVisor || kernels != nil || !slices.Contains(args, "--expect-isolation=gvisor") {
		t.Errorf("expected isolation read back %q %v from %v", iso, kernels, args)
	}
	o.GateTarget = "10.0.0.7:8443"
	o.Isolation, o.HostKernels = airlockv1.IsolationKata, []string{"6.1.0-a", "6.1.0-b"}
	pod = BuildPod(sbx(), r, o)
	args = pod.Spec.Containers[0].Command
	if !slices.Contains(args, "--gate-host=10.0.0.7") || !slices.Contains(args, "--gate-port=8443") {
		t.Errorf("configured gate target, got %v", args)
	}
	if iso, kernels := ExpectedIsolationOf(pod); iso != airlockv1.IsolationKata || !slices.Equal(kernels, o.HostKernels) || !slices.Contains(args, "--expect-isolation=vm") {
		t.Errorf("expected isolation read back %q %v from %v", iso, kernels, args)
	}
	// The readiness probe is the gate: PID 1's port, opened once it passed.
	p := pod.Spec.Containers[0].ReadinessProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != ReadyPort || !slices.Contains(args, "--ready-port=31415") {
		t.Errorf("readiness probe %+v: want an httpGet probe of PID 1's readiness port", p)
	}
}

// The runtime-mismatch message that airlock-init writes is the one the controller looks for.
func TestRuntimeMismatchPrefixMatchesAirlockInit(t *testing.T) {
	if RuntimeMismatchPrefix != initproc.RuntimeMismatchPrefix {
		t.Errorf("sandbox.RuntimeMismatchPrefix %q, airlock-init writes %q", RuntimeMismatchPrefix, initproc.RuntimeMismatchPrefix)
	}
}

func TestInitMismatchPrefixMatchesAirlockInit(t *testing.T) {
	if InitMismatchPrefix != initproc.InitMismatchPrefix {
		t.Errorf("sandbox.InitMismatchPrefix %q, airlock-init writes %q", InitMismatchPrefix, initproc.InitMismatchPrefix)
	}
}

// TestInitSource: by default PID 1 comes from the init image's volume; a template's init: Image runs the
// image's own airlock-init at the same path and mounts no volume at all (under gVisor the working directory is
// in the root overlay), which spares the kubelet's volume wait. Either way PID 1 is told the manager's
// protocol and a failed start shows its own words.
func TestInitSource(t *testing.T) {
	tmpl := &airlockv1.SandboxTemplate{Spec: airlockv1.SandboxTemplateSpec{Image: "img"}}
	s := &airlockv1.Sandbox{Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "t"}}}
	for _, tc := range []struct {
		init    airlockv1.InitSource
		volumes int
	}{{"", 1}, {airlockv1.InitFromVolume, 1}, {airlockv1.InitFromImage, 0}} {
		tmpl.Spec.Init = tc.init
		r, err := Resolve(s, tmpl, DefaultDefaults())
		if err != nil {
			t.Fatal(err)
		}
		r.RuntimeHandler = "runsc"
		pod := BuildPod(s, r, DefaultPodOptions("init-image"))
		c := pod.Spec.Containers[0]
		if len(pod.Spec.Volumes) != tc.volumes || len(c.VolumeMounts) != tc.volumes {
			t.Errorf("init %q: volumes %+v mounts %+v, want %d", tc.init, pod.Spec.Volumes, c.VolumeMounts, tc.volumes)
		}
		if tc.volumes == 1 && (pod.Spec.Volumes[0].Image == nil || pod.Spec.Volumes[0].Image.Reference != "init-image" || c.VolumeMounts[0].MountPath != ToolsDir) {
			t.Errorf("init %q: want the init image mounted at %s: %+v %+v", tc.init, ToolsDir, pod.Spec.Volumes, c.VolumeMounts)
		}
		if c.Command[0] != InitBinary || PodArg(pod, ProtocolFlag) != strconv.Itoa(version.InitProtocol) {
			t.Errorf("init %q: command %v, want %s with %s%d", tc.init, c.Command, InitBinary, ProtocolFlag, version.InitProtocol)
		}
		if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			t.Errorf("init %q: termination message policy %q", tc.init, c.TerminationMessagePolicy)
		}
	}
}

// TestInitCopy: where image volumes are not available, an init container of the init image copies airlock-init
// into an emptyDir that the sandbox container mounts read-only at the same path; a template's init: Image needs
// neither.
func TestInitCopy(t *testing.T) {
	o := DefaultPodOptions("init-image")
	o.CopyInit = true
	r, err := Resolve(sbx(), nil, DefaultDefaults())
	if err != nil {
		t.Fatal(err)
	}
	r.RuntimeHandler = "runsc"
	pod := BuildPod(sbx(), r, o)
	if len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Volumes) != 1 {
		t.Fatalf("init containers %+v volumes %+v: want the copy and its emptyDir", pod.Spec.InitContainers, pod.Spec.Volumes)
	}
	ic, v, c := pod.Spec.InitContainers[0], pod.Spec.Volumes[0], pod.Spec.Containers[0]
	if ic.Image != "init-image" || !slices.Equal(ic.Command, []string{"/usr/local/bin/airlock-init", "install", InitBinary}) ||
		len(ic.VolumeMounts) != 1 || ic.VolumeMounts[0].Name != v.Name || ic.VolumeMounts[0].MountPath != ToolsDir || ic.VolumeMounts[0].ReadOnly {
		t.Errorf("copying container %+v", ic)
	}
	if ic.Resources.Limits.Memory().IsZero() || ic.Resources.Requests.Cpu().IsZero() {
		t.Errorf("the copy must ask for its resources (a LimitRange or quota may require it): %+v", ic.Resources)
	}
	if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.Image != nil {
		t.Errorf("tools volume %+v: want a sized emptyDir", v)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != v.Name || c.VolumeMounts[0].MountPath != ToolsDir || !c.VolumeMounts[0].ReadOnly ||
		c.VolumeMounts[0].SubPath != "" || c.Command[0] != InitBinary {
		t.Errorf("sandbox container mounts %+v, command %v: want the copy read-only at %s", c.VolumeMounts, c.Command, ToolsDir)
	}
	r.InitFromImage = true
	if pod := BuildPod(sbx(), r, o); len(pod.Spec.InitContainers) != 0 || len(pod.Spec.Volumes) != 0 {
		t.Errorf("init: Image with copying on: %+v %+v", pod.Spec.InitContainers, pod.Spec.Volumes)
	}
}

// Image volumes are used only where the API server and every node offer them; anything not known to is
// answered with why, so the pod gets the copy instead of failing to start.
func TestImageVolumesUnavailable(t *testing.T) {
	node := func(name, kubelet, runtime string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet, ContainerRuntimeVersion: runtime}}}
	}
	current := node("a", "v1.37.2", "containerd://2.4.2")
	for name, tc := range map[string]struct {
		server string
		nodes  []corev1.Node
		why    string
	}{
		"current":                    {"v1.37.2", []corev1.Node{current}, ""},
		"the floor of image volumes": {"v1.35.0", []corev1.Node{node("b", "v1.35.0-gke.100", "containerd://2.1.0")}, ""},
		"CRI-O":                      {"v1.36.1-eks-abc", []corev1.Node{node("b", "v1.36.1-eks-abc", "cri-o://1.31.2")}, ""},
		"server too old":             {"v1.34.3", []corev1.Node{current}, "the API server is v1.34.3"},
		"server unknown":             {"", []corev1.Node{current}, "of unknown version"},
		"one kubelet too old":        {"v1.35.4", []corev1.Node{current, node("b", "v1.33.13", "containerd://2.1.4")}, "node b runs kubelet v1.33.13"},
		"containerd 1.7":             {"v1.35.4", []corev1.Node{current, node("b", "v1.35.4", "containerd://1.7.27")}, "node b runs containerd 1.7.27"},
		"CRI-O too old":              {"v1.35.4", []corev1.Node{node("b", "v1.35.4", "cri-o://1.30.0")}, "cri-o 1.30.0"},
		"unknown runtime":            {"v1.35.4", []corev1.Node{node("b", "v1.35.4", "docker://27.0.1")}, `"docker://27.0.1", which is not known`},
		"runtime not reported":       {"v1.35.4", []corev1.Node{node("b", "v1.35.4", "")}, `runtime ""`},
		"no nodes":                   {"v1.35.4", nil, "no node reports"},
	} {
		if got := ImageVolumesUnavailable(tc.server, tc.nodes); (tc.why == "") != (got == "") || !strings.Contains(got, tc.why) {
			t.Errorf("%s: %q, want %q", name, got, tc.why)
		}
	}
	for _, s := range []string{"auto", "image-volume", "copy"} {
		if d, err := ParseInitDelivery(s); err != nil || string(d) != s {
			t.Errorf("%s: %v", s, err)
		}
	}
	if _, err := ParseInitDelivery("volume"); err == nil {
		t.Error("an unknown delivery must be refused")
	}
}

func TestExpiresAt(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	prev := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: created.Add(d)} }
	tests := map[string]struct {
		resolved time.Duration
		spec     *metav1.Duration
		max      time.Duration
		previous *metav1.Time
		want     time.Duration
	}{
		"first time: creation + resolved":  {30 * time.Minute, nil, 24 * time.Hour, nil, 30 * time.Minute},
		"raised timeout extends":           {0, dur(time.Hour), 24 * time.Hour, prev(30 * time.Minute), time.Hour},
		"raise capped by max":              {0, dur(48 * time.Hour), 2 * time.Hour, prev(30 * time.Minute), 2 * time.Hour},
		"never earlier than stored":        {0, dur(10 * time.Minute), 24 * time.Hour, prev(30 * time.Minute), 30 * time.Minute},
		"lowered cap keeps stored expiry":  {0, dur(time.Hour), 10 * time.Minute, prev(time.Hour), time.Hour},
		"no spec timeout keeps stored one": {0, nil, 24 * time.Hour, prev(45 * time.Minute), 45 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ExpiresAt(created, tc.resolved, tc.spec, tc.max, tc.previous)
			expect(t, got.Sub(created), tc.want)
		})
	}
	if !Expired(created, prev(0)) || Expired(created, prev(time.Second)) || Expired(created, nil) {
		t.Error("Expired: expiry is inclusive and nil never expires")
	}
}

func TestIdleDeadline(t *testing.T) {
	started := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: started.Add(d)} }
	tests := map[string]struct {
		started, last *metav1.Time
		idle          time.Duration
		want          *metav1.Time
	}{
		"no idle timeout never idles":            {at(0), at(time.Minute), 0, nil},
		"not started yet: no idle clock":         {nil, nil, 10 * time.Minute, nil},
		"no activity yet: counted from start":    {at(0), nil, 10 * time.Minute, at(10 * time.Minute)},
		"activity pushes the deadline":           {at(0), at(7 * time.Minute), 10 * time.Minute, at(17 * time.Minute)},
		"activity before the start is the start": {at(0), at(-time.Minute), 10 * time.Minute, at(10 * time.Minute)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := IdleDeadline(tc.started, tc.last, tc.idle)
			if (got == nil) != (tc.want == nil) || (got != nil && !got.Equal(tc.want)) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestResolveIdleTimeout(t *testing.T) {
	tmpl := &airlockv1.SandboxTemplate{Spec: airlockv1.SandboxTemplateSpec{Image: "img", DefaultIdleTimeout: dur(15 * time.Minute)}}
	d := DefaultDefaults()
	tests := map[string]struct {
		sbx     *airlockv1.Sandbox
		tmpl    *airlockv1.SandboxTemplate
		want    time.Duration
		wantErr string
	}{
		"none anywhere":        {sbx(), nil, 0, ""},
		"template default":     {sbx(), tmpl, 15 * time.Minute, ""},
		"sandbox wins":         {sbx(func(s *airlockv1.Sandbox) { s.Spec.IdleTimeout = dur(5 * time.Minute) }), tmpl, 5 * time.Minute, ""},
		"equal to the timeout": {sbx(func(s *airlockv1.Sandbox) { s.Spec.IdleTimeout = dur(30 * time.Minute) }), nil, 30 * time.Minute, ""},
		"longer than the operator's default timeout": {sbx(func(s *airlockv1.Sandbox) { s.Spec.IdleTimeout = dur(time.Hour) }), nil, 0,
			"spec.idleTimeout 1h0m0s exceeds the sandbox's timeout 30m0s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := Resolve(tc.sbx, tc.tmpl, d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || r.IdleTimeout != tc.want {
				t.Errorf("idle %v err %v, want %v", r.IdleTimeout, err, tc.want)
			}
		})
	}
}

func TestUsageSecondsRoundsUp(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	expect(t, UsageSeconds(&start, start.Add(1500*time.Millisecond)), int64(2))
	expect(t, UsageSeconds(&start, start.Add(2*time.Second)), int64(2))
	expect(t, UsageSeconds(&start, start.Add(-time.Second)), int64(0))
	expect(t, UsageSeconds(nil, start.Time), int64(0))
}

// TestPodPassesRestrictedPSS evaluates the built pod with the Pod Security Admission library itself.
func TestPodPassesRestrictedPSS(t *testing.T) {
	r, err := Resolve(sbx(), nil, DefaultDefaults())
	if err != nil {
		t.Fatal(err)
	}
	pod := BuildPod(sbx(), r, DefaultPodOptions("init:1"))
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	copying := DefaultPodOptions("init:1")
	copying.CopyInit = true
	for _, p := range []*corev1.Pod{pod, BuildPod(sbx(), r, copying)} {
		for _, res := range eval.EvaluatePod(lv, &p.ObjectMeta, &p.Spec) {
			if !res.Allowed {
				t.Errorf("restricted PSS (%d init containers): %s: %s", len(p.Spec.InitContainers), res.ForbiddenReason, res.ForbiddenDetail)
			}
		}
	}
	if *pod.Spec.AutomountServiceAccountToken || *pod.Spec.EnableServiceLinks {
		t.Error("pod must not mount a service-account token nor get service links")
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Error("a restarted container would silently lose the sandbox's processes: want RestartPolicy Never")
	}
	if got := pod.Spec.Containers[0].Command; len(got) < 2 || got[0] != InitBinary || got[1] != "pid1" {
		t.Errorf("PID 1 must be airlock-init pid1, got %v", got)
	}
	if len(pod.Spec.InitContainers) != 0 {
		t.Errorf("one container start: want no init container, got %d", len(pod.Spec.InitContainers))
	}
	if v := pod.Spec.Volumes[0]; v.Image == nil || v.Image.Reference != "init:1" || pod.Spec.Containers[0].VolumeMounts[0].SubPath != InitImagePath {
		t.Errorf("airlock-init must come from an image volume of the init image, got %+v", v)
	}
	wd := pod.Spec.Volumes[1].EmptyDir
	if wd == nil || wd.SizeLimit == nil || wd.SizeLimit.String() != "1Gi" {
		t.Errorf("working directory must be a size-limited emptyDir, got %+v", pod.Spec.Volumes[1])
	}
}

func TestRootPodFailsRestrictedButKeepsNoPrivileges(t *testing.T) {
	r, _ := Resolve(sbx(), nil, DefaultDefaults())
	r.RunAsRoot = true
	pod := BuildPod(sbx(), r, DefaultPodOptions("init:1"))
	c := pod.Spec.Containers[0].SecurityContext
	if *c.RunAsUser != 0 || *c.AllowPrivilegeEscalation || len(c.Capabilities.Drop) != 1 {
		t.Errorf("root sandbox: want uid 0 with no privilege escalation and ALL capabilities dropped, got %+v", c)
	}
}

func TestNetworkPolicyDenyAllAndRestricted(t *testing.T) {
	np := BuildNetworkPolicy(sbx(), airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone}, &testProxy)
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("mode None: want deny-all both ways, got %+v", np.Spec)
	}
	np = BuildNetworkPolicy(sbx(), airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Egress: []airlockv1.EgressRule{
		{CIDR: "203.0.113.0/24", Ports: []airlockv1.EgressPort{{Port: 443}, {Port: 53, Protocol: corev1.ProtocolUDP}}},
		{CIDR: "198.51.100.7/32"},
	}}, &testProxy)
	if len(np.Spec.Ingress) != 0 {
		t.Error("Restricted must still deny all ingress")
	}
	if len(np.Spec.Egress) != 2 {
		t.Fatalf("want exactly the 2 CIDR rules (no DNS, no proxy without an allowlist), got %d", len(np.Spec.Egress))
	}
	if p := np.Spec.Egress[0].Ports; len(p) != 2 || *p[0].Protocol != corev1.ProtocolTCP || *p[1].Protocol != corev1.ProtocolUDP {
		t.Errorf("ports: got %+v", p)
	}
	if len(np.Spec.Egress[1].Ports) != 0 {
		t.Error("a rule without ports allows every port of its CIDR")
	}
}

func withTmpl(name string) func(*airlockv1.Sandbox) {
	return func(s *airlockv1.Sandbox) { s.Spec.TemplateRef = &airlockv1.TemplateReference{Name: name} }
}

var testProxy = EgressProxy{Address: "10.96.7.7:3128", Namespace: "airlock-system",
	PodLabels: map[string]string{"app.kubernetes.io/name": "airlock-egress-proxy"}, PodPort: 3128}

func TestRestrictedAllowlistReachesOnlyTheProxy(t *testing.T) {
	n := airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: []string{"pypi.org"}}
	np := BuildNetworkPolicy(sbx(), n, &testProxy)
	if len(np.Spec.Egress) != 1 {
		t.Fatalf("want one rule (the proxy's pods), got %+v", np.Spec.Egress)
	}
	r := np.Spec.Egress[0]
	if len(r.To) != 1 || r.To[0].IPBlock != nil || r.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "airlock-system" ||
		r.To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "airlock-egress-proxy" {
		t.Errorf("peer: %+v", r.To)
	}
	if len(r.Ports) != 1 || r.Ports[0].Port.IntVal != 3128 || *r.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("ports: %+v", r.Ports)
	}

	res := Resolved{Image: "img", RuntimeClassName: "gvisor", WorkingDir: DefaultWorkingDir, Network: n, EgressProxy: &testProxy}
	pod := BuildPod(sbx(), res, DefaultPodOptions("init:1"))
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		if env[k] != "http://10.96.7.7:3128" {
			t.Errorf("%s = %q, want the proxy Service's IP", k, env[k])
		}
	}
	if env[NetworkModeEnv] != "restricted" || env["PIP_INDEX_URL"] != "" {
		t.Errorf("restricted env: %v", env)
	}
	if !slices.Contains(pod.Spec.Containers[0].Command, ProxyTargetFlag+"10.96.7.7:3128") {
		t.Errorf("the gate is not told to reach the proxy: %v", pod.Spec.Containers[0].Command)
	}
	if pod.Spec.DNSPolicy != corev1.DNSNone || pod.Spec.DNSConfig.Nameservers[0] != "127.0.0.1" {
		t.Errorf("want no resolver, got %s %+v", pod.Spec.DNSPolicy, pod.Spec.DNSConfig)
	}
}

func TestModeNoneToolsFailFast(t *testing.T) {
	res := Resolved{Image: "img", RuntimeClassName: "gvisor", WorkingDir: DefaultWorkingDir, Network: airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone},
		Env: []airlockv1.EnvVar{{Name: "PIP_INDEX_URL", Value: "http://mine/"}}}
	pod := BuildPod(sbx(), res, DefaultPodOptions("init:1"))
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value // later entries win, as in the kubelet
	}
	if env["PIP_RETRIES"] != "0" || env["npm_config_fetch_retries"] != "0" || env[NetworkModeEnv] != "none" || env["HTTP_PROXY"] != "" {
		t.Errorf("mode None env: %v", env)
	}
	if env["PIP_INDEX_URL"] != "http://mine/" {
		t.Errorf("the template's env must win over the defaults, got %q", env["PIP_INDEX_URL"])
	}
	if slices.ContainsFunc(pod.Spec.Containers[0].Command, func(a string) bool { return strings.HasPrefix(a, ProxyTargetFlag) }) {
		t.Error("mode None must not probe the proxy")
	}
}

func TestAllowlistNarrowsTheTemplates(t *testing.T) {
	tmpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "py"}, Spec: airlockv1.SandboxTemplateSpec{Image: "img",
		Network: &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: []string{"pypi.org", "*.pythonhosted.org"}}}}
	restricted := func(allow ...string) *airlockv1.Sandbox {
		s := sbx()
		s.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: allow}
		return s
	}
	r, err := Resolve(restricted(), tmpl, DefaultDefaults())
	if err != nil || !slices.Equal(r.Network.Allow, []string{"pypi.org", "*.pythonhosted.org"}) {
		t.Errorf("restricted without a list: %v %v, want the template's", r.Network.Allow, err)
	}
	r, err = Resolve(restricted("files.pythonhosted.org"), tmpl, DefaultDefaults())
	if err != nil || !slices.Equal(r.Network.Allow, []string{"files.pythonhosted.org"}) {
		t.Errorf("narrowed: %v %v", r.Network.Allow, err)
	}
	if _, err := Resolve(restricted("pypi.org", "evil.example"), tmpl, DefaultDefaults()); err == nil || !strings.Contains(err.Error(), `"evil.example" is not within template py's allowlist`) {
		t.Errorf("widened: %v", err)
	}
	tmpl.Spec.Network.Mode = airlockv1.NetworkNone // the default template's way: None unless asked
	r, err = Resolve(restricted(), tmpl, DefaultDefaults())
	if err != nil || len(r.Network.Allow) != 2 {
		t.Errorf("restricted from a None template with a list: %v %v, want the template's list", r.Network.Allow, err)
	}
	r, err = Resolve(sbx(withTmpl("py")), tmpl, DefaultDefaults())
	if err != nil || r.Network.Mode != airlockv1.NetworkNone || r.Network.Allow != nil {
		t.Errorf("the None template's own network: %+v %v, want None without a list", r.Network, err)
	}
	noneWithList := sbx()
	noneWithList.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone, Allow: []string{"pypi.org"}}
	if _, err := Resolve(noneWithList, nil, DefaultDefaults()); err == nil {
		t.Error("a sandbox's own list without Restricted must be refused")
	}
	noTmpl := restricted("10.0.0.1")
	noTmpl.Spec.Image = "img"
	if _, err := Resolve(noTmpl, nil, DefaultDefaults()); err == nil {
		t.Error("an address in network.allow must be refused")
	}
}

func TestOtherSelectingPolicies(t *testing.T) {
	podLabels := map[string]string{LabelName: "s", "team": "a"}
	pol := func(name string, sel metav1.LabelSelector) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.NetworkPolicySpec{PodSelector: sel}}
	}
	policies := []networkingv1.NetworkPolicy{
		pol("s", metav1.LabelSelector{MatchLabels: map[string]string{LabelName: "s"}}), // ours
		pol("all-pods", metav1.LabelSelector{}),
		pol("team-b", metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}),
		pol("empty-value", metav1.LabelSelector{MatchLabels: map[string]string{"absent": ""}}),
		pol("by-expr", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"a"}}}}),
	}
	got, err := OtherSelectingPolicies(podLabels, "s", policies)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, len(got), 2)
	expect(t, got[0], "all-pods")
	expect(t, got[1], "by-expr")
}

// Whatever else a selector says, one that requires a sandbox name selects only that sandbox's pod; every
// other selector may select any sandbox's.
func TestSelectedName(t *testing.T) {
	for _, tc := range []struct {
		sel  metav1.LabelSelector
		want string
	}{
		{metav1.LabelSelector{MatchLabels: map[string]string{LabelName: "s"}}, "s"},
		{metav1.LabelSelector{MatchLabels: map[string]string{LabelName: "s", "team": "a"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: metav1.LabelSelectorOpExists}}}, "s"},
		{metav1.LabelSelector{}, AnyName},
		{metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}, AnyName},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelName, Operator: metav1.LabelSelectorOpIn, Values: []string{"s"}}}}, AnyName},
	} {
		p := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{PodSelector: tc.sel}}
		expect(t, SelectedName(p), tc.want)
	}
}

func TestPolicyMatchesIgnoresNilVersusEmpty(t *testing.T) {
	want := BuildNetworkPolicy(sbx(), airlockv1.NetworkSpec{}, nil)
	got := want.DeepCopy()
	got.Spec.Ingress, got.Spec.Egress = nil, nil
	if !PolicyMatches(got, want) {
		t.Error("nil and empty rule lists must match")
	}
	got.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	if PolicyMatches(got, want) {
		t.Error("an added allow-all egress rule must not match")
	}
}

func expect[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestProcessLimitFollowsTheHandler: the process limit applies under gVisor's handlers whatever the RuntimeClass
// is named (a class "sandboxed" with handler runsc; GKE's class gvisor with handler gvisor), and not under runc
// even in a class named gvisor. With the limit matched against the class name, as before, the first two fail.
func TestProcessLimitFollowsTheHandler(t *testing.T) {
	for _, tc := range []struct {
		class, handler string
		want           bool
	}{
		{"sandboxed", "runsc", true},
		{"gvisor", "gvisor", true},
		{"gvisor-kvm", "runsc-kvm", true},
		{"gvisor", "runc", false},
		{"kata", "kata-qemu", false},
	} {
		r, _ := Resolve(sbx(), nil, DefaultDefaults())
		r.RuntimeClassName, r.RuntimeHandler = tc.class, tc.handler
		pod := BuildPod(sbx(), r, DefaultPodOptions("init:1"))
		got := false
		for _, e := range pod.Spec.Containers[0].Env {
			if e.Name == ProcessLimitEnv {
				got = e.Value == "256"
			}
		}
		if got != tc.want {
			t.Errorf("class %s, handler %s: process limit set=%v, want %v", tc.class, tc.handler, got, tc.want)
		}
	}
	o := DefaultPodOptions("init:1")
	o.ProcessLimitHandlers = []string{"kata*"}
	r, _ := Resolve(sbx(), nil, DefaultDefaults())
	r.RuntimeHandler = "kata-qemu"
	if !slices.ContainsFunc(BuildPod(sbx(), r, o).Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == ProcessLimitEnv }) {
		t.Error("the operator's handler globs must decide where the limit applies")
	}
}

// TestAirlockEnvComesLast: Airlock's own variables are the container's last entries, after the template's and
// the sandbox's env, so the kubelet (last duplicate wins, for the env and for $(AIRLOCK_NODE_IP) in PID 1's
// --gate-host) uses Airlock's even when an object made before the CRD refused such names carries one. Fails
// with AIRLOCK_NODE_IP first and the tenant's env after it (as before): checked.
func TestAirlockEnvComesLast(t *testing.T) {
	r, _ := Resolve(sbx(), nil, DefaultDefaults())
	r.RuntimeHandler = "runsc"
	r.Env = []airlockv1.EnvVar{{Name: "AIRLOCK_NODE_IP", Value: "127.0.0.1"}, {Name: "AIRLOCK_MEMORY_GUARD", Value: "off"},
		{Name: "AIRLOCK_PROCESS_LIMIT", Value: "100000"}, {Name: NetworkModeEnv, Value: "restricted"}, {Name: "MINE", Value: "1"}}
	o := DefaultPodOptions("init:1")
	o.MemoryGuard = "200"
	env := BuildPod(sbx(), r, o).Spec.Containers[0].Env
	if len(env) < 4 {
		t.Fatalf("env %+v", env)
	}
	tail := map[string]corev1.EnvVar{}
	for _, e := range env[len(env)-4:] {
		tail[e.Name] = e
	}
	if ip := tail["AIRLOCK_NODE_IP"]; ip.ValueFrom == nil || ip.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
		t.Errorf("the last entries must hold the node's IP as AIRLOCK_NODE_IP, got %+v in %+v", ip, env)
	}
	for name, want := range map[string]string{MemoryGuardEnv: "200", ProcessLimitEnv: "256", NetworkModeEnv: "none"} {
		if e, ok := tail[name]; !ok || e.Value != want {
			t.Errorf("the last entries must hold Airlock's %s=%s, got %+v in %+v", name, want, e, env)
		}
	}
	if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == "MINE" && e.Value == "1" }) {
		t.Errorf("the sandbox's own variable is lost: %+v", env)
	}
}

func TestWorkdirUnderGVisorIsInTheSizedRootOverlay(t *testing.T) {
	r, err := Resolve(sbx(), nil, DefaultDefaults())
	if err != nil {
		t.Fatal(err)
	}
	r.RuntimeHandler = "runsc"
	pod := BuildPod(sbx(), r, DefaultPodOptions("init:1"))
	if got := pod.Annotations[GVisorOverlayAnnotation]; got != "root:self,size=1073741824" {
		t.Errorf("overlay annotation %q, want the small size's 1Gi", got)
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.MountPath == r.WorkingDir {
			t.Errorf("under gVisor the working directory must stay in the root overlay (an emptyDir only evicts), got mount %+v", m)
		}
	}
	r.RuntimeClassName, r.RuntimeHandler = "sandboxed", "gvisor" // GKE Sandbox's handler, in a class of any name
	if pod := BuildPod(sbx(), r, DefaultPodOptions("init:1")); pod.Annotations[GVisorOverlayAnnotation] == "" {
		t.Errorf("handler gvisor is gVisor: want the overlay annotation, got %v", pod.Annotations)
	}
	r.RuntimeClassName, r.RuntimeHandler = "gvisor", "runc"
	if pod := BuildPod(sbx(), r, DefaultPodOptions("init:1")); pod.Annotations[GVisorOverlayAnnotation] != "" || len(pod.Spec.Volumes) != 2 {
		t.Errorf("under runc the working directory is a size-limited emptyDir without the gVisor annotation, got %v %+v", pod.Annotations, pod.Spec.Volumes)
	}
}
