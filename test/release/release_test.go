// Package release checks Airlock's release against a real OCI registry: `make push` fills a CNCF distribution
// registry on loopback with what `make release` left in dist/, and the test reads it back over the
// distribution API (plain net/http, not the go-containerregistry code that pushed) and with `helm pull`.
//
// Run with `make test-release` (it runs `make release`, builds the registry and sets AIRLOCK_REGISTRY and
// AIRLOCK_HELM).
package release

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/ociregistry"
)

// Airlock's own images and the binary each runs; all are built for both architectures.
var airlockImages = map[string]string{"manager": "manager", "gateway": "gateway", "init": "airlock-init", "egress-proxy": "egress-proxy"}

const registryPath = "airlock"

// digests is dist/digests.json, as hack/tools/release writes it.
type digests struct {
	Registry string `json:"registry"`
	Version  string `json:"version"`
	Images   map[string]struct {
		Reference string            `json:"reference"`
		Digest    string            `json:"digest"`
		Platforms map[string]string `json:"platforms"`
	} `json:"images"`
	Chart struct {
		Reference string `json:"reference"`
		Digest    string `json:"digest"`
	} `json:"chart"`
}

type ociIndex struct {
	MediaType string `json:"mediaType"`
	Manifests []struct {
		Digest   string `json:"digest"`
		Platform struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	} `json:"manifests"`
}

