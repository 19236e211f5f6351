// Package mcpserver serves Airlock sandboxes to agents as Model Context Protocol tools (run_command,
// run_python, write_file, read_file, list_files, create_sandbox, delete_sandbox). The tools act through the
// gateway's REST API with the caller's key (pkg/client), so every limit, quota and tenant boundary of that
// API holds for them too. The gateway serves them at /mcp over streamable HTTP; `airlock mcp` serves them over
// stdio. docs/mcp.md describes the behaviour.
package mcpserver
