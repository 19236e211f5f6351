package main

import (
	"errors"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation tags a manifest in an OCI layout's index.json (what `skopeo copy oci:DIR:TAG` reads).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// newIndex joins one image per platform (keys os/arch) into an OCI image index, in platform order.
func newIndex(images map[string]v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, plat := range sortedKeys(images) {
		p, err := parsePlatform(plat)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: images[plat], Descriptor: v1.Descriptor{Platform: &p}})
	}
	out, ok := mutate.Annotations(idx, annotations).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("annotating the index did not give an index")
	}
	return out, nil
}

// writeLayout writes idx as the only entry of a new OCI layout at dir, tagged tag. An existing dir is replaced:
// a layout keeps every blob ever appended, and a release must hold only its own.
func writeLayout(dir string, idx v1.ImageIndex, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		return fmt.Errorf("creating layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: tag})); err != nil {
		return fmt.Errorf("writing layout %s: %w", dir, err)
	}
	return nil
}

// readLayout returns the one image index of a layout written by writeLayout, and its tag.
func readLayout(dir string) (v1.ImageIndex, string, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("reading layout %s: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, "", fmt.Errorf("layout %s: want exactly one image index in index.json, found %d entries", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	tag := d.Annotations[refNameAnnotation]
	if tag == "" {
		return nil, "", fmt.Errorf("layout %s: its index has no %s annotation (the version)", dir, refNameAnnotation)
	}
	idx, err := top.ImageIndex(d.Digest)
	if err != nil {
		return nil, "", err
	}
	return idx, tag, nil
}
