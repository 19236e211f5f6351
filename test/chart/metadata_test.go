package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The repository's licence, and where each published package says so.
const (
	licence     = "Apache-2.0"
	projectHome = "https://airlock.dev"
	projectSrc  = "https://airlock.dev/airlock"
)

// TestPackagesDeclareTheRepositorysLicence: the LICENSE file is Apache 2.0, and the chart, the Python SDK and
// the npm package declare that licence, the same home page and the same sources, so no published artifact
// contradicts another.
func TestPackagesDeclareTheRepositorysLicence(t *testing.T) {
	root := repoRoot(t)
	read := func(rel string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	lic := string(read("LICENSE"))
	if !strings.Contains(lic, "Apache License") || !strings.Contains(lic, "Version 2.0, January 2004") || !strings.Contains(lic, "END OF TERMS AND CONDITIONS") {
		t.Error("LICENSE is not the full Apache License 2.0 text")
	}

	var chart struct {
		Home        string            `json:"home"`
		Sources     []string          `json:"sources"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(read("charts/airlock/Chart.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Home != projectHome || len(chart.Sources) != 1 || chart.Sources[0] != projectSrc || chart.Annotations["artifacthub.io/license"] != licence {
		t.Errorf("Chart.yaml: home %q, sources %v, licence annotation %q; want %s, [%s], %s",
			chart.Home, chart.Sources, chart.Annotations["artifacthub.io/license"], projectHome, projectSrc, licence)
	}

	var npm struct {
		License    string   `json:"license"`
		Homepage   string   `json:"homepage"`
		Files      []string `json:"files"`
		Repository struct {
			URL string `json:"url"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(read("sdk/typescript/package.json"), &npm); err != nil {
		t.Fatal(err)
	}
	if npm.License != licence || npm.Homepage != projectHome || npm.Repository.URL != projectSrc || !strings.Contains(strings.Join(npm.Files, " "), "LICENSE") {
		t.Errorf("sdk/typescript/package.json: license %q, homepage %q, repository %q, files %v", npm.License, npm.Homepage, npm.Repository.URL, npm.Files)
	}

	py := string(read("sdk/python/pyproject.toml"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^license = \{text = "` + regexp.QuoteMeta(licence) + `"\}$`),
		regexp.MustCompile(`(?m)^Homepage = "` + regexp.QuoteMeta(projectHome) + `"$`),
		regexp.MustCompile(`(?m)^Source = "` + regexp.QuoteMeta(projectSrc) + `"$`),
	} {
		if !want.MatchString(py) {
			t.Errorf("sdk/python/pyproject.toml has no line matching %s", want)
		}
	}
}
