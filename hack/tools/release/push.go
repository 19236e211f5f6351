package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Digests is dist/digests.json: what `make push` pushed, by image name. The chart step adds Chart.
type Digests struct {
	Registry string                 `json:"registry"`
	Version  string                 `json:"version"`
	Images   map[string]ImageDigest `json:"images"`
	Chart    *ChartDigest           `json:"chart,omitempty"`
}

// ImageDigest is one pushed multi-arch image: its tag, the index digest and each platform's manifest digest.
type ImageDigest struct {
	Reference string            `json:"reference"`
	Digest    string            `json:"digest"`
	Platforms map[string]string `json:"platforms"`
}

// ChartDigest is the pushed chart (helm push): oci:// reference and manifest digest.
type ChartDigest struct {
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
}

func runPush(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	var images, registry, out string
	var plainHTTP bool
	fs.StringVar(&images, "images", "", "directory holding one OCI layout per image (dist/images)")
	fs.StringVar(&registry, "registry", "", "HOST[:PORT]/PATH images are pushed under (REGISTRY/NAME:VERSION)")
	fs.BoolVar(&plainHTTP, "plain-http", false, "talk plain HTTP to the registry (loopback registries get it anyway)")
	fs.StringVar(&out, "out", "", "digests file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if images == "" || registry == "" || out == "" {
		return errors.New("push: --images, --registry and --out are required")
	}
	d, err := pushAll(context.Background(), images, registry, plainHTTP)
	if err != nil {
		return err
	}
	return writeDigests(out, d)
}

// pushAll pushes every layout under dir as REGISTRY/NAME:VERSION; all layouts must carry the same version.
func pushAll(ctx context.Context, dir, registry string, plainHTTP bool) (*Digests, error) {
	registry = strings.TrimSuffix(registry, "/")
	if _, err := name.NewRepository(registry+"/x", nameOptions(plainHTTP)...); err != nil {
		return nil, fmt.Errorf("registry %q: want HOST[:PORT]/PATH: %w", registry, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	d := &Digests{Registry: registry, Images: map[string]ImageDigest{}}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		idx, tag, err := readLayout(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if d.Version != "" && tag != d.Version {
			return nil, fmt.Errorf("layout %s is version %s, the others %s: rebuild with `make release`", e.Name(), tag, d.Version)
		}
		d.Version = tag
		img, err := pushIndex(ctx, idx, registry+"/"+e.Name()+":"+tag, plainHTTP)
		if err != nil {
			return nil, fmt.Errorf("pushing %s: %w", e.Name(), err)
		}
		d.Images[e.Name()] = img
		fmt.Fprintf(os.Stderr, "pushed %s@%s (%s)\n", img.Reference, img.Digest, strings.Join(sortedKeys(img.Platforms), ", "))
	}
	if len(d.Images) == 0 {
		return nil, fmt.Errorf("no image layouts under %s: run `make release` first", dir)
	}
	return d, nil
}

// pushIndex pushes idx (its images first, then the index) under ref and reports the digests the registry now
// serves: the manifests' bytes are pushed as they are, so they are the layout's digests.
func pushIndex(ctx context.Context, idx v1.ImageIndex, ref string, plainHTTP bool) (ImageDigest, error) {
	tag, err := name.NewTag(ref, nameOptions(plainHTTP)...)
	if err != nil {
		return ImageDigest{}, err
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return ImageDigest{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return ImageDigest{}, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return ImageDigest{}, err
	}
	out := ImageDigest{Reference: ref, Digest: digest.String(), Platforms: map[string]string{}}
	for _, desc := range m.Manifests {
		if desc.Platform == nil {
			return ImageDigest{}, fmt.Errorf("%s: manifest %s names no platform", ref, desc.Digest)
		}
		out.Platforms[desc.Platform.OS+"/"+desc.Platform.Architecture] = desc.Digest.String()
	}
	return out, nil
}

func nameOptions(plainHTTP bool) []name.Option {
	opts := []name.Option{name.StrictValidation}
	if plainHTTP {
		opts = append(opts, name.Insecure)
	}
	return opts
}

func writeDigests(path string, d *Digests) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readDigests(path string) (*Digests, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Digests
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if d.Registry == "" || len(d.Images) == 0 {
		return nil, fmt.Errorf("%s names no registry or no images: run `make push`", path)
	}
	return &d, nil
}
