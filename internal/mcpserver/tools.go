package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock.dev/airlock/internal/version"
	"airlock.dev/airlock/pkg/client"
)

// Options configure the tools of one MCP server.
type Options struct {
	// Backend returns what a tool call acts through, as its caller (hence in its tenant).
	Backend func(ctx context.Context, req *mcp.CallToolRequest) (Backend, error)
	// Create describes a session's sandbox (template, size, network; zero: the tenant's defaults).
	Create client.CreateOptions
	// Sessions holds the session → sandbox state; one table serves every server of a process.
	Sessions *Sessions
	// Connection says the transport is one connection (stdio): it is the session, whatever the protocol.
	Connection bool
}

// runPythonFile is where run_python writes the program, as the SDKs' RunTool does (relative: in the
// working directory).
const runPythonFile = ".airlock/run_python.py"

// CommandInput is run_command's input.
type CommandInput struct {
	Command   string `json:"command" jsonschema:"The shell command to run (sh -c)."`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"Time limit in milliseconds (default 60000); at the limit the command and everything it started are killed."`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"The sandbox to run in: the sandbox_id of an earlier result. Omit it in a session to use the session's sandbox."`
}

// PythonInput is run_python's input.
type PythonInput struct {
	Code      string `json:"code" jsonschema:"The complete Python program."`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"Time limit in milliseconds (default 60000)."`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"The sandbox to run in: the sandbox_id of an earlier result. Omit it in a session to use the session's sandbox."`
}

// ExecOutput is the structured result of run_command and run_python: the gateway's exec result and the
// sandbox it ran in.
type ExecOutput struct {
	SandboxID string `json:"sandbox_id"`
	client.ExecResult
}

// WriteInput is write_file's input.
type WriteInput struct {
	Path      string `json:"path" jsonschema:"The file's path; relative paths are relative to the working directory. Parent directories are created."`
	Content   string `json:"content" jsonschema:"The whole content of the file (text)."`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"The sandbox: the sandbox_id of an earlier result. Omit it in a session to use the session's sandbox."`
}

// PathInput is the input of read_file and list_files.
type PathInput struct {
	Path      string `json:"path,omitempty" jsonschema:"The path; relative paths are relative to the working directory (list_files defaults to it)."`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"The sandbox: the sandbox_id of an earlier result. Omit it in a session to use the session's sandbox."`
}

// FileOutput is the structured result of write_file and read_file.
type FileOutput struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	// Bytes is the file's size.
	Bytes int64 `json:"bytes"`
	// Content is the file's text (read_file only): all of it, or its first bytes when Truncated.
	Content string `json:"content,omitempty"`
	// Truncated says Content leaves out the file's last OmittedBytes (read_file only).
	Truncated    bool  `json:"truncated,omitempty"`
	OmittedBytes int64 `json:"omitted_bytes,omitempty"`
}

// ListOutput is list_files' structured result.
type ListOutput struct {
	SandboxID string            `json:"sandbox_id"`
	Path      string            `json:"path"`
	Entries   []client.FileInfo `json:"entries"`
}

// CreateInput is create_sandbox's input.
type CreateInput struct {
	Template       string `json:"template,omitempty" jsonschema:"The SandboxTemplate (default: the tenant's default)."`
	Size           string `json:"size,omitempty" jsonschema:"The size preset, e.g. small, medium, large."`
	Network        string `json:"network,omitempty" jsonschema:"none or restricted."`
	TimeoutMinutes int    `json:"timeout_minutes,omitempty" jsonschema:"The sandbox's lifetime in minutes (default the template's)."`
}

