package mcpserver

import (
	"context"
	"fmt"
	"net/http"

	"airlock.dev/airlock/pkg/client"
)

// ClientBackend acts through the gateway's REST API with c's key (`airlock mcp` on stdio).
func ClientBackend(c *client.Client) Backend { return clientBackend{c} }

type clientBackend struct{ c *client.Client }

func (b clientBackend) Create(ctx context.Context, opts client.CreateOptions) (*client.Info, error) {
	sbx, err := b.c.Create(ctx, opts)
	if err != nil {
		return nil, err
	}
	return sbx.Info(ctx)
}

func (b clientBackend) Get(ctx context.Context, id string) (*client.Info, error) {
	sbx, err := b.c.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	return sbx.Info(ctx)
}

func (b clientBackend) List(ctx context.Context) ([]client.Info, error) { return b.c.List(ctx) }

func (b clientBackend) Delete(ctx context.Context, id string) error {
	sbx, err := b.c.Connect(ctx, id)
	if err != nil {
		return err
	}
	return sbx.Terminate(ctx)
}

func (b clientBackend) Exec(ctx context.Context, id string, cmd Command) (*client.ExecResult, error) {
	sbx, err := b.c.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	opts := client.ExecOptions{Timeout: cmd.Timeout}
	if len(cmd.Argv) > 0 {
		return sbx.ExecArgv(ctx, cmd.Argv, opts)
	}
	return sbx.Exec(ctx, cmd.Shell, opts)
}

func (b clientBackend) WriteFile(ctx context.Context, id, path, content string) error {
	sbx, err := b.c.Connect(ctx, id)
	if err != nil {
		return err
	}
	return sbx.Files.Write(ctx, path, []byte(content))
}

// ReadText downloads the whole file (the gateway bounds it and masks its secrets) and keeps its start.
func (b clientBackend) ReadText(ctx context.Context, id, path string, maxText int) (*FileText, error) {
	sbx, err := b.c.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	data, err := sbx.Files.Read(ctx, path)
	if err != nil {
		return nil, err
	}
	text, n, ok := FitText(data, maxText, false, nil)
	if !ok {
		return nil, NotText(path, n)
	}
	return &FileText{Text: text, Size: int64(len(data)), Shown: int64(n)}, nil
}

// NotText is ReadText's error for a file that is not UTF-8 text at byte at.
func NotText(path string, at int) error {
	return &client.Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: "path",
		Message: fmt.Sprintf("%s is not UTF-8 text (byte %d is not); look at it with run_command, e.g. xxd or base64", path, at)}
}
