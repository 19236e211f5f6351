// Command airlock drives Airlock from a terminal: sandboxes, commands and files over the exec gateway
// (create, ls, get, rm, extend, exec, cp, run, login, mcp), and the administration of tenants and their API
// keys, and a cluster's readiness for Airlock, over the Kubernetes API (tenant, keys, doctor). Installed as kubectl-airlock it is also `kubectl airlock`.
// docs/cli.md describes every command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes besides a command's own status (exec, run): as timeout(1) and env(1) give them.
const (
	exitError   = 1   // airlock failed
	exitUsage   = 2   // wrong arguments or flags
	exitTimeout = 124 // the command ran out of time (client.ExitTimeout)
	exitNoRun   = 125 // exec/run: the command could not be run
)

// exitCode ends the CLI with code after the message (if any) was printed.
type exitCode struct{ code int }

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError marks an error in the arguments: exit 2, with a pointer to --help.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, filepath.Base(os.Args[0]), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// streams are the CLI's standard streams (tests give buffers).
type streams struct {
	in          io.Reader
	out, errOut io.Writer
}

// run executes the CLI as program name (airlock, or kubectl-airlock as a kubectl plugin) and returns the exit
// code.
func run(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(name, streams{in: stdin, out: stdout, errOut: stderr})
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var ec exitCode
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.code
	case errors.As(err, &ue) || isCobraUsage(err):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", root.Name(), err, commandPath(root, args))
		return exitUsage
	}
	fmt.Fprintln(stderr, errorLine(err))
	return exitError
}

// errorLine is err as the CLI prints it: prefixed once with "airlock: " (the SDK's errors already are).
func errorLine(err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, "airlock: ") {
		return msg
	}
	return "airlock: " + err.Error()
}

// isCobraUsage tells cobra's own argument and flag errors (which it returns as plain errors).
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "requires at most", "requires exactly", "required flag"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, " "+p) {
			return true
		}
	}
	return false
}

// commandPath names the command args invoke, for the usage hint.
func commandPath(root *cobra.Command, args []string) string {
	if c, _, err := root.Find(args); err == nil {
		return c.CommandPath()
	}
	return root.Name()
}

func newRoot(name string, s streams) *cobra.Command {
	g := &gatewayFlags{}
	root := &cobra.Command{
		Use:   "airlock",
		Short: "Disposable sandboxes for AI agents, from a terminal",
		Long: `airlock drives Airlock sandboxes over its exec gateway, and administers tenants and API keys over the
Kubernetes API.

The gateway commands need its URL and an API key: --api-url and --api-key, else AIRLOCK_API_URL and
AIRLOCK_API_KEY, else the file written by 'airlock login'. An operator creates keys with 'airlock keys create'.`,
		Example: `  airlock login --api-url http://localhost:8080 --api-key alk_...
  airlock run -- python3 -c 'print(6*7)'
  ID=$(airlock create --template python-node)
  airlock exec $ID --sh 'pip list | head'
  airlock cp main.py $ID:/workspace/main.py
  airlock rm $ID`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.url, "api-url", "", "gateway URL (default $AIRLOCK_API_URL, else the login file)")
	root.PersistentFlags().StringVar(&g.key, "api-key", "", "API key (default $AIRLOCK_API_KEY, else the login file)")
	root.PersistentFlags().StringVar(&g.configFile, "config", "", "the login file (default "+defaultConfigHint()+")")
	root.AddGroup(&cobra.Group{ID: "sandbox", Title: "Sandboxes (over the gateway):"},
		&cobra.Group{ID: "admin", Title: "Administration (over the Kubernetes API):"})
	for _, c := range []*cobra.Command{
		newCreateCmd(g, s), newListCmd(g, s), newGetCmd(g, s), newRemoveCmd(g, s), newExtendCmd(g, s),
		newExecCmd(g, s), newCpCmd(g, s), newRunCmd(g, s), newLoginCmd(g, s), newMCPCmd(g, s),
	} {
		c.GroupID = "sandbox"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newTenantCmd(s), newKeysCmd(s), newDoctorCmd(s)} {
		c.GroupID = "admin"
		root.AddCommand(c)
	}
	if name == "kubectl-airlock" {
		// kubectl's plugin convention: the help shows how it is called.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl airlock"}
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return root
}