// SandboxInput is delete_sandbox's input.
type SandboxInput struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"The sandbox to delete. Omit it in a session to delete the session's sandbox."`
}

// SandboxOutput is the structured result of create_sandbox and delete_sandbox.
type SandboxOutput struct {
	SandboxID string       `json:"sandbox_id"`
	Deleted   bool         `json:"deleted,omitempty"`
	Info      *client.Info `json:"info,omitempty"`
}

// schemas caches the tools' schemas, inferred from their Go types: the gateway makes a server per new
// session and per sessionless request.
var schemas = mcp.NewSchemaCache()

// NewServer returns an MCP server with the sandbox tools.
func NewServer(opts Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "Airlock sandboxes", Version: version.Version},
		&mcp.ServerOptions{
			// All the SDK speaks, 2026-07-28 (sessionless) included, which it leaves out by default.
			SupportedProtocolVersions: mcp.SupportedProtocolVersions(),
			SchemaCache:               schemas,
			Instructions: "Tools to run commands and Python, and to move files, in a disposable Linux " +
				"sandbox. In a session the first call creates the session's sandbox and its end deletes it; without a " +
				"session every result gives sandbox_id, which later calls pass."})
	t := &tools{opts: opts}
	desc := map[string]string{}
	for _, d := range client.Tools(client.ToolContext{}) {
		desc[d.Name] = d.Description
	}
	yes, no := true, false
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Description: desc["run_command"],
		Annotations: &mcp.ToolAnnotations{Title: "Run a shell command", DestructiveHint: &yes, OpenWorldHint: &yes}}, t.runCommand)
	mcp.AddTool(s, &mcp.Tool{Name: "run_python", Description: desc["run_python"],
		Annotations: &mcp.ToolAnnotations{Title: "Run Python", DestructiveHint: &yes, OpenWorldHint: &yes}}, t.runPython)
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Description: "Write a text file in the sandbox, replacing it atomically (parent directories are created).",
		Annotations: &mcp.ToolAnnotations{Title: "Write a file", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Description: fmt.Sprintf("Read a text file from the sandbox: all of it, or as much as fits %d KiB "+
		"(a longer file's result says how much was left out; read the rest with run_command).", ReadFileTextLimit>>10),
		Annotations: &mcp.ToolAnnotations{Title: "Read a file", ReadOnlyHint: true, OpenWorldHint: &no}}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Description: "List a directory of the sandbox (not recursive): type (f file, d directory, l symlink), size and name.",
		Annotations: &mcp.ToolAnnotations{Title: "List files", ReadOnlyHint: true, OpenWorldHint: &no}}, t.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "create_sandbox", Description: "Create a sandbox explicitly, choosing its template, size and network; the result gives its sandbox_id. " +
		"In a session it becomes the session's sandbox (delete the current one first); otherwise pass sandbox_id to later calls.",
		Annotations: &mcp.ToolAnnotations{Title: "Create a sandbox", DestructiveHint: &no, OpenWorldHint: &no}}, t.createSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_sandbox", Description: "Delete the sandbox and everything in it. In a session the next call creates a new one.",
		Annotations: &mcp.ToolAnnotations{Title: "Delete the sandbox", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}, t.deleteSandbox)
	return s
}

type tools struct{ opts Options }

// session returns the call's session state, or nil for a sessionless call: over HTTP one without an
// Mcp-Session-Id (protocol 2026-07-28, served statelessly; see NewHTTPHandler).
func (t *tools) session(req *mcp.CallToolRequest) (*session, error) {
	if req.Session == nil || !t.opts.Connection && req.Session.ID() == "" {
		return nil, nil
	}
	return t.opts.Sessions.get(req.Session)
}

// sandbox resolves the sandbox of a call: the one named, else the session's (created on first use), else a
// new one whose id the result gives.
func (t *tools) sandbox(ctx context.Context, req *mcp.CallToolRequest, id string) (Backend, string, error) {
	b, err := t.opts.Backend(ctx, req)
	if err != nil {
		return nil, "", err
	}
	if id != "" {
		_, err := b.Get(ctx, id)
		if errors.Is(err, client.ErrNotFound) {
			return nil, "", fmt.Errorf("sandbox %s not found: it was deleted or expired, or is not yours; omit sandbox_id or call create_sandbox", id)
		}
		return b, id, explain(err)
	}
	st, err := t.session(req)
	if err != nil {
		return nil, "", err
	}
	if st != nil {
		id, err := st.sandbox(ctx, b, t.opts.Create)
		return b, id, explain(err)
	}
	info, err := b.Create(ctx, t.opts.Create)
	if err != nil {
		return nil, "", explain(err)
	}
	return b, info.ID, nil
}

// explain turns a gateway error into what the model (or its operator) should do.
func explain(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrQuotaExceeded):
		return fmt.Errorf("%w; delete a sandbox you no longer need (delete_sandbox) or end other sessions", err)
	case errors.Is(err, client.ErrNotReady):
		return fmt.Errorf("%w; try again in a few seconds", err)
	}
	return err
}

func (t *tools) runCommand(ctx context.Context, req *mcp.CallToolRequest, in CommandInput) (*mcp.CallToolResult, ExecOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, ExecOutput{}, errors.New("command is empty")
	}
	b, id, err := t.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	res, err := b.Exec(ctx, id, Command{Shell: in.Command, Timeout: time.Duration(in.TimeoutMS) * time.Millisecond})
	return execResult(id, res, err)
}

func (t *tools) runPython(ctx context.Context, req *mcp.CallToolRequest, in PythonInput) (*mcp.CallToolResult, ExecOutput, error) {
	b, id, err := t.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if err := b.WriteFile(ctx, id, runPythonFile, in.Code); err != nil {
		return nil, ExecOutput{}, err
	}
	res, err := b.Exec(ctx, id, Command{Argv: []string{"python3", runPythonFile}, Timeout: time.Duration(in.TimeoutMS) * time.Millisecond})
	return execResult(id, res, err)
}

// execResult is a command's observation (the SDKs' formatter) as text, the whole result as structured
// content. A failing command is a result; only a call that did not run is a tool error.
func execResult(id string, res *client.ExecResult, err error) (*mcp.CallToolResult, ExecOutput, error) {
	if err != nil {
		return nil, ExecOutput{}, explain(err)
	}
	obs := client.FormatObservation(res, client.ObservationOptions{}) + "\nsandbox_id: " + id
	return textResult(obs), ExecOutput{SandboxID: id, ExecResult: *res}, nil
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func (t *tools) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteInput) (*mcp.CallToolResult, FileOutput, error) {
	if in.Path == "" {
		return nil, FileOutput{}, errors.New("path is empty")
	}
	b, id, err := t.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, FileOutput{}, err
	}
	if err := b.WriteFile(ctx, id, in.Path, in.Content); err != nil {
		return nil, FileOutput{}, err
	}
	out := FileOutput{SandboxID: id, Path: in.Path, Bytes: int64(len(in.Content))}
	return textResult(fmt.Sprintf("wrote %d bytes to %s\nsandbox_id: %s", out.Bytes, in.Path, id)), out, nil
}

// readFile answers the file's text, or its start with a line saying what was left out, as exec output does.
func (t *tools) readFile(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, FileOutput, error) {
	if in.Path == "" {
		return nil, FileOutput{}, errors.New("path is empty")
	}
	b, id, err := t.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, FileOutput{}, err
	}
	ft, err := b.ReadText(ctx, id, in.Path, ReadFileTextLimit)
	if err != nil {
		return nil, FileOutput{}, err
	}
	out := FileOutput{SandboxID: id, Path: in.Path, Bytes: ft.Size, Content: ft.Text,
		Truncated: ft.Shown < ft.Size, OmittedBytes: ft.Size - ft.Shown}
	text := out.Content
	if out.Truncated {
		text += fmt.Sprintf("\n[airlock: %d bytes omitted; %s has %d bytes: read the rest with run_command, e.g. tail -c +%d]\n",
			out.OmittedBytes, in.Path, ft.Size, ft.Shown+1)
	}
	return textResult(text), out, nil
}

func (t *tools) listFiles(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, ListOutput, error) {
	if in.Path == "" {
		in.Path = "."
	}
	b, id, err := t.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ListOutput{}, err
	}
	entries, err := listDir(ctx, b, id, in.Path)
	if err != nil {
		return nil, ListOutput{}, err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d entries\n", in.Path, len(entries))
	for _, e := range entries {
		fmt.Fprintf(&sb, "%s %d %s\n", e.Type, e.Size, e.Name)
	}
	sb.WriteString("sandbox_id: " + id)
	return textResult(sb.String()), ListOutput{SandboxID: id, Path: in.Path, Entries: entries}, nil
}

func (t *tools) createSandbox(ctx context.Context, req *mcp.CallToolRequest, in CreateInput) (*mcp.CallToolResult, SandboxOutput, error) {
	b, err := t.opts.Backend(ctx, req)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	st, err := t.session(req)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	opts := client.CreateOptions{Template: in.Template, Size: in.Size, Network: in.Network, TimeoutMinutes: in.TimeoutMinutes}
	if st != nil {
		if cur := st.current(); cur != "" {
			return nil, SandboxOutput{}, fmt.Errorf("this session already has sandbox %s: call delete_sandbox first", cur)
		}
		opts.Metadata = map[string]string{MetadataSession: st.key}
	}
	info, err := b.Create(ctx, opts)
	if err != nil {
		return nil, SandboxOutput{}, explain(err)
	}
	if st != nil {
		st.adopt(b, info.ID)
	}
	return textResult(fmt.Sprintf("created sandbox %s (%s, template %s)\nsandbox_id: %s", info.ID, info.Status, info.Template, info.ID)),
		SandboxOutput{SandboxID: info.ID, Info: info}, nil
}

func (t *tools) deleteSandbox(ctx context.Context, req *mcp.CallToolRequest, in SandboxInput) (*mcp.CallToolResult, SandboxOutput, error) {
	b, err := t.opts.Backend(ctx, req)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	st, err := t.session(req)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	id := in.SandboxID
	if id == "" && st != nil {
		id = st.current()
	}
	if id == "" {
		return nil, SandboxOutput{}, errors.New("no sandbox to delete: pass sandbox_id")
	}
	err = b.Delete(ctx, id)
	if errors.Is(err, client.ErrNotFound) {
		return nil, SandboxOutput{}, fmt.Errorf("sandbox %s not found: it was deleted or expired, or is not yours", id)
	}
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	if st != nil {
		st.forget(id)
	}
	return textResult("deleted sandbox " + id), SandboxOutput{SandboxID: id, Deleted: true}, nil
}
