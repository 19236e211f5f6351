package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func fakeDigests(names ...string) *Digests {
	d := &Digests{Registry: "registry.example:5000/airlock", Version: "1.2.3", Images: map[string]ImageDigest{}}
	for i, n := range names {
		d.Images[n] = ImageDigest{Digest: "sha256:" + strings.Repeat(string(rune('a'+i)), 64)}
	}
	return d
}

var allImages = []string{"manager", "gateway", "init", "egress-proxy", "sandbox-python"}

// TestPinValuesOfTheRealChart: the chart's own values.yaml, pinned, names the registry and every image by its
// digest (Airlock's through image.digests, the sandbox image in every template using it), and keeps its
// comments.
func TestPinValuesOfTheRealChart(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "airlock", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := fakeDigests(allImages...)
	out, err := pinValues(src, d)
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	if err := yaml.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if v.Image.Repository != d.Registry {
		t.Errorf("image.repository = %s", v.Image.Repository)
	}
	for _, n := range chartImages {
		if v.Image.Digests[n] != d.Images[n].Digest {
			t.Errorf("image.digests.%s = %q", n, v.Image.Digests[n])
		}
	}
	pinned := d.Registry + "/sandbox-python@" + d.Images["sandbox-python"].Digest
	if len(v.SandboxTemplates) == 0 {
		t.Fatal("the chart has no sandbox templates")
	}
	for name, tpl := range v.SandboxTemplates {
		if tpl.Image != pinned {
			t.Errorf("sandboxTemplates.%s.image = %s, want %s", name, tpl.Image, pinned)
		}
	}
	if got, want := strings.Count(string(out), "\n#"), strings.Count(string(src), "\n#"); got != want {
		t.Errorf("%d comment lines after pinning, %d before", got, want)
	}
}

// TestPinValuesRefusesAChartItCannotPin: an image the chart runs that was not pushed, a template naming an
// unpushed image under the chart's repository, or values without the digests field fail, naming the value.
func TestPinValuesRefusesAChartItCannotPin(t *testing.T) {
	const values = "image:\n  repository: localhost/airlock\n  digests: {}\nsandboxTemplates:\n  a:\n    image: localhost/airlock/sandbox-python:1\n"
	for name, tc := range map[string]struct {
		values string
		pushed []string
		want   string
	}{
		"gateway not pushed":      {values, []string{"manager", "init", "egress-proxy", "sandbox-python"}, "image gateway was not pushed"},
		"sandbox image missing":   {values, []string{"manager", "gateway", "init", "egress-proxy"}, "sandboxTemplates.a.image"},
		"no digests field":        {strings.Replace(values, "  digests: {}\n", "", 1), allImages, "image.digests"},
		"repository not a line":   {strings.Replace(values, "  repository: localhost/airlock", "  repository:\n    localhost/airlock", 1), allImages, "image.repository"},
		"own image left as it is": {strings.Replace(values, "localhost/airlock/sandbox-python:1", "docker.io/library/python:3", 1), allImages, ""},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := pinValues([]byte(tc.values), fakeDigests(tc.pushed...))
			if tc.want == "" {
				if err != nil || !strings.Contains(string(out), "image: docker.io/library/python:3") {
					t.Errorf("err %v, values:\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
}
