package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Facts are what the doctor read from the cluster.
type Facts struct {
	// ServerVersion is the API server's gitVersion.
	ServerVersion string
	// MutatingAdmissionPolicy: the API server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy.
	MutatingAdmissionPolicy bool
	Nodes                   []corev1.Node
	RuntimeClasses          []nodev1.RuntimeClass
	// Manager is the installed manager's container, nil when none was found in the install namespace.
	Manager *corev1.Container
	// InstallNamespace is where the manager was looked for.
	InstallNamespace string
	// CRDs: Airlock's Sandbox API is installed.
	CRDs bool
	// Probe is what the probe pod proved, nil when it did not run.
	Probe *ProbeResult
}

// Gather reads the facts from the cluster; the probe is run separately (Probe).
func Gather(ctx context.Context, c client.Client, dc discovery.DiscoveryInterface, installNamespace string) (*Facts, error) {
	f := &Facts{InstallNamespace: installNamespace}
	v, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	f.ServerVersion = v.GitVersion
	if f.MutatingAdmissionPolicy, err = serves(dc, "admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"); err != nil {
		return nil, err
	}
	if f.CRDs, err = serves(dc, "sandbox.airlock.dev/v1alpha1", "Sandbox"); err != nil {
		return nil, err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	f.Nodes = nodes.Items
	var rcs nodev1.RuntimeClassList
	if err := c.List(ctx, &rcs); err != nil {
		return nil, fmt.Errorf("listing RuntimeClasses: %w", err)
	}
	f.RuntimeClasses = rcs.Items
	slices.SortFunc(f.RuntimeClasses, func(a, b nodev1.RuntimeClass) int { return strings.Compare(a.Name, b.Name) })
	if f.Manager, err = findManager(ctx, c, installNamespace); err != nil {
		return nil, err
	}
	return f, nil
}

// serves tells whether the API server serves kind in groupVersion; a group it does not know is "no".
func serves(dc discovery.DiscoveryInterface, groupVersion, kind string) (bool, error) {
	list, err := dc.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", groupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Kind == kind {
			return true, nil
		}
	}
	return false, nil
}

// findManager returns the manager container of an Airlock install in namespace (the chart's and kustomize's
// Deployments both label it app.kubernetes.io/name=airlock), nil when there is none.
func findManager(ctx context.Context, c client.Client, namespace string) (*corev1.Container, error) {
	var deps appsv1.DeploymentList
	err := c.List(ctx, &deps, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/name": "airlock"})
	if err != nil && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("listing Deployments in %s: %w", namespace, err)
	}
	for i := range deps.Items {
		for _, ctr := range deps.Items[i].Spec.Template.Spec.Containers {
			if ctr.Name == "manager" {
				return &ctr, nil
			}
		}
	}
	return nil, nil
}

// managerArg is the value of the manager's --name= argument, "" when it has none.
func managerArg(m *corev1.Container, name string) string {
	if m == nil {
		return ""
	}
	for _, a := range append(slices.Clone(m.Command), m.Args...) {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}
