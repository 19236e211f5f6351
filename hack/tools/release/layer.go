package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerEntry is one file or directory of a layer.
type layerEntry struct {
	name     string
	mode     int64
	uid      int
	dir      bool
	contents []byte
}

// binaryLayer is the one layer of a binary image: /usr/local/bin/NAME, a passwd and group naming root and the
// non-root user, its home, /tmp and, if given, CA certificates. Every time is `created` and every owner fixed,
// so the same binary always makes the same layer digest.
func binaryLayer(binPath, name string, uid int, caCerts string, created time.Time) (v1.Layer, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	entries := []layerEntry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, contents: fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", uid)},
		{name: "etc/passwd", mode: 0o644, contents: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: uid, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: "usr/local/bin/" + name, mode: 0o755, contents: bin},
	}
	if caCerts != "" {
		certs, err := os.ReadFile(caCerts)
		if err != nil {
			return nil, fmt.Errorf("CA certificates: %w", err)
		}
		entries = append(entries,
			layerEntry{name: "etc/ssl/", mode: 0o755, dir: true},
			layerEntry{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			layerEntry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, contents: certs})
	}
	gz, err := gzipTar(entries, created)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// gzipTar writes entries, in order, as a gzipped tar with fixed times and owners (uid and gid alike).
func gzipTar(entries []layerEntry, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: created, Format: tar.FormatUSTAR}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.contents))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.contents); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
