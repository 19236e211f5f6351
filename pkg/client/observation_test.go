package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestFormatObservationGolden runs the vectors shared with the Python and TypeScript SDKs.
func TestFormatObservationGolden(t *testing.T) {
	files, err := filepath.Glob("../../sdk/testdata/observation/*.json")
	if err != nil || len(files) < 10 {
		t.Fatalf("golden vectors: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Name     string          `json:"name"`
			Result   json.RawMessage `json:"result"`
			Options  map[string]int  `json:"options"`
			Expected string          `json:"expected"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var res ExecResult
		if err := json.Unmarshal(v.Result, &res); err != nil {
			t.Fatalf("%s: result: %v", f, err)
		}
		opts := ObservationOptions{}
		if n, ok := v.Options["max_chars"]; ok {
			opts.MaxChars = n
			if n == 0 {
				opts.MaxChars = -1 // the spec's 0 ("no limit") is Go's negative: 0 is the default here
			}
		}
		if got := FormatObservation(&res, opts); got != v.Expected {
			t.Errorf("%s:\n got: %q\nwant: %q", v.Name, got, v.Expected)
		}
	}
}

func TestTailRunesKeepsCharacters(t *testing.T) {
	if got := tailRunes("a😀é", 2); got != "😀é" {
		t.Fatalf("tailRunes = %q", got)
	}
	if got := tailRunes("ab", 5); got != "ab" {
		t.Fatalf("tailRunes = %q", got)
	}
}
