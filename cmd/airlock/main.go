// Command airlock administers the exec gateway: tenants and their API keys.
//
//	airlock tenant create NAME [--max-sandboxes 20] [--templates-from NS] [--adopt]
//	airlock keys create --tenant T [--name X]     (prints the key once)
//	airlock keys list
//	airlock keys revoke ID [--delete]
//
// It uses the current kubeconfig ($KUBECONFIG or --kubeconfig).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/admin"
)

const usage = `Usage: airlock <command> [flags]

Commands:
  tenant create NAME [--max-sandboxes N] [--templates-from NS] [--adopt]
        create a tenant namespace (label sandbox.airlock.dev/tenant=true, Pod Security "restricted", a quota
        of N sandboxes) and the RoleBinding that lets the gateway exec there, and only there; an existing
        namespace that is not a tenant needs --adopt. The gateway's names default to those of config/default
        and of a Helm release named airlock (its NOTES print the command for other names):
        --gateway-service-account airlock-gateway, --gateway-namespace (= --key-namespace),
        --exec-cluster-role airlock-gateway-exec
  keys create --tenant T [--name X]   create an API key for tenant T (a tenant namespace); printed once
  keys list                           list keys (never the keys themselves)
  keys revoke ID [--delete]           revoke a key (mark it revoked, or delete its Secret)

Every command takes --kubeconfig PATH and --key-namespace NS (where key Secrets live, default airlock-system).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return 0
		}
		return 2
	}
	cmd := args[0] + " " + args[1]
	fs := flag.NewFlagSet("airlock "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	config.RegisterFlags(fs)
	keyNS := fs.String("key-namespace", "airlock-system", "namespace of the API key Secrets")
	tenant := fs.String("tenant", "", "tenant (namespace) the key acts in")
	name := fs.String("name", "", "a label for the key")
	maxSandboxes := fs.Int64("max-sandboxes", 20, "most sandboxes the tenant may have at once")
	templatesFrom := fs.String("templates-from", "", "copy the SandboxTemplates of this namespace into the tenant")
	remove := fs.Bool("delete", false, "delete the key's Secret instead of marking it revoked")
	adopt := fs.Bool("adopt", false, "make an existing namespace a tenant (the gateway may then exec into every pod in it)")
	gatewaySA := fs.String("gateway-service-account", admin.DefaultGatewayServiceAccount, "the gateway's ServiceAccount, given pods/exec in the tenant")
	gatewayNS := fs.String("gateway-namespace", "", "namespace of the gateway's ServiceAccount (default: --key-namespace)")
	execRole := fs.String("exec-cluster-role", admin.DefaultExecClusterRole, "ClusterRole with the gateway's exec permission, bound in the tenant")
	// Positional arguments may come before flags: parse, then parse what remains.
	var pos []string
	rest := args[2:]
	for {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := newClient()
	if err != nil {
		fmt.Fprintln(stderr, "airlock:", err)
		return 1
	}
	switch {
	case cmd == "tenant create" && len(pos) == 1:
		if *gatewayNS == "" {
			*gatewayNS = *keyNS // keys live in the gateway's own namespace
		}
		err = admin.CreateTenant(ctx, c, pos[0], admin.TenantOptions{MaxSandboxes: *maxSandboxes, TemplatesFrom: *templatesFrom,
			Adopt: *adopt, GatewayServiceAccount: *gatewaySA, GatewayNamespace: *gatewayNS, ExecClusterRole: *execRole})
		if err == nil {
			fmt.Fprintf(stdout, "tenant %s ready: at most %d sandboxes; gateway %s/%s may exec there\n", pos[0], *maxSandboxes, *gatewayNS, *gatewaySA)
		}
	case cmd == "keys create" && len(pos) == 0 && *tenant != "":
		var key, id string
		key, id, err = admin.CreateKey(ctx, c, *keyNS, *tenant, *name)
		if err == nil {
			fmt.Fprintf(stderr, "key %s for tenant %s (shown once; store it now):\n", id, *tenant)
			fmt.Fprintln(stdout, key)
		}
	case cmd == "keys list" && len(pos) == 0:
		err = listKeys(ctx, c, *keyNS, stdout)
	case cmd == "keys revoke" && len(pos) == 1:
		err = admin.RevokeKey(ctx, c, *keyNS, pos[0], *remove)
		if err == nil {
			fmt.Fprintf(stdout, "key %s revoked\n", pos[0])
		}
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "airlock:", err)
		return 1
	}
	return 0
}

func listKeys(ctx context.Context, c client.Client, ns string, w io.Writer) error {
	keys, err := admin.ListKeys(ctx, c, ns)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tNAME\tCREATED\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", k.ID, k.Tenant, k.Name, k.Created.Format(time.RFC3339), k.Revoked)
	}
	return tw.Flush()
}

func newClient() (client.Client, error) {
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}
