package gateway

import (
	"path"
	"strings"
	"testing"
)

func TestResolvePath(t *testing.T) {
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
		// Absolute paths anywhere: the sandbox user's own permissions decide.
		"/workspace/tool_call.py": "/workspace/tool_call.py",
		"/tmp//x/":                "/tmp/x",
		"/":                       "/",
	}
	for in, want := range ok {
		got, err := ResolvePath(root, in)
		if err != nil || got != want {
			t.Errorf("ResolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "..", "../x", "a/../../x", "a/../b", "/home/sandbox/../x", "a\x00b", "a\nb", "\n", "/x\n/y", strings.Repeat("a", 5000)} {
		if got, err := ResolvePath(root, bad); err == nil {
			t.Errorf("ResolvePath(%q) = %q, want an error", bad, got)
		}
	}
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"a", "../a", "/home/sandbox/../../etc", "a/./b/../c", "/", "//home/sandbox/x", "\x00", "...", "/tmp/x"} {
		f.Add(s)
	}
	const root = "/home/sandbox"
	f.Fuzz(func(t *testing.T, p string) {
		got, err := ResolvePath(root, p)
		if err != nil {
			return
		}
		if got != path.Clean(got) || !strings.HasPrefix(got, "/") {
			t.Fatalf("%q -> %q is not clean and absolute", p, got)
		}
		if !strings.HasPrefix(p, "/") && got != root && !strings.HasPrefix(got, root+"/") {
			t.Fatalf("relative %q left the working directory: %q", p, got)
		}
		if strings.ContainsAny(got, "\x00\n") || strings.Contains("/"+got+"/", "/../") {
			t.Fatalf("%q kept a NUL, a newline or ..: %q", p, got)
		}
		// Idempotent: a resolved path resolves to itself.
		if again, err := ResolvePath(root, got); err != nil || again != got {
			t.Fatalf("%q -> %q -> %q, %v", p, got, again, err)
		}
	})
}
