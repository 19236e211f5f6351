// Package mcpserver serves Airlock sandboxes to agents as Model Context Protocol tools (run_command,
// run_python, write_file, read_file, list_files, create_sandbox, delete_sandbox). The tools act through a
// Backend as their caller: in the gateway (/mcp, over streamable HTTP) its service layer, in process; in
// `airlock mcp` (over stdio) the gateway's REST API with the caller's key (pkg/client). Either way every limit,
// quota and tenant boundary of the API holds for them. docs/mcp.md describes the behaviour.
package mcpserver