type ociManifest struct {
	Config struct {
		Digest string `json:"digest"`
	} `json:"config"`
	Layers []struct {
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
	} `json:"layers"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run `make test-release`", name)
	}
	return v
}

// TestPushedReleaseIsWhatWasBuilt: `make push` into a loopback registry; every image index lists the
// architectures it was built for, each image's config says its architecture and what it runs, the registry
// serves exactly the digests dist/digests.json records, and the chart `helm pull` gets back names every image
// by registry and digest.
func TestPushedReleaseIsWhatWasBuilt(t *testing.T) {
	registryBin, helm := env(t, "AIRLOCK_REGISTRY"), env(t, "AIRLOCK_HELM")
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "dist", "images")); err != nil {
		t.Fatalf("no release in dist/ (%v): run `make test-release`, which runs `make release` first", err)
	}
	reg := ociregistry.Start(t, registryBin)
	registry := reg.Host + "/" + registryPath

	start := time.Now()
	push := exec.Command("make", "-s", "push", "REGISTRY="+registry)
	push.Dir = root
	out, err := push.CombinedOutput()
	if err != nil {
		t.Fatalf("make push REGISTRY=%s: %v\n%s", registry, err, out)
	}
	t.Logf("make push took %s:\n%s", time.Since(start).Round(time.Millisecond), out)

	var d digests
	b, err := os.ReadFile(filepath.Join(root, "dist", "digests.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dist/digests.json: %v", err)
	}
	if d.Registry != registry || d.Version == "" {
		t.Fatalf("dist/digests.json names registry %q version %q, want %s", d.Registry, d.Version, registry)
	}
	for name, bin := range airlockImages {
		checkImage(t, reg, d, name, []string{"linux/amd64", "linux/arm64"}, func(t *testing.T, cfg imageConfig) {
			if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/usr/local/bin/"+bin {
				t.Errorf("entrypoint %q, want /usr/local/bin/%s", got, bin)
			}
			if cfg.Config.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532 (non-root)", cfg.Config.User)
			}
		})
	}
	// The sandbox image: amd64 always; arm64 when the release was built with SANDBOX_ARCHS="amd64 arm64".
	sandboxPlatforms := sortedKeys(d.Images["sandbox-python"].Platforms)
	if len(sandboxPlatforms) == 0 || sandboxPlatforms[0] != "linux/amd64" {
		t.Errorf("sandbox-python was pushed for %v, want linux/amd64 at least", sandboxPlatforms)
	}
	checkImage(t, reg, d, "sandbox-python", sandboxPlatforms, func(t *testing.T, cfg imageConfig) {
		if cfg.Config.User != "1000:1000" || cfg.Config.WorkingDir != "/home/sandbox" || strings.Join(cfg.Config.Cmd, " ") != "sleep infinity" {
			t.Errorf("user %q, working dir %q, cmd %v; want 1000:1000, /home/sandbox, sleep infinity", cfg.Config.User, cfg.Config.WorkingDir, cfg.Config.Cmd)
		}
		// What the default template promises (Python 3, Node.js 22), as the image's own binaries reported it.
		labels := cfg.Config.Labels
		if !strings.HasPrefix(labels["dev.airlock.runtime.node"], "22.") || !strings.HasPrefix(labels["dev.airlock.runtime.python"], "3.") || labels["dev.airlock.runtime.npm"] == "" {
			t.Errorf("runtime labels node %q python %q npm %q: want Node.js 22.x, Python 3.x and npm", labels["dev.airlock.runtime.node"],
				labels["dev.airlock.runtime.python"], labels["dev.airlock.runtime.npm"])
		}
	})
	checkChart(t, reg, d, helm)
}

// checkImage reads NAME:VERSION from the registry: its index is the recorded digest and lists exactly
// platforms, each platform's manifest is the recorded one, its config is for that platform and passes
// checkConfig, and every layer is in the registry at its size.
func checkImage(t *testing.T, reg *ociregistry.Registry, d digests, name string, platforms []string, checkConfig func(*testing.T, imageConfig)) {
	t.Run(name, func(t *testing.T) {
		want, ok := d.Images[name]
		if !ok {
			t.Fatalf("dist/digests.json has no image %s", name)
		}
		repo := registryPath + "/" + name
		body, mediaType, digest, err := reg.Manifest(repo, d.Version)
		if err != nil {
			t.Fatal(err)
		}
		if digest != want.Digest || mediaType != "application/vnd.oci.image.index.v1+json" {
			t.Fatalf("%s:%s is %s (%s), dist/digests.json says %s", repo, d.Version, digest, mediaType, want.Digest)
		}
		var idx ociIndex
		if err := json.Unmarshal(body, &idx); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range idx.Manifests {
			plat := m.Platform.OS + "/" + m.Platform.Architecture
			got = append(got, plat)
			if want.Platforms[plat] != m.Digest {
				t.Errorf("%s: index lists %s, dist/digests.json %s", plat, m.Digest, want.Platforms[plat])
			}
			checkPlatformImage(t, reg, repo, plat, m.Digest, checkConfig)
		}
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(platforms, " ") {
			t.Errorf("index lists %v, want %v", got, platforms)
		}
	})
}

func checkPlatformImage(t *testing.T, reg *ociregistry.Registry, repo, plat, digest string, checkConfig func(*testing.T, imageConfig)) {
	body, _, got, err := reg.Manifest(repo, digest)
	if err != nil || got != digest {
		t.Fatalf("%s manifest %s: %v (got %s)", plat, digest, err, got)
	}
	var m ociManifest
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	cfgBytes, err := reg.Blob(repo, m.Config.Digest)
	if err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(cfgBytes, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS+"/"+cfg.Architecture != plat {
		t.Errorf("the %s entry's config says %s/%s", plat, cfg.OS, cfg.Architecture)
	}
	t.Run(strings.ReplaceAll(plat, "/", "-"), func(t *testing.T) { checkConfig(t, cfg) })
	for _, l := range m.Layers {
		if size, err := reg.BlobSize(repo, l.Digest); err != nil || size != l.Size {
			t.Errorf("%s layer %s: size %d (%v), manifest says %d", plat, l.Digest, size, err, l.Size)
		}
	}
}

// checkChart pulls the chart with helm, as a user would, and renders it: every image it runs, and the sandbox
// templates' images, are REGISTRY/NAME@DIGEST with the pushed digests.
func checkChart(t *testing.T, reg *ociregistry.Registry, d digests, helm string) {
	t.Run("chart", func(t *testing.T) {
		if d.Chart.Reference != "oci://"+d.Registry+"/charts/airlock:"+d.Version {
			t.Errorf("chart reference %q", d.Chart.Reference)
		}
		if _, _, digest, err := reg.Manifest(registryPath+"/charts/airlock", d.Version); err != nil || digest != d.Chart.Digest {
			t.Errorf("chart manifest %s (%v), dist/digests.json says %s", digest, err, d.Chart.Digest)
		}
		dir := t.TempDir()
		out, err := exec.Command(helm, "pull", "oci://"+d.Registry+"/charts/airlock", "--version", d.Version,
			"--plain-http", "--untar", "-d", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("helm pull: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), d.Chart.Digest) {
			t.Errorf("helm pull reports no digest %s:\n%s", d.Chart.Digest, out)
		}
		rendered, err := exec.Command(helm, "template", "airlock", filepath.Join(dir, "airlock"), "-n", "airlock-system").CombinedOutput()
		if err != nil {
			t.Fatalf("helm template of the pulled chart: %v\n%s", err, rendered)
		}
		images := map[string]bool{}
		for _, l := range strings.Split(string(rendered), "\n") {
			l = strings.TrimSpace(l)
			if v, ok := strings.CutPrefix(l, "image: "); ok {
				images[strings.Trim(v, `"`)] = true
			}
			if v, ok := strings.CutPrefix(l, "- --init-image="); ok {
				images[v] = true
			}
		}
		want := map[string]bool{}
		for _, name := range append(sortedKeys(airlockImages), "sandbox-python") {
			want[d.Registry+"/"+name+"@"+d.Images[name].Digest] = true
		}
		for img := range images {
			if !want[img] {
				t.Errorf("the pulled chart runs %s, which is not a pushed image pinned by digest", img)
			}
		}
		for img := range want {
			if !images[img] {
				t.Errorf("the pulled chart never names %s", img)
			}
		}
	})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
