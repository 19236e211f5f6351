package main

import (
	"context"
	"fmt"

	"github.com/go-logr/stdr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"airlock.dev/airlock/internal/mcpserver"
)

func newMCPCmd(g *gatewayFlags, s streams) *cobra.Command {
	var cf createFlags
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox tools over MCP on stdio (for desktop MCP clients)",
		Long: `Serve the Model Context Protocol on stdin and stdout, with the same tools as the gateway's /mcp
(run_command, run_python, write_file, read_file, list_files, create_sandbox, delete_sandbox), acting through
the gateway with your key. The session's sandbox is created on the first tool call (--template, --size,
--network) and deleted when the client closes the session. Logs go to stderr. docs/mcp.md shows a desktop
client's configuration.`,
		Example: `  airlock mcp
  AIRLOCK_API_URL=http://localhost:8080 AIRLOCK_API_KEY=alk_... airlock mcp --template python-node --network none`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := cf.options()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			log := stdr.New(stdLogger{s})
			sessions := mcpserver.NewSessions(log)
			defer sessions.Close() // the sandbox goes with the process
			backend := mcpserver.ClientBackend(c)
			srv := mcpserver.NewServer(mcpserver.Options{Sessions: sessions, Create: opts, Connection: true,
				Backend: func(context.Context, *mcp.CallToolRequest) (mcpserver.Backend, error) { return backend, nil }})
			err = srv.Run(cmd.Context(), &mcp.StdioTransport{})
			if err != nil && cmd.Context().Err() == nil {
				return fmt.Errorf("mcp: %w", err)
			}
			return nil
		},
	}
	cf.register(c, false)
	return c
}

// stdLogger logs to stderr: stdout carries the protocol.
type stdLogger struct{ s streams }

func (l stdLogger) Output(_ int, msg string) error {
	_, err := fmt.Fprintln(l.s.errOut, "airlock mcp:", msg)
	return err
}
