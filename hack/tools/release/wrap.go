package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func runWrap(args []string) error {
	fs := flag.NewFlagSet("wrap", flag.ContinueOnError)
	var name, version, out string
	tars := platformFiles{}
	fs.StringVar(&name, "name", "", "image name, e.g. sandbox-python")
	fs.StringVar(&version, "version", "", "release version: the layout's tag")
	fs.StringVar(&out, "out", "", "directory of the OCI layout to write")
	fs.Var(tars, "image", "os/arch=OCI.tar: an OCI layout tarball holding one image for that platform (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" || version == "" || out == "" || len(tars) == 0 {
		return errors.New("wrap: --name, --version, --out and at least one --image are required")
	}
	work, err := os.MkdirTemp("", "airlock-wrap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	images := map[string]v1.Image{}
	for i, plat := range tars.platforms() {
		img, err := imageFromTar(tars[plat], filepath.Join(work, fmt.Sprint(i)), plat)
		if err != nil {
			return fmt.Errorf("%s %s: %w", name, plat, err)
		}
		images[plat] = img
	}
	idx, err := newIndex(images, map[string]string{
		"org.opencontainers.image.title":    name,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.vendor":   "Airlock",
		"org.opencontainers.image.licenses": "Apache-2.0",
	})
	if err != nil {
		return err
	}
	return writeLayout(out, idx, version)
}

// imageFromTar unpacks an OCI layout tarball into dir and returns its one image, which must be for plat: an
// image configured for another architecture would be offered to the wrong nodes.
func imageFromTar(tarPath, dir, plat string) (v1.Image, error) {
	if err := untar(tarPath, dir); err != nil {
		return nil, err
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI layout tarball: %w", tarPath, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsImage() {
		return nil, fmt.Errorf("%s: want one image in its index.json, found %d entries", tarPath, len(m.Manifests))
	}
	img, err := top.Image(m.Manifests[0].Digest)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	if got := cfg.OS + "/" + cfg.Architecture; got != plat {
		return nil, fmt.Errorf("%s holds a %s image, given as %s", tarPath, got, plat)
	}
	return img, nil
}

// untar extracts a layout tarball (regular files and directories only) into dir; no entry lands outside it.
func untar(tarPath, dir string) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tarPath, err)
		}
		// Rooted before joining, so "../x" cannot climb out of dir.
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFileFrom(target, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %q is not a file or directory", tarPath, h.Name)
		}
	}
}

func writeFileFrom(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
