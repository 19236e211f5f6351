package admin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// SystemNamespaceError says why name can never be a tenant, or returns nil. A tenant lets the gateway exec
// into every pod and read and create Secrets there, and the manager create pods there: never in Kubernetes'
// own namespaces (kube-*), in default (where anything may run), nor in Airlock's own (the gateway's, the
// manager's, the API keys'), whose names are given as own. The chart refuses the same names
// (templates/tenants.yaml).
func SystemNamespaceError(name string, own ...string) error {
	switch {
	case name == "default":
		return fmt.Errorf("namespace %s cannot be a tenant: it is Kubernetes' default namespace, where any workload may run; pick another name", name)
	case strings.HasPrefix(name, "kube-"):
		return fmt.Errorf("namespace %s cannot be a tenant: kube-* namespaces are Kubernetes' own (the gateway could exec into its system pods); pick another name", name)
	case slices.Contains(own, name):
		return fmt.Errorf("namespace %s cannot be a tenant: it is Airlock's own (gateway, manager or API keys); pick another name", name)
	}
	return nil
}

// validate checks name and the options before anything is written.
func (o TenantOptions) validate(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("tenant name %q: %s", name, errs[0])
	}
	if o.MaxSandboxes < 0 {
		return errors.New("max sandboxes must not be negative")
	}
	if o.GatewayServiceAccount != "" && (o.GatewayNamespace == "" || o.ExecClusterRole == "") {
		return errors.New("the gateway's exec binding needs its namespace and ClusterRole")
	}
	if o.ManagerServiceAccount != "" && (o.ManagerNamespace == "" || o.ManagerClusterRole == "") {
		return errors.New("the manager's binding needs its namespace and ClusterRole")
	}
	var own []string
	for _, ns := range []string{o.GatewayNamespace, o.ManagerNamespace, o.KeyNamespace} {
		if ns != "" {
			own = append(own, ns)
		}
	}
	return SystemNamespaceError(name, own...)
}
