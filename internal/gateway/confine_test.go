package gateway

import (
	"path"
	"strings"
	"testing"
)

func TestConfinePath(t *testing.T) {
	root := "/home/sandbox"
	ok := map[string]string{
		"a.txt":                        "/home/sandbox/a.txt",
		"dir/b":                        "/home/sandbox/dir/b",
		"./c":                          "/home/sandbox/c",
		"/home/sandbox/x/y":            "/home/sandbox/x/y",
		"/home/sandbox":                "/home/sandbox",
		"d//e/":                        "/home/sandbox/d/e",
		"/home/sandbox/./f":            "/home/sandbox/f",
		"name with spaces and ümlauts": "/home/sandbox/name with spaces and ümlauts",
	}
	for in, want := range ok {
		got, err := ConfinePath(root, in)
		if err != nil || got != want {
			t.Errorf("ConfinePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "..", "../x", "a/../../x", "a/../b", "/etc/passwd", "/home/sandboxer/x", "/home",
		"/", "a\x00b", strings.Repeat("a", 5000)} {
		if got, err := ConfinePath(root, bad); err == nil {
			t.Errorf("ConfinePath(%q) = %q, want an error", bad, got)
		}
	}
}

func FuzzConfinePath(f *testing.F) {
	for _, s := range []string{"a", "../a", "/home/sandbox/../../etc", "a/./b/../c", "/", "//home/sandbox/x", "\x00", "..."} {
		f.Add(s)
	}
	const root = "/home/sandbox"
	f.Fuzz(func(t *testing.T, p string) {
		got, err := ConfinePath(root, p)
		if err != nil {
			return
		}
		if got != path.Clean(got) || !strings.HasPrefix(got, "/") {
			t.Fatalf("%q -> %q is not clean and absolute", p, got)
		}
		if got != root && !strings.HasPrefix(got, root+"/") {
			t.Fatalf("%q escaped to %q", p, got)
		}
		if strings.ContainsRune(got, 0) {
			t.Fatalf("%q kept a NUL", p)
		}
		// Idempotent: a confined path confines to itself.
		if again, err := ConfinePath(root, got); err != nil || again != got {
			t.Fatalf("%q -> %q -> %q, %v", p, got, again, err)
		}
	})
}
