package gateway

import (
	"errors"
	"path"
	"strings"
)

// maxPathLen bounds file paths (Linux PATH_MAX).
const maxPathLen = 4096

// ResolvePath turns p into a clean absolute path: an absolute p as it is, a relative one under root (the
// working directory). It does not confine: a transfer runs as the sandbox's user inside the sandbox, so a
// path can reach only what that user may read or write anyway. NUL bytes, newlines (the transfer tools report
// paths one a line, so a name with a newline could be written but never read back), over-long paths and ".."
// components (never needed, they only hide intent) are refused.
func ResolvePath(root, p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty")
	}
	if len(p) > maxPathLen || strings.ContainsRune(p, 0) {
		return "", errors.New("path is too long or contains a NUL byte")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", errors.New(`path must not contain ".."`)
		}
	}
	full := path.Clean(p)
	if !strings.HasPrefix(p, "/") {
		full = path.Join(path.Clean("/"+root), p)
	}
	// Bound the result too: a short relative path can exceed the limit once joined to root.
	if len(full) > maxPathLen {
		return "", errors.New("path is too long")
	}
	// Checked on the result, so that a working directory with a newline is refused too.
	if strings.Contains(full, "\n") {
		return "", errors.New("path must not contain a newline")
	}
	return full, nil
}
