package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"airlock.dev/airlock/pkg/client"
)

// deleteTimeout bounds run's deletion of its sandbox, which happens also after Ctrl-C.
const deleteTimeout = 30 * time.Second

// execFlags describe one command (exec and run).
type execFlags struct {
	sh       string
	timeout  time.Duration
	asJSON   bool
	cwd      string
	env      []string
	stdin    bool
	maxBytes int64
}

func (f *execFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.sh, "sh", "", "run this shell command (sh -c) instead of the argv after --")
	c.Flags().DurationVar(&f.timeout, "timeout", client.DefaultExecTimeout, "the command's time limit; at it the command is killed and airlock exits 124")
	c.Flags().BoolVar(&f.asJSON, "json", false, "print the whole result as JSON instead of streaming the output")
	c.Flags().StringVar(&f.cwd, "cwd", "", "directory to run in (default the sandbox's working directory)")
	c.Flags().StringArrayVarP(&f.env, "env", "e", nil, "environment variable of the command, KEY=VALUE (repeatable)")
	c.Flags().BoolVarP(&f.stdin, "stdin", "i", false, "send this terminal's standard input to the command (read to its end first)")
	c.Flags().Int64Var(&f.maxBytes, "max-output-bytes", 0, "per-stream output the gateway returns (default the template's); the rest is saved in the sandbox")
}

// command splits the arguments after -- (argv) from --sh.
func (f *execFlags) command(cmd *cobra.Command, args []string, before int) ([]string, error) {
	dash := cmd.ArgsLenAtDash()
	var argv []string
	if dash >= 0 {
		if dash != before {
			return nil, usagef("want %d argument(s) before --, got %d", before, dash)
		}
		argv = args[dash:]
	} else if len(args) != before {
		return nil, usagef("put the command after --, e.g. -- python3 -c 'print(1)', or use --sh 'CMD'")
	}
	switch {
	case f.sh != "" && len(argv) > 0:
		return nil, usagef("give either --sh or a command after --, not both")
	case f.sh == "" && len(argv) == 0:
		return nil, usagef("no command: put it after --, e.g. -- ls -la, or use --sh 'ls | wc -l'")
	}
	return argv, nil
}

// runCommand runs argv (or f.sh) in sbx, streaming its output unless --json, and returns the exit code.
func (f *execFlags) runCommand(ctx context.Context, s streams, sbx *client.Sandbox, argv []string) error {
	env, err := parseEnv(f.env)
	if err != nil {
		return err
	}
	opts := client.ExecOptions{Timeout: f.timeout, Cwd: f.cwd, Env: env, MaxOutputBytes: f.maxBytes}
	if f.stdin {
		b, err := io.ReadAll(s.in)
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		in := string(b)
		opts.Stdin = &in
	}
	if !f.asJSON {
		opts.OnStdout = func(d string) error { _, err := io.WriteString(s.out, d); return err }
		opts.OnStderr = func(d string) error { _, err := io.WriteString(s.errOut, d); return err }
	}
	var res *client.ExecResult
	if f.sh != "" {
		res, err = sbx.Exec(ctx, f.sh, opts)
	} else {
		res, err = sbx.ExecArgv(ctx, argv, opts)
	}
	if err != nil {
		if ctx.Err() != nil {
			return exitCode{exitNoRun}.with(s, errors.New("interrupted: the command was abandoned"))
		}
		return exitCode{exitNoRun}.with(s, explain(err))
	}
	if f.asJSON {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(s.out, "%s\n", b)
	} else {
		reportResult(s.errOut, sbx.ID, res)
	}
	if code := commandExit(res); code != 0 {
		return exitCode{code}
	}
	return nil
}

// with prints err on stderr and returns e.
func (e exitCode) with(s streams, err error) exitCode {
	fmt.Fprintln(s.errOut, errorLine(err))
	return e
}

