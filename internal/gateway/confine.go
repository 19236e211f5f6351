package gateway

import (
	"errors"
	"path"
	"strings"
)

// maxPathLen bounds file paths (Linux PATH_MAX).
const maxPathLen = 4096

var errPathOutside = errors.New("path must stay inside the sandbox's working directory")

// ConfinePath resolves p (absolute, or relative to root) lexically and returns the absolute path, which is
// root itself or below it. ".." that would climb out, NUL bytes and over-long paths are refused. Symlinks
// are not seen here: the in-sandbox check (files.go) resolves them with realpath.
func ConfinePath(root, p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty")
	}
	if len(p) > maxPathLen || strings.ContainsRune(p, 0) {
		return "", errors.New("path is too long or contains a NUL byte")
	}
	root = path.Clean("/" + root)
	var full string
	if strings.HasPrefix(p, "/") {
		full = path.Clean(p)
	} else {
		full = path.Join(root, p)
	}
	// Reject any ".." component, even one that would stay inside: it is never needed and hides intent.
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", errPathOutside
		}
	}
	if !within(root, full) {
		return "", errPathOutside
	}
	// Bound the result too: a short relative path can exceed the limit once joined to root.
	if len(full) > maxPathLen {
		return "", errors.New("path is too long")
	}
	return full, nil
}

// within reports whether clean absolute path p is root or below it.
func within(root, p string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}
