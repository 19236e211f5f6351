package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"airlock.dev/airlock/pkg/client"
)

// explain adds what to do to a gateway error.
func explain(err error) error {
	var e *client.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrAuthentication) && errors.As(err, &e) && e.Status == 403:
		return fmt.Errorf("%w\nthe key's namespace is not a tenant: an operator runs 'airlock tenant create NAME'", err)
	case errors.Is(err, client.ErrAuthentication):
		return fmt.Errorf("%w\nthe key is wrong or revoked: run 'airlock login' with a key from 'airlock keys create --tenant TENANT'", err)
	case errors.Is(err, client.ErrQuotaExceeded):
		return fmt.Errorf("%w\nsee the running ones with 'airlock ls' and remove some with 'airlock rm ID...'", err)
	case errors.Is(err, client.ErrNotFound):
		return fmt.Errorf("%w\n'airlock ls' lists your sandboxes", err)
	case errors.Is(err, client.ErrNotReady):
		return fmt.Errorf("%w\nwait for it with 'airlock get ID' (status ready), or create another", err)
	case errors.Is(err, client.ErrRateLimited), errors.Is(err, client.ErrClusterUnavailable):
		return fmt.Errorf("%w\ntry again shortly", err)
	}
	return err
}

// outputFlag is --output: table, json or yaml.
type outputFlag struct{ format string }

func (o *outputFlag) register(c *cobra.Command) {
	c.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table, json or yaml")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

func (o *outputFlag) check() error {
	switch o.format {
	case "table", "json", "yaml":
		return nil
	}
	return usagef("--output %q: want table, json or yaml", o.format)
}

// print writes v as JSON or YAML, or calls table.
func (o *outputFlag) print(w io.Writer, v any, table func(*tabwriter.Writer)) error {
	switch o.format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

const sandboxHeader = "ID\tSTATUS\tTEMPLATE\tSIZE\tNETWORK\tAGE\tEXPIRES"

func sandboxRow(tw io.Writer, i client.Info, now time.Time) {
	expires := "-"
	if i.ExpiresAt != nil {
		expires = "in " + i.ExpiresAt.Sub(now).Round(time.Second).String()
		if i.ExpiresAt.Before(now) {
			expires = "expired"
		}
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Status, dash(i.Template), dash(i.Size), dash(i.Network),
		now.Sub(i.CreatedAt).Round(time.Second), expires)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// completeSandboxes completes sandbox ids from the gateway (silently nothing when it cannot be asked).
func completeSandboxes(g *gatewayFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list, err := c.List(cmd.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, i := range list {
			out = append(out, cobra.CompletionWithDesc(i.ID, i.Status+" "+i.Template))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// createFlags describe a new sandbox (create and run).
type createFlags struct {
	template, size, network string
	timeout                 time.Duration
	env                     []string
}

// register adds the flags; run has its own --timeout (the command's) and --env (the command's).
func (f *createFlags) register(c *cobra.Command, lifetime bool) {
	c.Flags().StringVar(&f.template, "template", "", "SandboxTemplate (default: the gateway's default template)")
	c.Flags().StringVar(&f.size, "size", "", "size preset of the template, e.g. small, medium, large")
	c.Flags().StringVar(&f.network, "network", "", "none or restricted (default: the template's)")
	if lifetime {
		c.Flags().DurationVar(&f.timeout, "timeout", 0, "the sandbox's lifetime, e.g. 30m (default: the template's); whole minutes")
		c.Flags().StringArrayVar(&f.env, "env", nil, "environment variable of the sandbox, KEY=VALUE (repeatable)")
	}
	_ = c.RegisterFlagCompletionFunc("network", cobra.FixedCompletions([]string{"none", "restricted"}, cobra.ShellCompDirectiveNoFileComp))
}

func (f *createFlags) options() (client.CreateOptions, error) {
	opts := client.CreateOptions{Template: f.template, Size: f.size, Network: f.network}
	if f.timeout != 0 {
		if f.timeout < time.Minute || f.timeout%time.Minute != 0 {
			return opts, usagef("--timeout %s: want whole minutes, e.g. 30m or 2h", f.timeout)
		}
		opts.TimeoutMinutes = int(f.timeout / time.Minute)
	}
	env, err := parseEnv(f.env)
	if err != nil {
		return opts, err
	}
	opts.Env = env
	return opts, nil
}

func parseEnv(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--env %q: want KEY=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

func newCreateCmd(g *gatewayFlags, s streams) *cobra.Command {
	var f createFlags
	var noWait bool
	var out outputFlag
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox, wait until it is ready, and print its id (with --output json or yaml: all of it). It
lives until its timeout or 'airlock rm'.`,
		Example: `  ID=$(airlock create)
  airlock create --template python-node --size large --timeout 2h --network restricted
  airlock create --env API_BASE=https://example.com -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			opts, err := f.options()
			if err != nil {
				return err
			}
			opts.NoWait = noWait
			c, err := g.client()
			if err != nil {
				return err
			}
			sbx, err := c.Create(cmd.Context(), opts)
			if err != nil {
				return explain(err)
			}
			if out.format == "table" {
				fmt.Fprintln(s.out, sbx.ID)
				return nil
			}
			info, err := sbx.Info(cmd.Context())
			if err != nil {
				return explain(err)
			}
			return out.print(s.out, info, nil)
		},
	}
	f.register(c, true)
	c.Flags().BoolVar(&noWait, "no-wait", false, "return as soon as the sandbox is created, before it is ready")
	c.Flags().StringVarP(&out.format, "output", "o", "table", "output format: table (the id alone), json or yaml")
	return c
}

func newListCmd(g *gatewayFlags, s streams) *cobra.Command {
	var out outputFlag
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your sandboxes",
		Example: "  airlock ls\n  airlock ls -o json | jq -r '.[].id'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context())
			if err != nil {
				return explain(err)
			}
			if list == nil {
				list = []client.Info{}
			}
			now := time.Now()
			return out.print(s.out, list, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, sandboxHeader)
				for _, i := range list {
					sandboxRow(tw, i, now)
				}
			})
		},
	}
	out.register(c)
	return c
}

func newGetCmd(g *gatewayFlags, s streams) *cobra.Command {
	var out outputFlag
	c := &cobra.Command{
		Use:               "get ID",
		Short:             "Show one sandbox",
		Example:           "  airlock get sbx-7k2q9\n  airlock get sbx-7k2q9 -o yaml",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxes(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sbx, err := c.Connect(cmd.Context(), args[0])
			if err != nil {
				return explain(err)
			}
			info, err := sbx.Info(cmd.Context())
			if err != nil {
				return explain(err)
			}
			return out.print(s.out, info, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, sandboxHeader)
				sandboxRow(tw, *info, time.Now())
			})
		},
	}
	out.register(c)
	return c
}

