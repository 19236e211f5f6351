package chart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"airlock.dev/airlock/internal/doctor"
)

// The chart installs on the oldest Kubernetes Airlock supports, the one make test-compat builds and runs envtest
// on (K8S_COMPAT_VERSION), and on nothing older; there it renders no MutatingAdmissionPolicy (the manager adds
// the finalizer itself); airlock doctor judges clusters against the same floor.
func TestChartInstallsOnTheFloorVersion(t *testing.T) {
	floor := pinnedVersion(t, "K8S_COMPAT_VERSION")
	var minor, patch int
	if _, err := fmt.Sscanf(floor, "v1.%d.%d", &minor, &patch); err != nil {
		t.Fatalf("K8S_COMPAT_VERSION %q is not v1.N.P: %v", floor, err)
	}
	if want := fmt.Sprintf(`kubeVersion: ">=1.%d.0-0"`, minor); !strings.Contains(readFile(t, filepath.Join(chartDir(t), "Chart.yaml")), want) {
		t.Errorf("Chart.yaml's kubeVersion is not the floor make test-compat tests (%s): want %s", floor, want)
	}
	if want := fmt.Sprintf("v1.%d.0", minor); doctor.MinKubernetes != want {
		t.Errorf("airlock doctor judges against %s, the floor is %s", doctor.MinKubernetes, want)
	}
	out, err := exec.Command(helmBinary(t), "template", "airlock", chartDir(t), "--namespace", releaseNamespace, "--kube-version", floor).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template on %s: %v\n%s", floor, err, out)
	}
	if strings.Contains(string(out), "kind: MutatingAdmissionPolicy") {
		t.Errorf("rendered a MutatingAdmissionPolicy for %s, which serves none", floor)
	}
	older := fmt.Sprintf("v1.%d.0", minor-1)
	out, err = exec.Command(helmBinary(t), "template", "airlock", chartDir(t), "--namespace", releaseNamespace, "--kube-version", older).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "kubeVersion") {
		t.Errorf("helm template on %s, below the floor: %v\n%s", older, err, out)
	}
}

// pinnedVersion reads NAME from hack/versions.env.
func pinnedVersion(t *testing.T, name string) string {
	t.Helper()
	for _, l := range strings.Split(readFile(t, filepath.Join(repoRoot(t), "hack", "versions.env")), "\n") {
		if v, ok := strings.CutPrefix(l, name+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("hack/versions.env pins no %s", name)
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
