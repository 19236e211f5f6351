// Package rbacenv runs tests against a real kube-apiserver (envtest) with an install's RBAC: it applies the
// RBAC objects of YAML manifests, mints ServiceAccount tokens, acts as a ServiceAccount, asks the API server
// what an identity may do (SubjectAccessReview) and scrapes a /metrics endpoint with a token.
package rbacenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running API server and an admin clientset for it.
type Env struct {
	Config *rest.Config
	CS     kubernetes.Interface
}

// Start starts envtest with the binaries in assets ("" : $KUBEBUILDER_ASSETS) and stops it when t ends. A
// missing binary fails the test: a skip would prove nothing.
func Start(t testing.TB, assets string) *Env {
	t.Helper()
	if assets == "" && os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run 'make test-integration' (it builds the binaries)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return &Env{Config: cfg, CS: kubernetes.NewForConfigOrDie(cfg)}
}

// User is the username of ServiceAccount ns/name.
func User(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }

// ApplyFiles applies the RBAC objects (and ServiceAccounts and Namespaces) of YAML files; see Apply.
func (e *Env) ApplyFiles(t testing.TB, files ...string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e.Apply(t, string(b))
	}
}

// Apply creates the Namespaces, ServiceAccounts, ClusterRoles, ClusterRoleBindings, Roles and RoleBindings of
// a multi-document manifest, creating the namespaces they live in; other kinds are skipped (RBAC is what is
// under test). Objects that exist already are left as they are.
func (e *Env) Apply(t testing.TB, manifest string) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("parsing manifest: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := e.create(u); err != nil {
			t.Fatalf("%s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
}

func (e *Env) create(u unstructured.Unstructured) error {
	ctx := context.Background()
	if ns := u.GetNamespace(); ns != "" {
		if err := ignoreExists(e.createNamespace(ns)); err != nil {
			return err
		}
	}
	var err error
	switch u.GetKind() {
	case "Namespace":
		err = e.createNamespace(u.GetName())
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err = convert(u, &o); err == nil {
			_, err = e.CS.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err = convert(u, &o); err == nil {
			_, err = e.CS.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err = convert(u, &o); err == nil {
			_, err = e.CS.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "Role":
		var o rbacv1.Role
		if err = convert(u, &o); err == nil {
			_, err = e.CS.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err = convert(u, &o); err == nil {
			_, err = e.CS.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	}
	return ignoreExists(err)
}

func (e *Env) createNamespace(name string) error {
	_, err := e.CS.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func convert(u unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Token creates ServiceAccount ns/name (if missing) and returns a token for it.
func (e *Env) Token(t testing.TB, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if err := ignoreExists(e.createNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	_, err := e.CS.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err := ignoreExists(err); err != nil {
		t.Fatal(err)
	}
	tr, err := e.CS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// As is the admin config impersonating user: what that identity's own credentials could do.
func (e *Env) As(user string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// Access is one request an identity may or may not be allowed.
type Access struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
}

func (a Access) String() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Group != "" {
		r += "." + a.Group
	}
	return fmt.Sprintf("%s %s %s/%s", a.Verb, r, a.Namespace, a.Name)
}

// Allowed asks the API server's authorizer whether user may do a.
func (e *Env) Allowed(t testing.TB, user string, a Access) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
		Groups: []string{"system:serviceaccounts", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: a.Group, Resource: a.Resource,
			Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name}}}
	out, err := e.CS.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s for %s: %v", a, user, err)
	}
	return out.Status.Allowed
}

// Scrape GETs url with token as bearer ("" sends none), accepting any server certificate as a scraper
// configured for a self-signed one does. It returns the status (0 when the request failed) and the body.
func Scrape(url, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed, as Prometheus is configured
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// WaitServing waits until url answers at all (any status), failing t after 20 s.
func WaitServing(t testing.TB, url string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, _ := Scrape(url, ""); code != 0 {
			return
		}
	}
	t.Fatalf("%s does not answer after 20s", url)
}
