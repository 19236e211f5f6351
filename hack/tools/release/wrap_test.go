package main

import (
	"archive/tar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// imageTar writes img's single-image OCI layout as a tarball, as hack/images.sh leaves its images.
func imageTar(t *testing.T, arch string) string {
	t.Helper()
	img, err := binaryImage(testSpec(), "linux/"+arch, buildHello(t, arch))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if b, err := exec.Command("tar", "-C", filepath.Join(dir, "oci"), "-cf", out, "oci-layout", "index.json", "blobs").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	return out
}

// TestWrapJoinsImagesOfTheirOwnPlatform: a single-image tarball becomes its platform's entry of an index, with
// the image's manifest unchanged (its digest is what the local cluster imported); one whose config says another
// architecture than the one it is given as is refused (fails without the check in imageFromTar: checked).
func TestWrapJoinsImagesOfTheirOwnPlatform(t *testing.T) {
	tarball := imageTar(t, "arm64")
	img, err := imageFromTar(tarball, t.TempDir(), "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := newIndex(map[string]v1.Image{"linux/arm64": img}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	want, _ := img.Digest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want || m.Manifests[0].Platform.Architecture != "arm64" {
		t.Errorf("index %+v, want the image %s as linux/arm64", m.Manifests, want)
	}
	if _, err := imageFromTar(tarball, t.TempDir(), "linux/amd64"); err == nil || !strings.Contains(err.Error(), "holds a linux/arm64 image, given as linux/amd64") {
		t.Errorf("an arm64 image given as amd64: %v", err)
	}
}

// TestUntarStaysInItsDirectory: an entry naming a path above the target directory is written inside it
// (fails with a plain filepath.Join in untar: checked).
func TestUntarStaysInItsDirectory(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.tar")
	f, err := os.Create(bad)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: "../../escaped", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write([]byte("x"))
	tw.Close()
	f.Close()
	target := filepath.Join(dir, "a", "b")
	if err := untar(bad, target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped")); err == nil {
		t.Error("an entry was written outside the target directory")
	}
	if _, err := os.Stat(filepath.Join(target, "escaped")); err != nil {
		t.Errorf("the entry is not inside the target directory: %v", err)
	}
}