func newRemoveCmd(g *gatewayFlags, s streams) *cobra.Command {
	c := &cobra.Command{
		Use:               "rm ID...",
		Aliases:           []string{"delete"},
		Short:             "Delete sandboxes",
		Long:              "Delete sandboxes and everything in them. A sandbox already gone is not an error.",
		Example:           "  airlock rm sbx-7k2q9\n  airlock rm $(airlock ls -o json | jq -r '.[].id')",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeSandboxes(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var failed error
			for _, id := range args {
				sbx, err := c.Connect(cmd.Context(), id)
				if errors.Is(err, client.ErrNotFound) {
					fmt.Fprintf(s.out, "%s already gone\n", id)
					continue
				}
				if err == nil {
					err = sbx.Terminate(cmd.Context())
				}
				if err != nil {
					fmt.Fprintf(s.errOut, "airlock: rm %s: %v\n", id, explain(err))
					failed = exitCode{exitError}
					continue
				}
				fmt.Fprintf(s.out, "%s deleted\n", id)
			}
			return failed
		},
	}
	return c
}

func newExtendCmd(g *gatewayFlags, s streams) *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "extend ID --timeout 60m",
		Short: "Extend a sandbox's lifetime",
		Long: `Set a sandbox's total lifetime, counted from its creation, to --timeout (only up, at most the template's
maximum).`,
		Example:           "  airlock extend sbx-7k2q9 --timeout 60m\n  airlock extend sbx-7k2q9 --timeout 4h",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxes(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < time.Minute || timeout%time.Minute != 0 {
				return usagef("--timeout %s: want whole minutes, e.g. 60m or 2h", timeout)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sbx, err := c.Connect(cmd.Context(), args[0])
			if err != nil {
				return explain(err)
			}
			if err := sbx.SetTimeout(cmd.Context(), int(timeout/time.Minute)); err != nil {
				return explain(err)
			}
			info, err := sbx.Info(cmd.Context())
			if err != nil {
				return explain(err)
			}
			if info.ExpiresAt != nil {
				fmt.Fprintf(s.out, "%s expires at %s\n", info.ID, info.ExpiresAt.Local().Format(time.RFC3339))
			} else {
				fmt.Fprintf(s.out, "%s extended\n", info.ID)
			}
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 0, "the new total lifetime, e.g. 60m")
	_ = c.MarkFlagRequired("timeout")
	return c
}
