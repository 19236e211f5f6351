package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// buildHello cross-compiles a tiny static Go program for arch and returns its path.
func buildHello(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hello-"+arch)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", arch, err, b)
	}
	return out
}

func testSpec() imageSpec {
	return imageSpec{Name: "manager", Binary: "manager", Version: "1.2.3", Revision: "abc", UID: 65532,
		Created: time.Unix(1700000000, 0).UTC(), Args: []string{"--flag"}}
}

// TestBinaryImagesPerPlatform: one image per architecture in one index, each configured for its platform, running
// its binary as the non-root user; written to a layout and read back unchanged; a rebuild gives the same digest.
func TestBinaryImagesPerPlatform(t *testing.T) {
	bins := platformFiles{"linux/amd64": buildHello(t, "amd64"), "linux/arm64": buildHello(t, "arm64")}
	idx, err := binaryIndex(testSpec(), bins)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "manager")
	if err := writeLayout(dir, idx, "1.2.3"); err != nil {
		t.Fatal(err)
	}
	back, tag, err := readLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if got, _ := back.Digest(); got != want || tag != "1.2.3" {
		t.Fatalf("layout holds %s tagged %q, want %s tagged 1.2.3", got, tag, want)
	}
	m, err := back.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(m.Manifests))
	}
	for _, desc := range m.Manifests {
		arch := desc.Platform.Architecture
		img, err := back.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture != arch || cfg.Config.User != "65532:65532" ||
			strings.Join(cfg.Config.Entrypoint, " ") != "/usr/local/bin/manager --flag" {
			t.Errorf("%s: config os %s arch %s user %s entrypoint %v", arch, cfg.OS, cfg.Architecture, cfg.Config.User, cfg.Config.Entrypoint)
		}
		files := layerFiles(t, img)
		bin, _ := os.ReadFile(bins["linux/"+arch])
		if !bytes.Equal(files["usr/local/bin/manager"], bin) {
			t.Errorf("%s: /usr/local/bin/manager is not the %s binary", arch, arch)
		}
		if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd lacks the non-root user: %q", arch, files["etc/passwd"])
		}
	}
	again, err := binaryIndex(testSpec(), bins)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := again.Digest(); d != want {
		t.Errorf("rebuilding the same binaries gave %s, then %s: the build is not reproducible", want, d)
	}
}

// layerFiles returns the regular files of an image's layers by path.
func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			files[h.Name] = b
		}
		rc.Close()
	}
	return files
}

// TestRefusesWhatCannotRunOnAnEmptyBase: a binary of another architecture, or a dynamically linked one (no
// libc in the image), never becomes an image (fails without checkStaticBinary: checked).
func TestRefusesWhatCannotRunOnAnEmptyBase(t *testing.T) {
	amd64 := buildHello(t, "amd64")
	if _, err := binaryIndex(testSpec(), platformFiles{"linux/arm64": amd64}); err == nil || !strings.Contains(err.Error(), "GOARCH=arm64") {
		t.Errorf("an amd64 binary given as arm64: %v", err)
	}
	dynamic, err := exec.LookPath("ls")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := binaryIndex(testSpec(), platformFiles{"linux/" + runtime.GOARCH: dynamic}); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("a dynamically linked binary (%s): %v", dynamic, err)
	}
	if err := (platformFiles{}).Set("linux/s390x=" + amd64); err == nil {
		t.Error("an unsupported platform was accepted")
	}
}