// reportResult says on stderr what the output does not: how the command ended if not by exiting, and what
// of the output was cut.
func reportResult(w io.Writer, id string, res *client.ExecResult) {
	switch res.Outcome {
	case "timeout":
		fmt.Fprintf(w, "airlock: the command ran out of time after %s and was killed (exit %d)\n", res.Duration().Round(time.Millisecond), exitTimeout)
	case "signal":
		fmt.Fprintf(w, "airlock: the command was killed by signal %s\n", dash(res.Signal))
	case "oom":
		fmt.Fprintln(w, "airlock: the command was killed: the sandbox ran out of memory (try --size large)")
	case "output_limit":
		fmt.Fprintln(w, "airlock: the command was killed: it printed more than the output limit")
	case "sandbox_lost":
		fmt.Fprintf(w, "airlock: the sandbox stopped answering; the command's exit status is unknown (%s)\n", res.Detail)
	}
	for _, st := range []struct {
		name string
		t    client.StreamTruncation
	}{{"stdout", res.Truncation.Stdout}, {"stderr", res.Truncation.Stderr}} {
		if !st.t.Truncated {
			continue
		}
		// The live output had everything the gateway received; the cut is in the result it keeps.
		if st.t.FullOutputPath != "" {
			fmt.Fprintf(w, "airlock: %s was cut in the result: %d bytes omitted (the live output above is whole); all of it: airlock cp %s:%s .\n", st.name, st.t.OmittedBytes, id, st.t.FullOutputPath)
		} else {
			fmt.Fprintf(w, "airlock: %s was cut in the result: %d bytes omitted (the live output above is whole; not saved in the sandbox)\n", st.name, st.t.OmittedBytes)
		}
	}
	if res.Truncated && !res.Truncation.Stdout.Truncated && !res.Truncation.Stderr.Truncated {
		fmt.Fprintln(w, "airlock: the output was cut")
	}
	if res.OutputIncomplete {
		fmt.Fprintln(w, "airlock: part of the output was lost before it reached the gateway")
	}
}

// commandExit is the CLI's exit code for a result: the command's status, 124 for a timeout, 128+N for a
// signal, 125 when the status is unknown.
func commandExit(res *client.ExecResult) int {
	switch res.Outcome {
	case "timeout":
		return exitTimeout
	case "signal", "oom", "output_limit":
		if n := unix.SignalNum(res.Signal); n != 0 {
			return 128 + int(n)
		}
		if res.Outcome == "oom" {
			return 128 + int(unix.SIGKILL)
		}
	}
	if res.ExitCode >= 0 && res.ExitCode <= 255 {
		return res.ExitCode
	}
	return exitNoRun
}

func newExecCmd(g *gatewayFlags, s streams) *cobra.Command {
	var f execFlags
	c := &cobra.Command{
		Use:   "exec ID [flags] -- CMD [ARGS...]",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox: the argv after -- (no shell), or --sh 'CMD' with sh -c. Its output streams to
this terminal's stdout and stderr as it comes, and airlock exits with the command's exit code: 124 when it ran
out of time (--timeout), 128+N when killed by signal N, 125 when it could not be run. What the gateway cut of
the output is said on stderr, with the file in the sandbox that has all of it. --json prints the whole
result instead.`,
		Example: `  airlock exec sbx-7k2q9 -- python3 -c 'print(6*7)'
  airlock exec sbx-7k2q9 --sh 'pip list | grep numpy'
  airlock exec sbx-7k2q9 --timeout 10m -- make test
  echo 'print(1)' | airlock exec sbx-7k2q9 -i -- python3 -
  airlock exec sbx-7k2q9 --json -- ls / | jq .exit_code`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeSandboxes(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv, err := f.command(cmd, args, 1)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sbx, err := c.Connect(cmd.Context(), args[0])
			if err != nil {
				return exitCode{exitNoRun}.with(s, explain(err))
			}
			return f.runCommand(cmd.Context(), s, sbx, argv)
		},
	}
	f.register(c)
	return c
}

func newRunCmd(g *gatewayFlags, s streams) *cobra.Command {
	var cf createFlags
	var f execFlags
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a command in a new sandbox, then delete it",
		Long: `Create a sandbox, run one command in it as 'airlock exec' does, and delete the sandbox, also when the
command fails or on Ctrl-C. The exit code is the command's (124: timeout; 125: it could not be run).`,
		Example: `  airlock run -- python3 -c 'print(6*7)'
  airlock run --template python-node --network none --sh 'python3 -V && node -v'
  airlock run -i -- python3 - < script.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			argv, err := f.command(cmd, args, 0)
			if err != nil {
				return err
			}
			opts, err := cf.options()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sbx, err := c.Create(cmd.Context(), opts)
			if err != nil {
				if cmd.Context().Err() != nil {
					return exitCode{exitNoRun}.with(s, errors.New("interrupted before the sandbox was ready; if one was made, 'airlock ls' shows it"))
				}
				return exitCode{exitNoRun}.with(s, explain(err))
			}
			defer func() {
				// Also after Ctrl-C: the deletion must not share the cancelled context.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), deleteTimeout)
				defer cancel()
				if err := sbx.Terminate(ctx); err != nil {
					fmt.Fprintf(s.errOut, "airlock: deleting sandbox %s: %v\nremove it with 'airlock rm %s'\n", sbx.ID, explain(err), sbx.ID)
				}
			}()
			err = f.runCommand(cmd.Context(), s, sbx, argv)
			var ec exitCode
			if errors.As(err, &ec) && cmd.Context().Err() != nil {
				fmt.Fprintf(s.errOut, "airlock: deleting sandbox %s\n", sbx.ID)
			}
			return err
		},
	}
	cf.register(c, false)
	f.register(c)
	return c
}
