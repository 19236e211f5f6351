package main

import (
	"fmt"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Platforms Airlock releases images for: what GOARCH cross-compiles to and the field's nodes run.
var supportedArchitectures = map[string]bool{"amd64": true, "arm64": true}

// platformFiles is a repeatable flag of os/arch=PATH pairs, one file per platform.
type platformFiles map[string]string

func (p platformFiles) String() string {
	var s []string
	for _, k := range p.platforms() {
		s = append(s, k+"="+p[k])
	}
	return strings.Join(s, ",")
}

// Set parses linux/amd64=PATH: only linux, only the supported architectures, each at most once.
func (p platformFiles) Set(v string) error {
	plat, path, ok := strings.Cut(v, "=")
	if !ok || path == "" {
		return fmt.Errorf("%q: want os/arch=PATH, e.g. linux/amd64=bin/manager", v)
	}
	if _, err := parsePlatform(plat); err != nil {
		return err
	}
	if _, dup := p[plat]; dup {
		return fmt.Errorf("platform %s given twice", plat)
	}
	p[plat] = path
	return nil
}

// platforms is the keys in a stable order, so images and indexes come out the same on every run.
func (p platformFiles) platforms() []string { return sortedKeys(p) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func parsePlatform(s string) (v1.Platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os != "linux" || !supportedArchitectures[arch] {
		return v1.Platform{}, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", s)
	}
	return v1.Platform{OS: os, Architecture: arch}, nil
}
