package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Tool formats: what ToolDefinitions and Client.Tools return.
const (
	FormatAnthropic = "anthropic" // {"name", "description", "input_schema"}
	FormatOpenAI    = "openai"    // {"type": "function", "function": {"name", "description", "parameters"}}
)

// ToolContext is what the tool descriptions tell a model about its sandbox. The gateway fills it from the
// template (GET /v1/tools); the zero value describes the defaults without claims about the image.
type ToolContext struct {
	// Installed says what the image has, e.g. "Python 3.11 (python, pip), Node.js 22, git, gcc".
	Installed string
	// WorkingDir is where commands start (default /home/sandbox).
	WorkingDir string
	// Network is "none" or "restricted" (empty: not stated).
	Network string
	// DefaultTimeout is a command's limit when the model gives none (default 60s).
	DefaultTimeout time.Duration
}

// Tool is one model tool, provider-neutral.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the tool's input.
	Parameters map[string]any
}

// Tools returns run_command and run_python for tc.
func Tools(tc ToolContext) []Tool {
	if tc.WorkingDir == "" {
		tc.WorkingDir = "/home/sandbox"
	}
	if tc.DefaultTimeout <= 0 {
		tc.DefaultTimeout = DefaultExecTimeout
	}
	ms := tc.DefaultTimeout.Milliseconds()
	var env strings.Builder
	if tc.Installed != "" {
		env.WriteString(" Installed: " + strings.TrimSuffix(tc.Installed, ".") + ".")
	}
	fmt.Fprintf(&env, " The working directory is %s; files written and packages installed there persist between calls"+
		" within this conversation.", tc.WorkingDir)
	env.WriteString(" Stdin is closed, so interactive commands (prompts, editors, REPLs) wait and time out: pass" +
		" non-interactive flags such as -y.")
	switch tc.Network {
	case "none":
		env.WriteString(" The sandbox has no network access: downloads (pip install, npm install, curl) fail.")
	case "restricted":
		env.WriteString(" Network access is restricted to the destinations the platform allows; others fail.")
	}
	env.WriteString(" The result gives the exit code, then the end of stderr and stdout; long output keeps its tail" +
		" and names the file in the sandbox with all of it.")
	timeout := map[string]any{"type": "integer", "minimum": 1, "default": ms,
		"description": fmt.Sprintf("Time limit in milliseconds (default %d); at the limit the command and everything it started are killed.", ms)}
	return []Tool{
		{
			Name: "run_command",
			Description: fmt.Sprintf("Run one shell command (sh -c) in a Linux sandbox, time limit %d ms unless timeout_ms says otherwise.", ms) +
				env.String(),
			Parameters: map[string]any{"type": "object", "required": []string{"command"}, "properties": map[string]any{
				"command":    map[string]any{"type": "string", "description": "The shell command to run."},
				"timeout_ms": timeout,
			}},
		},
		{
			Name: "run_python",
			Description: fmt.Sprintf("Run a Python program in a Linux sandbox (written to a file and run with python3), time limit %d ms; print what you need to see.", ms) +
				env.String(),
			Parameters: map[string]any{"type": "object", "required": []string{"code"}, "properties": map[string]any{
				"code": map[string]any{"type": "string", "description": "The complete Python program."},
			}},
		},
	}
}

// ToolDefinitions returns the tools for tc in a provider's format (FormatAnthropic or FormatOpenAI), ready
// for its tools parameter.
func ToolDefinitions(format string, tc ToolContext) ([]map[string]any, error) {
	tools := Tools(tc)
	out := make([]map[string]any, 0, len(tools))
	for _, t := range tools {
		switch format {
		case FormatAnthropic:
			out = append(out, map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.Parameters})
		case FormatOpenAI:
			out = append(out, map[string]any{"type": "function", "function": map[string]any{
				"name": t.Name, "description": t.Description, "parameters": t.Parameters}})
		default:
			return nil, fmt.Errorf("airlock: tool format %q: want %q or %q", format, FormatAnthropic, FormatOpenAI)
		}
	}
	return out, nil
}

// Tools fetches the tools the gateway describes for a template (empty: the default template), in format.
func (c *Client) Tools(ctx context.Context, template, format string) ([]map[string]any, error) {
	q := url.Values{"format": {format}}
	if template != "" {
		q.Set("template", template)
	}
	var out struct {
		Tools []map[string]any `json:"tools"`
	}
	resp, err := c.do(ctx, request{method: "GET", path: "/v1/tools", query: q})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("airlock: decoding tools: %w", err)
	}
	return out.Tools, nil
}

// runPythonFile is where RunTool writes run_python's program (relative: in the working directory).
const runPythonFile = ".airlock/run_python.py"

// RunTool runs a model's call of run_command or run_python (its JSON input) and returns the observation
// for the model. A failing command is an observation; only a call that could not run is an error.
func (s *Sandbox) RunTool(ctx context.Context, name string, input json.RawMessage, obs ObservationOptions) (string, error) {
	var in struct {
		Command   string `json:"command"`
		Code      string `json:"code"`
		TimeoutMS int64  `json:"timeout_ms"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return "", fmt.Errorf("airlock: %s input: %w", name, err)
	}
	opts := ExecOptions{Timeout: time.Duration(in.TimeoutMS) * time.Millisecond}
	var res *ExecResult
	var err error
	switch name {
	case "run_command":
		res, err = s.Exec(ctx, in.Command, opts)
	case "run_python":
		if err = s.Files.Write(ctx, runPythonFile, []byte(in.Code)); err == nil {
			res, err = s.ExecArgv(ctx, []string{"python3", runPythonFile}, opts)
		}
	default:
		return "", fmt.Errorf("airlock: unknown tool %q", name)
	}
	if err != nil {
		return "", err
	}
	return FormatObservation(res, obs), nil
}
