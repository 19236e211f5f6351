package main

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageSpec is what a binary image holds besides its binary: the same layout hack/images.sh gives the local
// images (one static binary at /usr/local/bin/NAME, a non-root user, /tmp, CA certificates).
type imageSpec struct {
	Name        string // image name, e.g. manager
	Binary      string // file name in /usr/local/bin, e.g. airlock-init
	Version     string
	Description string
	Revision    string    // the source commit, as a label
	Source      string    // where the source lives, as a label
	UID         int       // the user the image runs as
	Created     time.Time // image and file times: the commit's, so a rebuild gives the same digests
	CACerts     string    // a CA bundle to include at /etc/ssl/certs/ca-certificates.crt ("" for none)
	Args        []string  // entrypoint arguments after the binary
}

func runImage(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var s imageSpec
	var out string
	var created int64
	bins := platformFiles{}
	fs.StringVar(&s.Name, "name", "", "image name (manager, gateway, init, egress-proxy)")
	fs.StringVar(&s.Binary, "binary-name", "", "file name in /usr/local/bin (default: the binary's own)")
	fs.StringVar(&s.Version, "version", "", "release version: the layout's tag")
	fs.StringVar(&s.Description, "description", "", "org.opencontainers.image.description")
	fs.StringVar(&s.Revision, "revision", "unknown", "source commit (org.opencontainers.image.revision)")
	fs.StringVar(&s.Source, "source", "", "source repository (org.opencontainers.image.source)")
	fs.IntVar(&s.UID, "uid", 65532, "user and group id the image runs as")
	fs.Int64Var(&created, "created", 0, "creation time, Unix seconds (e.g. the commit's)")
	fs.StringVar(&s.CACerts, "ca-certs", "", "CA bundle to include")
	fs.StringVar(&out, "out", "", "directory of the OCI layout to write")
	fs.Var(bins, "binary", "os/arch=PATH of a static binary (repeat per platform)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s.Args, s.Created = fs.Args(), time.Unix(created, 0).UTC()
	if s.Name == "" || s.Version == "" || out == "" || len(bins) == 0 {
		return errors.New("image: --name, --version, --out and at least one --binary are required")
	}
	idx, err := binaryIndex(s, bins)
	if err != nil {
		return err
	}
	return writeLayout(out, idx, s.Version)
}

// binaryIndex builds one image per platform and joins them in an index.
func binaryIndex(s imageSpec, bins platformFiles) (v1.ImageIndex, error) {
	images := map[string]v1.Image{}
	for _, plat := range bins.platforms() {
		img, err := binaryImage(s, plat, bins[plat])
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", s.Name, plat, err)
		}
		images[plat] = img
	}
	return newIndex(images, s.annotations())
}

// binaryImage is an empty base plus one layer with the binary, configured to run it as s.UID.
func binaryImage(s imageSpec, plat, path string) (v1.Image, error) {
	p, err := parsePlatform(plat)
	if err != nil {
		return nil, err
	}
	if err := checkStaticBinary(path, p.Architecture); err != nil {
		return nil, err
	}
	name := s.Binary
	if name == "" {
		name = baseName(path)
	}
	layer, err := binaryLayer(path, name, s.UID, s.CACerts, s.Created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(ociEmpty(), layer)
	if err != nil {
		return nil, err
	}
	uid := strconv.Itoa(s.UID)
	cfg := v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Created:      v1.Time{Time: s.Created},
		Config: v1.Config{
			User:       uid + ":" + uid,
			WorkingDir: "/home/nonroot",
			Entrypoint: append([]string{"/usr/local/bin/" + name}, s.Args...),
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/nonroot"},
			Labels:     s.annotations(),
		},
	}
	base, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg.RootFS = base.RootFS
	cfg.History = []v1.History{{Created: v1.Time{Time: s.Created}, CreatedBy: "hack/release.sh image " + s.Name}}
	return mutate.ConfigFile(img, &cfg)
}

// ociEmpty is an empty image with OCI media types: registries and containerd take either, OCI is the standard.
func ociEmpty() v1.Image {
	return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
}

// annotations are the OCI labels of the image, also set on the index.
func (s imageSpec) annotations() map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       s.Name,
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.vendor":      "Airlock",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.revision":    s.Revision,
		"org.opencontainers.image.description": s.Description,
	}
	if s.Source != "" {
		a["org.opencontainers.image.source"] = s.Source
	}
	if s.Description == "" {
		a["org.opencontainers.image.description"] = "Airlock " + s.Name
	}
	return a
}

// elfMachines maps GOARCH to the ELF machine its binaries declare.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkStaticBinary refuses what would not run on an empty base: a binary for another architecture, or one
// that needs a program interpreter (dynamically linked: built without CGO_ENABLED=0).
func checkStaticBinary(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	if want := elfMachines[arch]; f.Machine != want {
		return fmt.Errorf("%s is built for %s, not %s (%s): cross-compile it with GOARCH=%s", path, f.Machine, arch, want, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it needs a program interpreter): build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

func baseName(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return path
	}
	return st.Name()
}
