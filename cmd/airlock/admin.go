package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/admin"
)

// adminTimeout bounds one administrative command.
const adminTimeout = 30 * time.Second

// kubeFlags are the flags of every administrative command.
type kubeFlags struct {
	kubeconfig, keyNamespace string
}

func (k *kubeFlags) register(c *cobra.Command) {
	c.PersistentFlags().StringVar(&k.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	c.PersistentFlags().StringVar(&k.keyNamespace, "key-namespace", admin.DefaultKeyNamespace, "namespace of the API key Secrets (the gateway's --key-namespace)")
}

// restConfig is the current kubeconfig's, or --kubeconfig's.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	if k.kubeconfig != "" {
		// controller-runtime reads its own --kubeconfig flag of the standard flag set.
		if err := flag.Set(config.KubeconfigFlagName, k.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w (set KUBECONFIG or --kubeconfig)", err)
	}
	return cfg, nil
}

// client returns a Kubernetes client with airlock's API, for the current kubeconfig or --kubeconfig.
func (k *kubeFlags) client() (client.Client, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

func newTenantCmd(s streams) *cobra.Command {
	k := &kubeFlags{}
	tenant := &cobra.Command{Use: "tenant", Short: "Manage tenants (namespaces the gateway serves)",
		Example: "  airlock tenant create team-a --max-sandboxes 20 --templates-from airlock-system",
		Args:    cobra.NoArgs, RunE: needsSubcommand}
	k.register(tenant)
	var opts admin.TenantOptions
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant namespace and let the gateway exec and the manager create sandboxes there",
		Long: `Create a tenant namespace (label sandbox.airlock.dev/tenant=true, Pod Security "restricted", a quota of
--max-sandboxes sandboxes) and the RoleBindings that let the gateway exec there and the manager create sandbox
pods and their NetworkPolicies there, and only there. An existing namespace that is not a tenant needs --adopt.
default, kube-* and Airlock's own namespaces (gateway, manager, API keys) are refused. The names default to
those of config/default and of a Helm release named airlock (its NOTES print the command for other names).`,
		Example: `  airlock tenant create team-a
  airlock tenant create team-b --max-sandboxes 5 --templates-from airlock-system
  airlock tenant create legacy-ns --adopt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := k.client()
			if err != nil {
				return err
			}
			if opts.ManagerNamespace == "" {
				opts.ManagerNamespace = opts.GatewayNamespace // one install namespace, unless told otherwise
			}
			opts.KeyNamespace = k.keyNamespace
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			if err := admin.CreateTenant(ctx, c, args[0], opts); err != nil {
				return err
			}
			fmt.Fprintf(s.out, "tenant %s ready: at most %d sandboxes; gateway %s/%s may exec there, manager %s/%s may create sandboxes there\n",
				args[0], opts.MaxSandboxes, opts.GatewayNamespace, opts.GatewayServiceAccount, opts.ManagerNamespace, opts.ManagerServiceAccount)
			return nil
		},
	}
	f := create.Flags()
	f.Int64Var(&opts.MaxSandboxes, "max-sandboxes", 20, "most sandboxes the tenant may have at once")
	f.StringVar(&opts.TemplatesFrom, "templates-from", "", "copy the SandboxTemplates of this namespace into the tenant")
	f.BoolVar(&opts.Adopt, "adopt", false, "make an existing namespace a tenant (the gateway may then exec into every pod in it)")
	f.StringVar(&opts.GatewayServiceAccount, "gateway-service-account", admin.DefaultGatewayServiceAccount, "the gateway's ServiceAccount, given pods/exec in the tenant")
	f.StringVar(&opts.GatewayNamespace, "gateway-namespace", admin.DefaultGatewayNamespace, "namespace of the gateway's ServiceAccount")
	f.StringVar(&opts.ExecClusterRole, "exec-cluster-role", admin.DefaultExecClusterRole, "ClusterRole with the gateway's exec permission, bound in the tenant")
	f.StringVar(&opts.ManagerServiceAccount, "manager-service-account", admin.DefaultManagerServiceAccount, "the manager's ServiceAccount, given pod and NetworkPolicy writes in the tenant")
	f.StringVar(&opts.ManagerNamespace, "manager-namespace", "", "namespace of the manager's ServiceAccount (default: --gateway-namespace)")
	f.StringVar(&opts.ManagerClusterRole, "manager-cluster-role", admin.DefaultManagerClusterRole, "ClusterRole with the manager's per-tenant permission, bound in the tenant")
	tenant.AddCommand(create)
	return tenant
}

func newKeysCmd(s streams) *cobra.Command {
	k := &kubeFlags{}
	keys := &cobra.Command{Use: "keys", Short: "Manage API keys of tenants",
		Example: "  KEY=$(airlock keys create --tenant team-a --name ci)\n  airlock keys list\n  airlock keys revoke k7x2q9",
		Args:    cobra.NoArgs, RunE: needsSubcommand}
	k.register(keys)
	var tenant, name string
	create := &cobra.Command{
		Use:   "create --tenant T [--name X]",
		Short: "Create an API key for a tenant; it is printed once",
		Long:  "Create an API key for tenant T (a tenant namespace). The key goes to stdout, once: store it now.",
		Example: `  airlock keys create --tenant team-a --name ci
  airlock login --api-url http://localhost:8080 --api-key "$(airlock keys create --tenant team-a)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := k.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			key, id, err := admin.CreateKey(ctx, c, k.keyNamespace, tenant, name)
			if err != nil {
				return err
			}
			fmt.Fprintf(s.errOut, "key %s for tenant %s (shown once; store it now):\n", id, tenant)
			fmt.Fprintln(s.out, key)
			return nil
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "tenant (namespace) the key acts in")
	create.Flags().StringVar(&name, "name", "", "a label for the key")
	_ = create.MarkFlagRequired("tenant")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List API keys (never the keys themselves)",
		Example: "  airlock keys list --key-namespace airlock-keys",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := k.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			return listKeys(ctx, c, k.keyNamespace, s.out)
		},
	}
	var remove bool
	revoke := &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke an API key (mark it revoked, or delete its Secret)",
		Example: "  airlock keys revoke k7x2q9\n  airlock keys revoke k7x2q9 --delete",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := k.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			if err := admin.RevokeKey(ctx, c, k.keyNamespace, args[0], remove); err != nil {
				return err
			}
			fmt.Fprintf(s.out, "key %s revoked\n", args[0])
			return nil
		},
	}
	revoke.Flags().BoolVar(&remove, "delete", false, "delete the key's Secret instead of marking it revoked")
	keys.AddCommand(create, list, revoke)
	return keys
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

// needsSubcommand is the RunE of a command group called alone: its help, and the usage exit code.
func needsSubcommand(cmd *cobra.Command, _ []string) error {
	_ = cmd.Help()
	return exitCode{exitUsage}
}
