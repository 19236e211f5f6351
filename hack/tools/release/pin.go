package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// chartImages are the images the chart names through image.repository and pins through image.digests.
var chartImages = []string{"manager", "gateway", "init", "egress-proxy"}

func runPinChart(args []string) error {
	fset := flag.NewFlagSet("pin-chart", flag.ContinueOnError)
	var chart, digests, out string
	fset.StringVar(&chart, "chart", "", "chart directory (charts/airlock)")
	fset.StringVar(&digests, "digests", "", "digests file written by push")
	fset.StringVar(&out, "out", "", "directory to write the pinned copy of the chart into (replaced)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if chart == "" || digests == "" || out == "" {
		return errors.New("pin-chart: --chart, --digests and --out are required")
	}
	d, err := readDigests(digests)
	if err != nil {
		return err
	}
	if err := copyTree(chart, out); err != nil {
		return fmt.Errorf("copying %s: %w", chart, err)
	}
	values := filepath.Join(out, "values.yaml")
	b, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	pinned, err := pinValues(b, d)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(chart, "values.yaml"), err)
	}
	return os.WriteFile(values, pinned, 0o644)
}

// chartValues is the part of values.yaml that names images.
type chartValues struct {
	Image struct {
		Repository string            `json:"repository"`
		Digests    map[string]string `json:"digests"`
	} `json:"image"`
	SandboxTemplates map[string]struct {
		Image string `json:"image"`
	} `json:"sandboxTemplates"`
}

// pinValues rewrites values.yaml's text (its comments stay) so that image.repository is the registry pushed to,
// image.digests pins Airlock's own images, and every sandbox template whose image was pushed names it by
// digest. A template naming an image under the old repository that was not pushed is an error: the chart
// would point at an image the registry does not have.
func pinValues(src []byte, d *Digests) ([]byte, error) {
	var v chartValues
	if err := yaml.Unmarshal(src, &v); err != nil {
		return nil, err
	}
	oldRepo := strings.TrimSuffix(v.Image.Repository, "/")
	if oldRepo == "" {
		return nil, errors.New("image.repository is empty")
	}
	text := string(src)
	var err error
	if text, err = replaceOneLine(text, `(?m)^  repository: "?`+regexp.QuoteMeta(v.Image.Repository)+`"?$`, "  repository: "+d.Registry, "image.repository"); err != nil {
		return nil, err
	}
	block := "  digests:"
	for _, n := range chartImages {
		img, ok := d.Images[n]
		if !ok {
			return nil, fmt.Errorf("image %s was not pushed, and the chart runs it", n)
		}
		block += "\n    " + n + ": " + img.Digest
	}
	if text, err = replaceOneLine(text, `(?m)^  digests: \{\}$`, block, "image.digests (want `  digests: {}`)"); err != nil {
		return nil, err
	}
	// Templates may share an image: each image's lines are replaced once, for all of them.
	byImage := map[string]string{}
	for _, tpl := range sortedKeys(v.SandboxTemplates) {
		if _, seen := byImage[v.SandboxTemplates[tpl].Image]; !seen {
			byImage[v.SandboxTemplates[tpl].Image] = tpl
		}
	}
	for _, image := range sortedKeys(byImage) {
		if text, err = pinTemplateImage(text, byImage[image], image, oldRepo, d); err != nil {
			return nil, err
		}
	}
	return []byte(text), checkPinned([]byte(text), d)
}

// pinTemplateImage replaces the `image: OLD_REPO/NAME:TAG` lines of templates (tpl is one, for messages)
// with REGISTRY/NAME@DIGEST.
func pinTemplateImage(text, tpl, image, oldRepo string, d *Digests) (string, error) {
	rest, ok := strings.CutPrefix(image, oldRepo+"/")
	if !ok {
		return text, nil // an image of the operator's own choosing: theirs to pin
	}
	nameOnly, _, _ := strings.Cut(strings.Split(rest, "@")[0], ":")
	img, ok := d.Images[nameOnly]
	if !ok {
		return "", fmt.Errorf("sandboxTemplates.%s.image %s is under %s but %s was not pushed", tpl, image, oldRepo, nameOnly)
	}
	re := regexp.MustCompile(`(?m)^(\s+)image: "?` + regexp.QuoteMeta(image) + `"?$`)
	if !re.MatchString(text) {
		return "", fmt.Errorf("sandboxTemplates.%s.image: no line `image: %s`", tpl, image)
	}
	return re.ReplaceAllString(text, "${1}image: "+d.Registry+"/"+nameOnly+"@"+img.Digest), nil
}

func replaceOneLine(text, pattern, with, what string) (string, error) {
	re := regexp.MustCompile(pattern)
	if n := len(re.FindAllStringIndex(text, -1)); n != 1 {
		return "", fmt.Errorf("%s: found %d lines matching %s, want 1", what, n, pattern)
	}
	return re.ReplaceAllLiteralString(text, with), nil
}

// checkPinned reads the rewritten values back: the text edits must have produced what they meant.
func checkPinned(b []byte, d *Digests) error {
	var v chartValues
	if err := yaml.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("pinned values do not parse: %w", err)
	}
	if v.Image.Repository != d.Registry {
		return fmt.Errorf("pinned image.repository is %q, want %q", v.Image.Repository, d.Registry)
	}
	for _, n := range chartImages {
		if v.Image.Digests[n] != d.Images[n].Digest {
			return fmt.Errorf("pinned image.digests.%s is %q, want %q", n, v.Image.Digests[n], d.Images[n].Digest)
		}
	}
	for tpl, spec := range v.SandboxTemplates {
		if strings.HasPrefix(spec.Image, d.Registry+"/") && !strings.Contains(spec.Image, "@sha256:") {
			return fmt.Errorf("pinned sandboxTemplates.%s.image %s has no digest", tpl, spec.Image)
		}
	}
	return nil
}

// copyTree copies the regular files and directories of src to dst (replaced), keeping file modes.
func copyTree(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o755)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm())
		default:
			return fmt.Errorf("%s is neither a file nor a directory", path)
		}
	})
}
