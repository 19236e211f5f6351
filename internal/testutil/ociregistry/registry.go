// Package ociregistry runs a real OCI registry (CNCF distribution, built by hack/build-registry.sh) on
// loopback for a test, and reads from it over the distribution API with plain net/http: a reader independent
// of the go-containerregistry code that pushed.
package ociregistry

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
)

// Registry is a running registry: Host is 127.0.0.1:PORT (plain HTTP).
type Registry struct {
	Host string
}

// Start runs binary (distribution's `registry`) on a free loopback port with storage in a temporary directory,
// waits until it answers /v2/, and stops it when the test ends. The process dies with the test binary.
func Start(t testing.TB, binary string) *Registry {
	t.Helper()
	dir := t.TempDir()
	host := freeLoopbackAddr(t)
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), host)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := child.DieWithParent(exec.Command(binary, "serve", cfgPath))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the registry %s: %v", binary, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("registry log:\n%s", tail(string(b), 4000))
		}
	})
	r := &Registry{Host: host}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("the registry exited at start (%v):\n%s", err, tail(string(b), 4000))
		default:
		}
		if resp, err := http.Get("http://" + host + "/v2/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry on %s did not answer /v2/ within 30s", host)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Media types a client accepts for a manifest: image indexes and images, OCI and Docker.
const acceptManifests = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, " +
	"application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json"

// Manifest fetches repo's manifest ref (a tag or digest) and returns its bytes, media type and digest. The
// digest is the body's SHA-256, and must be what the registry says it serves (Docker-Content-Digest).
func (r *Registry) Manifest(repo, ref string) ([]byte, string, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+r.Host+"/v2/"+repo+"/manifests/"+ref, nil)
	if err != nil {
		return nil, "", "", err
	}
	req.Header.Set("Accept", acceptManifests)
	body, resp, err := do(req)
	if err != nil {
		return nil, "", "", fmt.Errorf("manifest %s:%s: %w", repo, ref, err)
	}
	digest := Digest(body)
	if served := resp.Header.Get("Docker-Content-Digest"); served != digest {
		return nil, "", "", fmt.Errorf("manifest %s:%s: body hashes to %s, the registry says %s", repo, ref, digest, served)
	}
	return body, resp.Header.Get("Content-Type"), digest, nil
}

// Blob fetches a blob and checks it hashes to its digest.
func (r *Registry) Blob(repo, digest string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+r.Host+"/v2/"+repo+"/blobs/"+digest, nil)
	if err != nil {
		return nil, err
	}
	body, _, err := do(req)
	if err != nil {
		return nil, fmt.Errorf("blob %s@%s: %w", repo, digest, err)
	}
	if got := Digest(body); got != digest {
		return nil, fmt.Errorf("blob %s@%s hashes to %s", repo, digest, got)
	}
	return body, nil
}

// BlobSize asks (HEAD) for a blob without reading it and returns its size.
func (r *Registry) BlobSize(repo, digest string) (int64, error) {
	resp, err := http.Head("http://" + r.Host + "/v2/" + repo + "/blobs/" + digest)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("blob %s@%s: %s", repo, digest, resp.Status)
	}
	return resp.ContentLength, nil
}

func do(req *http.Request) ([]byte, *http.Response, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s: %s", resp.Status, tail(string(body), 300))
	}
	return body, resp, nil
}

// Digest is the OCI digest (sha256:HEX) of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
