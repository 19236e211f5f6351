package allowlist

import "testing"

func TestPermits(t *testing.T) {
	l, err := Parse([]string{"pypi.org", "*.pythonhosted.org", "registry.example:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port int
		want bool
	}{
		{"pypi.org", 443, true}, {"PyPI.org.", 80, true}, {"pypi.org", 8080, false},
		{"files.pythonhosted.org", 443, true}, {"a.b.pythonhosted.org", 443, true},
		{"pythonhosted.org", 443, false}, {"evilpythonhosted.org", 443, false},
		{"registry.example", 8443, true}, {"registry.example", 443, false},
		{"pypi.org.evil.com", 443, false}, {"10.0.0.1", 443, false}, {"::1", 443, false}, {"", 443, false},
	} {
		if got := l.Permits(c.host, c.port); got != c.want {
			t.Errorf("Permits(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{"", "10.0.0.1", "*.", "a..b", "http://pypi.org", "pypi.org:0", "pypi.org:x", "pypi.org/simple", "*", "a*.b.org", "[::1]"} {
		if _, err := Parse([]string{s}); err == nil {
			t.Errorf("Parse(%q) accepted it", s)
		}
	}
}

func TestCovers(t *testing.T) {
	tmpl, err := Parse([]string{"pypi.org", "*.pythonhosted.org", "registry.example:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{
		"pypi.org": true, "pypi.org:443": true, "pypi.org:8080": false, "files.pythonhosted.org": true,
		"*.files.pythonhosted.org": true, "*.pythonhosted.org": true, "pythonhosted.org": false,
		"registry.example:8443": true, "registry.example": false, "npmjs.org": false, "*.org": false, "bad host": false,
	} {
		if got := tmpl.Covers(s); got != want {
			t.Errorf("Covers(%q) = %v, want %v", s, got, want)
		}
	}
}
